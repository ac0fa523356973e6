"""The user's clock: a whole job's wall time with autotune against plain DDP (root only).

Issue 48's "nothing to win" job: the small GPT of ``tta_bench`` (the zoo's GPT-2, 2 layers,
d = 128, on the bytes of the Python standard library's sources, AdamW, real compute, one
CPU thread a rank) trained for a fixed number of steps (``--steps``, 300) by ``--workers``
(2) emulated hosts on a fast link (``--rate``, 1gbit), where communication is a small part
of a step and tuning has little to win. Variants, each as a user would write it:

* ``ddp``: ``DistributedDataParallel(model)``;
* ``native``: ``autotune.session(model, total_steps=steps)``, its defaults otherwise
  (budget 100, the default store off so that runs do not warm-start each other);
* ``hook``: ``autotune.session(DistributedDataParallel(model), total_steps=steps)``.

The clock starts when every rank is at the start line, before DDP wraps the model or the
session opens, and stops after the last step: the session's start, its warm-up, its trials
and its close are all on it. Each variant runs ``--runs`` times (3), interleaved (run 1 of
every variant, then run 2, ...; run i uses seed ``--seed`` + i in every variant). The
table gives medians with their min-max spread, the ratio to DDP's median (the target: at
most 1.03), where rank 0's steps went (forward and backward, ``session.step()``, the
optimizer: sums over the job; the JSON also has the first 20 steps' times), the trial
iterations, what the session said tuning cost, and the training loss of the last 20
steps (the same data and start in every variant). ``--fixed`` pins knobs in the sessions
(with ``--budget 0``: one configuration's cost against DDP). JSON goes to
benchmarks/results/clock/clock.json:

    sudo .venv/bin/python benchmarks/clock_bench.py                 # ~5 min
    sudo .venv/bin/python benchmarks/clock_bench.py --steps 1000 --runs 1
    sudo .venv/bin/python benchmarks/clock_bench.py --rate 50mbit   # much to win
    sudo .venv/bin/python benchmarks/clock_bench.py --budget 0      # the runtime alone
    sudo .venv/bin/python benchmarks/clock_bench.py --unknown-length  # no total_steps
    sudo .venv/bin/python benchmarks/clock_bench.py --budget 0 --fixed '{"transport": "pushpull"}'
    sudo .venv/bin/python benchmarks/clock_bench.py --batch 16     # a step of about 50 ms

Much to win (``--model demo``): ``make demo``'s job instead of the GPT (ResNet-50's 161
gradients at base width 32, 26 MiB, with emulated compute: a 40 ms forward and a 120 ms
backward that yields the gradients in ready order; :mod:`autotune.workload`), on the
demo's cluster; the sessions may use the ``--servers`` hosts (``hook`` builds DDP on
``autotune.workers_group()`` there, docs/ddp.md; plain DDP runs on the worker hosts alone,
as in the demo). DDP takes about 400 s a run:

    sudo .venv/bin/python benchmarks/clock_bench.py --model demo --workers 4 --servers 4 --rate 300mbit

A tiny model (``--model mlp``, issue 59): an MLP of 332 KiB, SGD on random data, a step of a
few milliseconds, where whatever the session adds to a step shows:

    sudo .venv/bin/python benchmarks/clock_bench.py --model mlp --steps 3000

Each rank is this file again (``--job train``); a rank that fails stops the benchmark
with its name and output; every wait is bounded (``--rank-timeout``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import (RESULTS, add_cluster_args, emit, launch_json,  # noqa: E402
                      machine, median, report, require_emulator)

OUT_DIR = RESULTS / "clock"
VARIANTS = ("ddp", "native", "hook")
LABELS = {"ddp": "DDP", "native": "autotune.session(model)",
          "hook": "autotune.session(ddp_model)"}
TAIL = 20  # steps whose mean training loss is reported
# where a step's time goes, on rank 0: forward + backward (with DDP, its all-reduce up to
# the last bucket), session.step() (the wait for the average and the session's own work),
# the optimizer; their sums over the job are reported beside the wall time
PARTS = ("backward", "step", "optimizer")


def train_main(a: argparse.Namespace) -> None:
    """One rank: ``--steps`` steps of the GPT under ``--variant``; rank 0 emits the times."""
    import contextlib
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from tta_bench import GPTTask

    torch.set_num_threads(1)
    if os.environ.get("AUTOTUNE_ROLE") == "server":  # a Summation Service: serves, exits
        import autotune

        with autotune.session(torch.nn.Linear(1, 1), store=False, timeout=a.rank_timeout):
            pass
        return
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=timedelta(seconds=a.rank_timeout))
    task = (GPTTask(a.seed, rank, world, a.batch) if a.model == "gpt"
            else MLPTask(a.seed, rank, a.batch) if a.model == "mlp" else DemoTask(rank))
    model, opt = task.model, task.optimizer()
    batches = [task.next_batch() for _ in range(a.steps)]  # data off the clock
    if world == a.workers:
        dist.barrier()  # every rank at the start line
    # else the servers are in the world, inside their session: the rendezvous just made
    # (every rank, servers included) is the start line
    t0 = time.perf_counter()
    kw = dict(total_steps=None if a.unknown_length else a.steps,
              samples_per_step=a.batch, store=False,
              verbose=a.verbose, timeout=a.rank_timeout, seed=a.seed)
    if a.budget is not None:
        kw["budget"] = a.budget
    if a.fixed:
        kw["fixed"] = a.fixed
    session: Any = None
    if a.variant == "ddp":
        net, ctx = DDP(model), contextlib.nullcontext()
    else:
        import autotune

        if a.variant == "native":
            net = model
        else:  # with servers in the world, DDP on the workers' group (docs/ddp.md)
            net = DDP(model, process_group=autotune.workers_group() if world > a.workers else None)
        ctx = autotune.session(net, **kw)
    losses = []
    parts: dict[str, list[float]] = {p: [] for p in PARTS}  # each step's seconds, by part
    with ctx as session:
        started = time.perf_counter() - t0
        for x, y in batches:
            t = [time.perf_counter()]
            loss = task.loss(net, x, y)
            loss.backward()
            t.append(time.perf_counter())
            if session is not None:
                session.step()
            t.append(time.perf_counter())
            opt.step()
            opt.zero_grad(set_to_none=False)
            losses.append(float(loss))
            t.append(time.perf_counter())
            for p, t_a, t_b in zip(PARTS, t, t[1:]):
                parts[p].append(t_b - t_a)
    wall = time.perf_counter() - t0
    if rank == 0:
        out: dict[str, Any] = {"variant": a.variant, "seed": a.seed, "steps": a.steps,
                               "wall_s": wall, "start_s": started,
                               "loss_tail": sum(losses[-TAIL:]) / len(losses[-TAIL:]),
                               "parts_s": {p: sum(ts) for p, ts in parts.items()},
                               "first_steps_s": [round(sum(ts), 4) for ts in
                                                 zip(*parts.values())][:TAIL]}
        if session is not None:
            out.update(best=session.best, trials=len(session.history),
                       tuning_iterations=session.tuning_iterations,
                       tuning_cost=session.tuning_cost)
        emit(out)
    dist.destroy_process_group()


class DemoTask:
    """``make demo``'s job (module docstring) in the GPT task's shape: no data, no
    optimizer; the loss is the sleepy model's scalar."""

    def __init__(self, rank: int) -> None:
        from autotune.workload import model_shapes, sleepy_model

        self.model = sleepy_model(model_shapes("resnet50/32"), 0.040, 0.120, rank + 1)

    def optimizer(self) -> Any:
        return _NoOptimizer(self.model)

    def next_batch(self) -> tuple[Any, None]:
        import torch

        return torch.ones(1), None

    @staticmethod
    def loss(net: Any, x: Any, _y: None) -> Any:
        return net(x)


