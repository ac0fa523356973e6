"""Re-tuning on the emulated cluster: the rank program (run as a script on each host) and
the driver that changes the cluster while it trains (:func:`run_job`), for
tests/session/test_retune.py and benchmarks/retune_bench.py.

The job: 2 workers train a 1 MiB-gradient model under ``autotune.session`` with
``retune_on_drift``; each iteration sleeps ``compute_s`` (the emulated compute step).
Rank 0 appends ``iteration phase baseline`` to ``progress`` after every step. Once the
session has locked and measured its drift baseline, the driver calls ``change()`` (e.g.
``tc`` on the hosts) and creates ``trigger``; with ``slower_compute_s`` the ranks then
sleep that much longer per iteration (the workload's own slowdown). Rank 0 prints
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
        "compute_s": 0.05, "slower_compute_s": 0.0, "features": 512}


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
    rows, changed_at = [], None
    with autotune.session(model, budget=int(spec["budget"]), warmup=int(spec["warmup"]),
                          retune_on_drift=float(spec["threshold"]),
                          drift_window=int(spec["window"]), db=spec.get("db"),
                          verbose=False, job="retune", timeout=120) as tuner:
        for i in range(int(spec["steps"])):
            t0 = time.perf_counter()
            seen = os.path.exists(trigger)
            if seen and changed_at is None:
                changed_at = i
            time.sleep(spec["compute_s"] + (spec["slower_compute_s"] if seen else 0.0))
            model(torch.randn(32, f, generator=g)).pow(2).mean().backward()
            tuner.step()
            opt.step()
            opt.zero_grad()
            if rank == 0:
                s = tuner.schedule
                rows.append([time.time(), time.perf_counter() - t0, s.phase])
                with open(progress, "a") as out:
                    out.write(f"{i} {s.phase} {int(s.baseline is not None)}\n")
    if rank == 0:
        s = tuner.schedule
        print("RESULT " + json.dumps({
            "rows": rows, "changed_at": changed_at, "retunes": s.retunes,
            "warmup": int(spec["warmup"]), "unit": s.unit,
            "trials": [{"index": r.index, "technique": r.technique, "config": r.config,
                        "score": r.score} for r in tuner.history],
        }), flush=True)


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
