"""The rank program of ``autotune tune``: ``python -m autotune.offline.worker SPEC.json``.

Started on every worker rank by the launcher (``autotune launch``'s machinery, or the
emulated cluster); servers run ``python -m autotune.server`` as in any job. ``SPEC.json``
(written by the driver, :mod:`autotune.offline.local`) says what to run:

* ``mode: "tune"``: the model's :class:`~autotune.workload.SyntheticJob` trains
  for ``budget`` iterations inside :func:`autotune.session`, which tunes, fingerprints the
  model and the world, warm-starts from and records to the store, exactly as a real job
  would; then ``verify_iterations`` more under the kept configuration are timed like the
  DDP reference (an estimate of the kept configuration free of the tuner's selection
  bias).
* ``mode: "ddp"``: the same synthetic job under PyTorch DDP (gloo, default buckets), the
  reference, timed the same way (slowest worker per iteration, median). Without servers
  the tune job runs this first in its own world (``ddp_in_job``), saving a start-up.

Rank 0 prints ``PROGRESS {json}`` after each iteration and ``RESULT {json}`` at the end;
every rank checks that its gradients came back averaged.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

PROGRESS = "PROGRESS "
RESULT = "RESULT "


def build_model(name: str) -> Any:
    """The zoo model or factory ``name``, with uninitialised (zeroed) CPU storage."""
    from autotune import zoo
    from autotune.workload import materialize

    return materialize(zoo.build(name, device="meta"))


def _emit(mark: str, data: dict) -> None:
    print(mark + json.dumps(data, default=str), flush=True)


def _check_average(model: Any, world: int) -> bool:
    """Every gradient equals the mean of ``rank + 1`` over the workers."""
    want = (world + 1) / 2
    return all(bool((p.grad == want).all()) for p in model.parameters() if p.requires_grad)


def run_tune(spec: dict, rank: int) -> None:
    import torch

    import autotune
    from autotune.workload import SyntheticJob

    model = build_model(spec["model"])
    job = SyntheticJob(model, spec["compute_ms"] / 1e3, spec["backward_fraction"])
    x = torch.tensor(float(rank + 1))
    budget = int(spec["budget"])
    kwargs: dict[str, Any] = dict(
        budget=budget, db=spec["db"], seed=spec["seed"], techniques=spec["techniques"],
        allow_lossy=spec["allow_lossy"], verbose=False, timeout=spec["timeout"], job=spec["job"])
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
    with autotune.session(model, **kwargs) as tuner:
        world = len(tuner.rt.info.workers)
        # Tuning: until the session has spent its budget and keeps the best (warm-up
        # iterations, if the session has any, come first). Only rank 0 knows when: its
        # flag reaches the others with the per-iteration maximum over workers.
        step = 0
        while True:
            job(x).backward()
            tuner.step()
            step += 1
            if rank == 0:
                _emit(PROGRESS, {"phase": "tune", "iteration": tuner.tuning_iterations,
                                 "budget": budget, "trials": len(tuner.history),
                                 "best": tuner.best_score})
            going = rank == 0 and tuner.tuning and step < 10 * budget + 100
            model.zero_grad(set_to_none=False)
            if not tuner.rt.worker_max(1.0 if going else 0.0):
                break
        # The kept configuration, timed like the DDP reference (slowest worker).
        times = []
        for i in range(verify):
            start = time.perf_counter()
            job(x).backward()
            tuner.step()
            times.append(tuner.rt.worker_max(time.perf_counter() - start))
            if rank == 0:
                _emit(PROGRESS, {"phase": "verify", "iteration": i + 1, "budget": verify})
            if i < verify - 1:
                model.zero_grad(set_to_none=False)
        # lossless configurations must give the exact average
        exact = _check_average(model, world)
        lossy = tuner.config.get("compression", "none") != "none"
        kept = dict(tuner.config)
    if not exact and not lossy:
        raise SystemExit(f"rank {rank}: gradients were not averaged correctly under {kept}")
    if rank == 0:
        info = tuner.rt.info
        med = statistics.median(times)
        _emit(RESULT, {
            "mode": "tune", "best": tuner.best, "best_score": tuner.best_score,
            "default_score": tuner.default_score, "wall_s": time.perf_counter() - t0,
            "ddp": ddp, "kept": kept, "verify_times_s": times, "verified_score": 1.0 / med,
            "world": {"workers": len(info.workers), "servers": len(info.servers),
                      "machines": info.n_machines, "workers_per_machine": info.workers_per_machine},
            "history": [{"index": r.index, "technique": r.technique, "config": r.config,
                         "iterations": r.iterations, "score": r.score, "error": r.error}
                        for r in tuner.history],
        })


def ddp_phase(spec: dict, rank: int, model: Any, job: Any) -> dict:
    """Time ``job`` under DDP on the default (workers-only) process group."""
    import torch
    import torch.distributed as dist

    from autotune.workload import time_ddp

    world = dist.get_world_size()
    warmup, iterations = int(spec["ddp_warmup"]), int(spec["ddp_iterations"])

    def after(i: int) -> None:
        if i == 0 and not _check_average(model, world):
            raise SystemExit(f"rank {rank}: DDP gradients are not the average")
        if rank == 0:
            _emit(PROGRESS, {"phase": "ddp", "iteration": i + 1, "budget": warmup + iterations})

    times = time_ddp(job, warmup, iterations, x=torch.tensor(float(rank + 1)),
                     init_sync=True, after=after)
    model.zero_grad(set_to_none=True)
    med = statistics.median(times)
    return {"mode": "ddp", "times_s": times, "median_s": med, "score": 1.0 / med}


def run_ddp(spec: dict, rank: int) -> None:
    import torch.distributed as dist

    from autotune.workload import SyntheticJob

    dist.init_process_group("gloo")
    model = build_model(spec["model"])
    job = SyntheticJob(model, spec["compute_ms"] / 1e3, spec["backward_fraction"])
    result = ddp_phase(spec, rank, model, job)
    if rank == 0:
        _emit(RESULT, result)
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