class MLPTask:
    """A tiny model (an MLP of 332 KiB, 3 layers): a step of a few milliseconds, where any
    per-step cost of the session shows; random inputs and labels, SGD with momentum."""

    def __init__(self, seed: int, rank: int, batch: int) -> None:
        import torch

        torch.manual_seed(seed)  # the same initial weights on every rank and variant
        self.model = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
            torch.nn.ReLU(), torch.nn.Linear(256, 10))
        self.gen = torch.Generator().manual_seed(seed * 1000 + rank + 1)  # each rank its own
        self.batch = batch

    def optimizer(self) -> Any:
        import torch

        return torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)

    def next_batch(self) -> tuple[Any, Any]:
        import torch

        return (torch.randn(self.batch, 64, generator=self.gen),
                torch.randint(10, (self.batch,), generator=self.gen))

    @staticmethod
    def loss(net: Any, x: Any, y: Any) -> Any:
        from torch.nn import functional as F

        return F.cross_entropy(net(x), y)


class _NoOptimizer:
    """No update; ``zero_grad`` zeroes the model's gradients, as the demo does."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def step(self) -> None:
        pass

    def zero_grad(self, set_to_none: bool = False) -> None:
        self.model.zero_grad(set_to_none=set_to_none)


def launch_run(c: Any, a: argparse.Namespace, variant: str, seed: int) -> dict:
    argv = [sys.executable, os.path.abspath(__file__), "--job", "train", "--variant", variant,
            "--seed", str(seed), "--steps", str(a.steps), "--batch", str(a.batch),
            "--model", a.model, "--workers", str(a.workers),
            "--rank-timeout", str(a.rank_timeout)] + (["--verbose"] if a.verbose else []) + (
                [] if a.budget is None else ["--budget", str(a.budget)]) + (
                ["--fixed", json.dumps(a.fixed)] if a.fixed else []) + (
                ["--unknown-length"] if a.unknown_length else [])
    return launch_json(c, argv, workers=a.workers, timeout_s=a.rank_timeout + 600,
                       servers=0 if variant == "ddp" else a.servers,
                       verbose=a.verbose, failed=f"clock_bench: {variant}, seed {seed}")


def run(a: argparse.Namespace) -> dict:
    from rich.console import Console

    from autotune.emulate import Cluster
    from autotune.schedule.stakes import fmt_cost

    con = Console(stderr=True)
    started = time.time()
    runs: dict[str, list] = {v: [] for v in a.variant_list}
    with Cluster(hosts=a.workers + a.servers, rate=a.rate, flow_cap=a.flow_cap,
                 congestion=a.congestion) as c:
        con.print(f"cluster {c.describe()}")
        for i in range(a.runs):
            for v in a.variant_list:
                with con.status(f"{LABELS[v]}, run {i + 1}/{a.runs} ({a.steps} steps)"):
                    r = launch_run(c, a, v, a.seed + i)
                con.print(f"{LABELS[v]} run {i + 1}: {r['wall_s']:.2f} s (start "
                          f"{r['start_s']:.2f} s), loss {r['loss_tail']:.3f}"
                          + (f"; {fmt_cost(r['tuning_cost'])}" if r.get("tuning_cost") else ""))
                runs[v].append(r)
    rows = {}
    for v, rs in runs.items():
        walls = [r["wall_s"] for r in rs]
        rows[v] = {"label": LABELS[v], "wall_s": _spread(walls),
                   "start_s": _spread([r["start_s"] for r in rs]),
                   "loss_tail": _spread([r["loss_tail"] for r in rs]),
                   "parts_s": {p: _spread([r["parts_s"][p] for r in rs]) for p in PARTS},
                   "tuning_iterations": [r.get("tuning_iterations", 0) for r in rs],
                   "kept": [r.get("best") for r in rs], "runs": rs}
    if "ddp" in rows:
        ref = rows["ddp"]["wall_s"]["median"]
        for row in rows.values():  # > 1: slower than DDP
            row["vs_ddp"] = row["wall_s"]["median"] / ref
    return {"benchmark": "clock_bench", "model": a.model, "workers": a.workers,
            "servers": a.servers, "rate": a.rate,
            "budget": a.budget, "fixed": a.fixed, "unknown_length": a.unknown_length,
            "steps": a.steps, "runs": a.runs, "variants": rows, "target_vs_ddp": 1.03,
            "wall_s": time.time() - started,
            "command": "benchmarks/clock_bench.py " + " ".join(sys.argv[1:]),
            "machine": machine()}


def _spread(xs: list[float]) -> dict[str, float]:
    return {"median": median(xs), "min": min(xs), "max": max(xs)}


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"the user's clock: {res['steps']} steps, {res['workers']} hosts at "
                    f"{res['rate']} (medians of {res['runs']}, min-max)")
    for col in ("variant", "wall time", "x DDP", "session start", *PARTS,
                "trial iterations", "loss (last 20 steps)"):
        t.add_column(col)
    for v, row in res["variants"].items():
        w, s, loss = row["wall_s"], row["start_s"], row["loss_tail"]
        t.add_row(row["label"], f"{w['median']:.2f} s ({w['min']:.2f}-{w['max']:.2f})",
                  f"{row.get('vs_ddp', float('nan')):.3f}",
                  f"{s['median']:.2f} s",
                  *(f"{row['parts_s'][p]['median']:.2f} s" for p in PARTS),
                  ",".join(map(str, row["tuning_iterations"])),
                  f"{loss['median']:.3f}")
    Console(stderr=True).print(t)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(VARIANTS), help="of " + ",".join(VARIANTS))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=0,
                    help="server hosts the sessions may use (DDP runs on the workers alone)")
    ap.add_argument("--model", choices=("gpt", "mlp", "demo"), default="gpt",
                    help="gpt: little to win (module docstring); mlp: a tiny model; "
                         "demo: make demo's job")
    add_cluster_args(ap)
    ap.set_defaults(rate="1gbit")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=None,
                    help="the sessions' budget (default: the session's, 100); 0: the "
                         "runtime's cost alone, untuned")
    ap.add_argument("--fixed", type=json.loads, default=None,
                    help='the sessions\' fixed knobs, as JSON, e.g. \'{"transport": "pushpull"}\'')
    ap.add_argument("--unknown-length", action="store_true",
                    help="the sessions are not told the job's length (no total_steps), "
                         "as in a hand-written loop")
    ap.add_argument("--rank-timeout", type=float, default=120.0)
    ap.add_argument("--verbose", action="store_true", help="echo every rank's output")
    ap.add_argument("--json", type=Path, default=OUT_DIR / "clock.json")
    ap.add_argument("--job", choices=("train",), help=argparse.SUPPRESS)
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=32,
                    help="samples a rank a step: 32, about 88 ms a step on the 2-core machine; "
                         "16, about 50 ms")
    a = ap.parse_args(argv)
    if a.job == "train":
        train_main(a)
        return
    a.variant_list = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = [v for v in a.variant_list if v not in VARIANTS]
    if bad or not a.variant_list or a.runs < 1 or a.steps < 1 or a.workers < 2:
        ap.error(f"variants of {', '.join(VARIANTS)} (got {bad}); --runs, --steps >= 1; "
                 "--workers >= 2")
    require_emulator("clock_bench")
    report(run(a), print_table, a.json)


if __name__ == "__main__":
    main()
