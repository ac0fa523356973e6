"""The rank program of ``autotune tune``: ``python -m autotune.offline.worker SPEC.json``.

Started on every worker rank by the launcher (``autotune launch``'s machinery, or the
emulated cluster); servers run ``python -m autotune.server`` as in any job. ``SPEC.json``
(written by the driver, :mod:`autotune.offline.local`) says what to run:

* ``mode: "tune"``: the model's :class:`~autotune.workload.SyntheticJob` trains
  for ``budget`` iterations inside :func:`autotune.session`, which tunes, fingerprints the
  model and the world, warm-starts from and records to the store, exactly as a real job
  would; then ``verify_iterations`` more (and more while they add up to less than
  ``verify_seconds``) under the kept configuration are timed like the
  DDP reference (an estimate of the kept configuration free of the tuner's selection
  bias).
* ``mode: "ddp"``: the same synthetic job under PyTorch DDP (gloo, default buckets), the
  reference, timed the same way (slowest worker per iteration, median). Without servers
  the tune job runs this first in its own world (``ddp_in_job``), saving a start-up.

Rank 0 shows its progress as any session's leader does (:mod:`autotune.progress`; the
driver sets ``AUTOTUNE_PROGRESS=events``, so these are event lines the driver shows): the
session's tuning display, and displays of the same kind labelled ``ddp`` and ``verify``
for the reference and the re-timed iterations. At the end rank 0 writes its report as
JSON to the spec's ``result`` path. Every rank checks that its gradients came back
averaged.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

from autotune.progress import TuningDisplay, tuning_display
from autotune.speedup import measure_times
from autotune.units import fmt_score


def timed_figure(times_s: list[float]) -> str:
    """Iterations that took ``times_s`` as ``autotune tune``'s table shows them: their
    mean throughput ± its spread (iterations), e.g. ``3.85 ± 0.165 it/s (8 iterations)``
    (the ``ddp`` and ``verify`` displays close with it)."""
    mean, spread, n = measure_times(times_s)
    return f"{fmt_score(mean, 'it/s', spread)} ({n} iterations)"


def build_model(name: str) -> Any:
    """The zoo model or factory ``name``, with uninitialised (zeroed) CPU storage."""
    from autotune import zoo
    from autotune.workload import materialize

    return materialize(zoo.build(name, device="meta"))


def _write_result(spec: dict, data: dict) -> None:
    """Rank 0's report, to the spec's ``result`` path (whole or not at all)."""
    path = spec["result"]
    with open(path + ".part", "w") as f:
        json.dump(data, f, default=str)
    os.replace(path + ".part", path)


def _display(rank: int, label: str, total: int, about: str) -> TuningDisplay:
    """The display of a phase that is not tuning (``ddp``, ``verify``): rank 0's, like
    the session's; the base display, which shows nothing, on the other ranks."""
    if rank == 0:
        return tuning_display(total, label=label, about=about)
    return TuningDisplay(total, label=label, about=about)


def _check_average(model: Any, world: int) -> bool:
    """Whether every gradient equals the mean of ``rank + 1`` over the workers
    (:func:`autotune.workload.check_average`)."""
    from autotune.workload import AverageError, check_average

    try:
        check_average(model, (world + 1) / 2, "the averaged gradients")
    except AverageError:
        return False
    return True


