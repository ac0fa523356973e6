"""The one rank program of the user's clock: the arms of a launch, trained one after another.

A launch's spec (JSON, from :func:`.common.launch`) names a task (:mod:`.tasks`), the
number of workers and a list of *arms*; every worker runs each arm in order and rank 0
emits one line (``benchlib.emit``) with every arm's measurements. An arm is:

* ``ddp``: ``DistributedDataParallel(model, bucket_cap_mb=...)``, as a user writes it;
* ``native``: ``autotune.session(model, **options)``;
* ``hook``: ``autotune.session(DistributedDataParallel(model), **options)`` (DDP on
  ``autotune.workers_group()`` where servers are in the world, docs/ddp.md);
* ``runtime``: one configuration fixed through the runtime directly (``Runtime.sync``,
  ``wait``; no session, no DDP), or ``"best"``: the fastest runtime arm so far in this
  launch (median step, its first step left out). Consecutive runtime arms share one
  runtime and one model.

Every other arm starts from a new task of the same seed: the same initial weights and
data order. An arm runs ``steps`` steps; or, with ``seconds``, until rank 0 has seen that
many seconds since the start line; or, with ``kept_steps`` (a session arm), until rank 0
has seen that many steps not tuning, ``steps`` at most (rank 0 decides: one 4-byte
broadcast a step on the workers' group, in every such arm alike).

The clock: the start line is a barrier of the workers, before DDP wraps the model or the
session opens; ``start_s`` runs from it to the first step, ``wall_s`` to the session's
close after the last step. Every step is timed the same way, on rank 0, from the forward
to the optimizer's end, in three parts: ``backward`` (forward and backward; with DDP its
all-reduce up to the last bucket), ``step`` (``session.step(loss=...)``, or the runtime's
wait) and ``optimizer``. A ``steps`` arm makes its batches before the start line; a
``seconds`` arm in the loop, on the clock. With a task whose average is known (``exact``),
every 10th step's averaged gradients (and a ``steps`` arm's last step's) are checked
exactly in arms that allow no codec (off the step's time).

``snapshots``: rank 0 keeps that many copies of the parameters over a ``seconds`` arm (a
copy, about a millisecond) and evaluates them on held-out data after the arm, off the
clock: the validation curve ``(seconds, step, loss)``.

Servers (``AUTOTUNE_ROLE=server``) serve each group of runtime arms (one bootstrap) and a
session arm (a session on a stand-in model: it serves, then leaves the process), and wait
out a DDP arm (DDP runs on the workers' group), so a launch with servers holds at most one
session arm, last. A launch of one
group of runtime arms, or of one session arm, may have ``python -m autotune.server`` as its
servers instead (``autotune launch -k``): the workers ask nothing else of them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from typing import Any

from benchlib import emit, median, patch_depth
from userclock.tasks import build

PARTS = ("backward", "step", "optimizer")
CHECK_EVERY = 10
SESSIONS = ("native", "hook")


def main(spec: dict) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from autotune.runtime.data import trace

    torch.set_num_threads(1)
    patch_depth(spec.get("depth"))
    timeout = timedelta(seconds=spec["timeout"])
    dist.init_process_group("gloo", timeout=timeout)
    server = os.environ.get("AUTOTUNE_ROLE") == "server"
    # the workers' own group, made by the workers alone (a server may be autotune.server
    # itself): the start line, a seconds arm's stop flag and, with servers, DDP's group
    side = None if server else dist.new_group(list(range(spec["workers"])), backend="gloo",
                                              timeout=timeout, use_local_synchronization=True)
    if spec.get("trace"):  # diagnosis only: every rank's operations, for timeline.py
        trace.start()
    try:
        if server:
            _serve(spec)
        else:
            arms = _work(spec, side)
            if dist.get_rank() == 0:
                emit({"arms": arms})
    finally:
        if spec.get("trace"):
            trace.dump(spec["trace"], dist.get_rank(), "server" if server else "worker")
    dist.destroy_process_group()


def _serve(spec: dict) -> None:
    import torch

    import autotune
    from autotune.runtime import Runtime
    from autotune.server import serve

    for runtime, arms in itertools.groupby(spec["arms"], key=lambda a: a["kind"] == "runtime"):
        if runtime:
            rt = Runtime.bootstrap(timeout=spec["timeout"])
            serve(rt)
            rt.shutdown()
            continue
        for arm in arms:
            if arm["kind"] in SESSIONS:  # serves, then leaves the process
                with autotune.session(torch.nn.Linear(1, 1), store=False,
                                      timeout=spec["timeout"]):
                    pass


def _work(spec: dict, side: Any) -> list[dict]:
    import torch.distributed as dist

    from autotune.runtime import Runtime

    rank, workers = dist.get_rank(), spec["workers"]
    servers = dist.get_world_size() > workers
    done: list[dict] = []
    arms = spec["arms"]
    rt = task = None
    for i, arm in enumerate(arms):
        if arm["kind"] == "runtime" and rt is None:  # a group of runtime arms begins
            task = build(spec["task"], rank, workers)
            rt = Runtime.bootstrap(timeout=spec["timeout"])
            rt.register(task.model.parameters())
        elif arm["kind"] != "runtime":
            task = build(spec["task"], rank, workers)
        done.append(_arm(arm, task, side, rt, done, servers))
        if rt is not None and (i + 1 == len(arms) or arms[i + 1]["kind"] != "runtime"):
            rt.sync(stop=True) if rank == 0 else rt.sync()
            rt.shutdown()
            rt = None
    return done


def _fastest(done: list[dict]) -> dict:
    """The configuration of the fastest runtime arm so far (median step, the first left
    out: it pays the switch)."""
    runs = [r for r in done if r["kind"] == "runtime"]
    if not runs:
        raise ValueError("a runtime arm's config 'best' needs a runtime arm before it")
    return min(runs, key=lambda r: median(r["step_s"][1:] or r["step_s"]))["config"]


def _arm(arm: dict, task: Any, side: Any, rt: Any, done: list[dict],
         servers: bool) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from autotune.workload import check_average

    rank = dist.get_rank()
    leader = rank == 0
    kind, label = arm["kind"], arm["label"]
    model, opt = task.model, task.optimizer()
    steps, seconds, kept = arm.get("steps"), arm.get("seconds"), arm.get("kept_steps")
    bucket_mb = arm.get("bucket_mb", 25.0)
    batches = [task.next_batch() for _ in range(steps)] if steps else None
    options = dict(arm.get("options") or {})
    check = task.exact is not None and not options.get("allow_lossy")
    cfg = None
    if kind == "runtime" and leader:
        cfg = _fastest(done) if arm["config"] == "best" else arm["config"]
    n_snaps = arm.get("snapshots", 0) if leader else 0
    snaps = [(0.0, 0, _copy(model))] if n_snaps else []
    every = seconds / n_snaps if n_snaps else 0.0

    dist.barrier(group=side)  # the start line
    t0 = time.perf_counter()
    if kind == "ddp":
        net: Any = DDP(model, bucket_cap_mb=bucket_mb, process_group=side if servers else None)
        ctx: Any = contextlib.nullcontext()
    elif kind == "runtime":
        net, ctx = model, contextlib.nullcontext()
    else:
        import autotune

        net = model if kind == "native" else DDP(
            model, bucket_cap_mb=bucket_mb,
            process_group=autotune.workers_group() if servers else None)
        ctx = autotune.session(net, **options)
    step_s: list[float] = []
    end_s: list[float] = []
    losses: list[float] = []
    tuning: list[bool] = []
    switches: list[list] = []
    parts = dict.fromkeys(PARTS, 0.0)
    flag = torch.zeros(1, dtype=torch.int32)
    i, next_snap, settled = 0, every, 0  # settled: steps not tuning, rank 0's count
    with ctx as session:
        start = time.perf_counter() - t0  # DDP's wrap, the session's start
        while True:
            x, y = batches[i] if batches is not None else task.next_batch()
            ta = time.perf_counter()
            if rt is not None:
                rt.sync(cfg)
            loss = task.loss(net, x, y)
            loss.backward()
            tb = time.perf_counter()
            busy = False
            if session is not None:
                busy = session.tuning  # warm-up or a trial (rank 0 knows)
                session.step(loss=loss)
            elif rt is not None:
                rt.wait()
            tc = time.perf_counter()
            i += 1
            if check and (i % CHECK_EVERY == 0 or i == steps):
                check_average(model, task.exact, f"rank {rank}: {label}, step {i}")
            td = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=False)
            te = time.perf_counter()
            now = te - t0
            if leader:
                step_s.append(tc - ta + te - td)
                end_s.append(now)
                losses.append(float(loss.detach()))
                for p, dt in zip(PARTS, (tb - ta, tc - tb, te - td)):
                    parts[p] += dt
                if session is not None:
                    tuning.append(busy)
                    settled += not busy
                    if not switches or switches[-1][2] != session.config:
                        switches.append([i, round(now, 4), dict(session.config)])
                if n_snaps and (now >= next_snap or (seconds and now >= seconds)):
                    snaps.append((now, i, _copy(model)))
                    next_snap = now + every
            done = bool(steps) and i >= steps
            if seconds or kept:  # rank 0 decides
                flag.fill_(int(leader and (done or bool(seconds) and now >= seconds
                                           or bool(kept) and settled >= kept)))
                dist.broadcast(flag, 0, group=side)
                done = bool(flag.item())
            if done:
                break
    wall = time.perf_counter() - t0
    out: dict[str, Any] = {"label": label, "kind": kind, "steps": i, "wall_s": wall,
                           "start_s": start, "parts_s": parts,
                           "step_s": [round(t, 5) for t in step_s],
                           "end_s": [round(t, 4) for t in end_s], "loss": losses}
    if kind == "runtime":
        out["config"] = dict(rt.config)
    if kind != "runtime":
        out["bucket_mb"] = bucket_mb
    if session is not None:
        busy_at = [j for j, b in enumerate(tuning) if b]
        out.update(tuning=tuning, switches=switches, best=session.best,
                   history=[_trial(r) for r in session.history],
                   tuning_iterations=session.tuning_iterations,
                   tuning_cost=session.tuning_cost,
                   tuning_end_s=end_s[busy_at[-1]] if busy_at and leader else None)
    if snaps:  # after the arm: nothing of this is on the clock
        model.eval()
        out["curve"] = []
        for t, s, state in snaps:
            model.load_state_dict(state)
            out["curve"].append((t, s, task.val_loss()))
    return out


def _copy(model: Any) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _trial(r: Any) -> dict[str, Any]:
    keys = ("index", "technique", "config", "iterations", "score", "error", "throughput",
            "efficiency")
    return {k: getattr(r, k) for k in keys if hasattr(r, k)}
