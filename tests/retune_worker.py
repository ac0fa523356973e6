"""Re-tuning on the emulated cluster: the rank program (run as a script on each host) and
the driver that changes the cluster while it trains (:func:`run_job`), for
tests/session/test_retune.py and ``benchmarks/clock_bench.py retune``.

The job: 2 workers train a 1 MiB-gradient model under ``autotune.session`` with
``retune_on_drift``; each iteration sleeps ``compute_s`` (the emulated compute step).
Rank 0 appends ``iteration phase baseline`` to ``progress`` after every step. Once the
session has locked and measured its drift baseline, the driver calls ``change()`` (e.g.
``tc`` on the hosts) and creates ``trigger``; with ``slower_compute_s`` the ranks then
sleep that much longer per iteration (the workload's own slowdown). With ``end_early``
(the tests) the job stops as soon as what it is for has shown: a re-tune's first trial,
or ``3 * window`` iterations after a slowdown, which then starts at the first iteration
after the baseline (no trigger). Rank 0 decides both and broadcasts them every
iteration (:func:`_decide`), so every rank stops, and slows down, at the same iteration.
Rank 0 prints
``RESULT {json}``: per iteration its wall time, seconds, phase; the iterations at which
drift started a re-tune; the trials.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

SPEC = {"steps": 60, "budget": 12, "warmup": 3, "window": 6, "threshold": 0.2,
        "compute_s": 0.05, "slower_compute_s": 0.0, "features": 512, "end_early": False}


def main(progress: str, trigger: str, spec_json: str) -> None:
    import torch
    from torch import nn

    import autotune

    spec = {**SPEC, **json.loads(spec_json)}
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    f = int(spec["features"])
    model = nn.Sequential(nn.Linear(f, f), nn.ReLU(), nn.Linear(f, 1))  # ~1 MiB of gradients
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    g = torch.Generator().manual_seed(rank)
    rows, changed_at, slower_at = [], None, None
    early, window = bool(spec["end_early"]), int(spec["window"])
    selfslow = early and float(spec["slower_compute_s"]) > 0
    with autotune.session(model, budget=int(spec["budget"]), warmup=int(spec["warmup"]),
                          retune_on_drift=float(spec["threshold"]),
                          drift_window=int(spec["window"]), db=spec.get("db"),
                          verbose=False, job="retune", timeout=120, spend=None) as session:
        for i in range(int(spec["steps"])):
            t0 = time.perf_counter()
            if early:  # rank 0's schedule decides, for every rank at the same iteration
                seen, stop = _decide(session, i, slower_at, selfslow, window, trigger)
                if stop:
                    break
                slower_at = i if seen and selfslow and slower_at is None else slower_at
            else:
                seen = os.path.exists(trigger)
            if seen and changed_at is None:
                changed_at = i
            time.sleep(spec["compute_s"] + (spec["slower_compute_s"] if seen else 0.0))
            model(torch.randn(32, f, generator=g)).pow(2).mean().backward()
            session.step()
            opt.step()
            opt.zero_grad()
            if rank == 0:
                s = session.schedule
                rows.append([time.time(), time.perf_counter() - t0, s.phase])
                with open(progress, "a") as out:
                    out.write(f"{i} {s.phase} {int(s.kept_phase.watch.baseline is not None)}\n")
    if rank == 0:
        s = session.schedule
        print("RESULT " + json.dumps({
            "rows": rows, "changed_at": changed_at, "retunes": s.retunes,
            "warmup": int(spec["warmup"]), "unit": session.unit,
            "trials": [{"index": r.index, "technique": r.technique, "config": r.config,
                        "score": r.score} for r in session.history],
        }), flush=True)


def _decide(session: Any, i: int, slower_at: int | None, selfslow: bool, window: int,
            trigger: str) -> tuple[bool, bool]:
    """``end_early``: (whether the change is on, whether to stop before iteration ``i``),
    decided on rank 0 (only the leader holds the schedule) and broadcast: the change is on
    once the trigger exists, or, with ``selfslow``, from the first iteration after the
    drift baseline; the job stops after a re-tune's first trial, or ``3 * window``
    iterations after a slowdown."""
    import torch
    import torch.distributed as dist

    flags = torch.zeros(2, dtype=torch.int64)
    s = session.schedule
    if s is not None:
        if selfslow:
            flags[0] = slower_at is not None or (s.phase == "locked" and s.kept_phase.watch.baseline is not None)
        else:
            flags[0] = os.path.exists(trigger)
        flags[1] = bool((s.retunes and s.phase == "trial")
                        or (slower_at is not None and i > slower_at + 3 * window))
    dist.broadcast(flags, src=0)
    return bool(flags[0]), bool(flags[1])


def run_job(cluster: Any, tmp: Path, change: Callable[[], None], **spec: Any) -> dict:
    """Run the job on ``cluster``; once rank 0 reports the session locked with its drift
    baseline measured, call ``change()`` and create the trigger file. Returns rank 0's
    RESULT, with ``change_time`` (wall time of the change) added."""
    tmp.mkdir(parents=True, exist_ok=True)
    spec.setdefault("db", str(tmp / "retune.db"))
    progress, trigger = tmp / "progress", tmp / "trigger"
    progress.unlink(missing_ok=True)
    trigger.unlink(missing_ok=True)
    argv = [sys.executable, os.path.abspath(__file__), str(progress), str(trigger),
            json.dumps(spec)]
    out: dict = {}
    job = threading.Thread(target=lambda: out.update(
        job=cluster.launch(argv, workers=2, timeout_s=600,
                           env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")})))
    job.start()
    change_time = None
    while job.is_alive():
        lines = progress.read_text().split("\n") if progress.exists() else []
        last = [ln.split() for ln in lines if ln.strip()][-1:]
        if last and last[0][1] == "locked" and last[0][2] == "1":
            change()
            change_time = time.time()
            trigger.touch()
            break
        time.sleep(0.05)
    job.join()
    res = out["job"].check().last_json("RESULT ")
    assert change_time is not None, "the job ended before the change: more steps needed"
    res["change_time"] = change_time
    return res


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