def run_tune(spec: dict, rank: int) -> None:
    import torch

    import autotune
    from autotune.workload import SyntheticJob

    model = build_model(spec["model"])
    job = SyntheticJob(model, spec["compute_ms"] / 1e3, spec["backward_fraction"])
    x = torch.tensor(float(rank + 1))
    budget = int(spec["budget"])
    # verbose: rank 0 shows the session's tuning display (events for the driver; the
    # session's closing table goes to the driver's tail of output, shown only on failure)
    kwargs: dict[str, Any] = dict(
        budget=budget, db=spec["db"], seed=spec["seed"], techniques=spec["techniques"],
        allow_lossy=spec["allow_lossy"], verbose=True, timeout=spec["timeout"], job=spec["job"],
        fixed=spec.get("fixed") or None,
        spend=None)  # the search is this job: its whole budget, no share of a training run
    if spec.get("trial_iterations"):
        kwargs["trial_iterations"] = spec["trial_iterations"]
    verify = max(1, int(spec.get("verify_iterations", 1)))
    ddp = None
    if spec.get("ddp_in_job"):
        # No servers: the world is the workers, DDP can use it first and the session
        # joins it as it is.
        import torch.distributed as dist

        dist.init_process_group("gloo")
        ddp = ddp_phase(spec, rank, model, job)
    t0 = time.perf_counter()
    with autotune.session(model, **kwargs) as session:
        world = len(session.rt.info.workers)
        # Tuning: until the session has spent its budget and keeps the best (warm-up
        # iterations, if the session has any, come first). Only rank 0 knows when: its
        # flag reaches the others with the per-iteration maximum over workers.
        step = 0
        while True:
            job(x).backward()
            session.step()
            step += 1
            going = rank == 0 and session.tuning and step < 10 * budget + 100
            model.zero_grad(set_to_none=False)
            if not session.rt.worker_max(1.0 if going else 0.0):
                break
        # The kept configuration, timed like the DDP reference (slowest worker).
        from autotune.workload import more_timed

        times: list[float] = []
        least_s = float(spec.get("verify_seconds", 0.0))
        shown = _display(rank, "verify", verify, "under the kept configuration"
                         + (f" (at least {least_s:g} s)" if least_s else ""))
        while True:
            start = time.perf_counter()
            job(x).backward()
            session.step()
            times.append(session.rt.worker_max(time.perf_counter() - start))
            shown.update(len(times), max(verify, len(times)))
            if not more_timed(times, verify, least_s):  # the same times on every rank
                break
            model.zero_grad(set_to_none=False)
        shown.stop(timed_figure(times))
        # lossless configurations must give the exact average
        exact = _check_average(model, world)
        lossy = session.config.get("compression", "none") != "none"
        kept = dict(session.config)
    if not exact and not lossy:
        raise SystemExit(f"rank {rank}: gradients were not averaged correctly under {kept}")
    if rank == 0:
        info = session.rt.info
        med = statistics.median(times)
        _write_result(spec, {
            "mode": "tune", "best": session.best, "best_score": session.best_score,
            "default_score": session.default_score, "wall_s": time.perf_counter() - t0,
            "ddp": ddp, "kept": kept, "verify_times_s": times, "verified_score": 1.0 / med,
            "world": {"workers": len(info.workers), "servers": len(info.servers),
                      "machines": info.n_machines, "workers_per_machine": info.workers_per_machine},
            "history": [{"index": r.index, "technique": r.technique, "config": r.config,
                         "iterations": r.iterations, "score": r.score, "error": r.error}
                        for r in session.history],
        })


def ddp_phase(spec: dict, rank: int, model: Any, job: Any) -> dict:
    """Time ``job`` under DDP on the default (workers-only) process group."""
    import torch
    import torch.distributed as dist

    from autotune.workload import time_ddp

    world = dist.get_world_size()
    warmup, iterations = int(spec["ddp_warmup"]), int(spec["ddp_iterations"])
    least_s = float(spec.get("verify_seconds", 0.0))
    shown = _display(rank, "ddp", warmup + iterations,
                     f"under PyTorch DDP (gloo, default buckets; {warmup} warm-up"
                     + (f"; at least {least_s:g} s" if least_s else "") + ")")

    def after(i: int) -> None:
        if i == 0 and not _check_average(model, world):
            raise SystemExit(f"rank {rank}: DDP gradients are not the average")
        shown.update(i + 1, max(warmup + iterations, i + 1))

    times = time_ddp(job, warmup, iterations, x=torch.tensor(float(rank + 1)),
                     init_sync=True, after=after, min_seconds=least_s)
    model.zero_grad(set_to_none=True)
    med = statistics.median(times)
    shown.stop(timed_figure(times))
    return {"mode": "ddp", "times_s": times, "median_s": med, "score": 1.0 / med}


def run_ddp(spec: dict, rank: int) -> None:
    import torch.distributed as dist

    from autotune.workload import SyntheticJob

    dist.init_process_group("gloo")
    model = build_model(spec["model"])
    job = SyntheticJob(model, spec["compute_ms"] / 1e3, spec["backward_fraction"])
    result = ddp_phase(spec, rank, model, job)
    if rank == 0:
        _write_result(spec, result)
    dist.destroy_process_group()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m autotune.offline.worker SPEC.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        spec = json.load(f)
    import torch

    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    if spec["mode"] == "tune":
        run_tune(spec, rank)
    elif spec["mode"] == "ddp":
        run_ddp(spec, rank)
    else:
        print(f"unknown mode {spec['mode']!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
