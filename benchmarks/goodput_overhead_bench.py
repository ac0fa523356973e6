"""What measuring statistical efficiency costs an iteration, on the emulated cluster (root only).

The time-to-accuracy jobs of ``clock_bench.py accuracy`` (``userclock/tasks.py``: a small
GPT on the standard library's sources, a CNN on scikit-learn's digits; real compute, 2
worker hosts at 50 mbit, one CPU thread each) train under ``autotune.session(model, budget=0, allow_lossy=True,
fixed={"compression": "none"})``: no tuning, the default lossless configuration, so the
only difference between the two arms is the measurement:

* ``measured``: ``lossy_score="goodput"``: every iteration samples the gradient before and
  after averaging and runs the one small all-reduce (``autotune.sessions.efficiency_probe``);
* ``off``: ``lossy_score="throughput"``: nothing is measured (as a lossless job).

Each launch trains ``--warmup`` iterations, then times ``--iterations`` (wall time of the
whole step: forward, backward, ``session.step()``, optimizer), on the slower rank. The arms
alternate, ``--repeats`` launches each, on the same hosts. Printed per model: the median
iteration time of each arm (median of the launches' medians, with their min-max), their
ratio, and the probe's own time per iteration (``EfficiencyProbe.seconds``: the sampling on
both sides and the all-reduce; the local sampling overlaps the communication under the
native runtime, so this bounds what it adds) as a share of the iteration. Target: at most
1 % (issue 39). JSON to benchmarks/results/goodput_overhead/:

    sudo .venv/bin/python benchmarks/goodput_overhead_bench.py              # ~6 min
    sudo .venv/bin/python benchmarks/goodput_overhead_bench.py --models cnn --repeats 5
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import (MARK, RESULTS, add_cluster_args, emit, machine, median,  # noqa: E402
                      report, require_emulator)

ARMS = {"measured": "goodput", "off": "throughput"}


def rank_main(a: argparse.Namespace) -> None:
    """One rank: ``--warmup`` then ``--iterations`` timed steps under ``--arm``."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import autotune
    from userclock.tasks import BATCH, TASKS

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=timedelta(seconds=a.rank_timeout))
    batch = BATCH
    task = TASKS[a.model](0, rank, world, batch)
    opt = task.optimizer()
    times: list[float] = []
    with autotune.session(task.model, budget=0, allow_lossy=True, lossy_score=ARMS[a.arm],
                          fixed={"compression": "none"}, store=False, verbose=False,
                          samples_per_step=batch, timeout=a.rank_timeout) as session:
        for i in range(a.warmup + a.iterations):
            t = time.perf_counter()
            x, y = task.next_batch()
            task.loss(task.model, x, y).backward()
            session.step()
            opt.step()
            opt.zero_grad(set_to_none=False)
            if i >= a.warmup:
                times.append(time.perf_counter() - t)
            if i == a.warmup - 1 and session.meter.probe is not None:
                session.meter.probe.seconds = 0.0  # the probe's time over the timed steps only
        probe = session.meter.probe.seconds if session.meter.probe is not None else 0.0
    mine = torch.tensor([median(times), probe / a.iterations], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)  # the slower rank's
    if rank == 0:
        emit({"model": a.model, "arm": a.arm, "median_s": float(mine[0]),
              "probe_s": float(mine[1]), "times": times})
    dist.destroy_process_group()


def run(a: argparse.Namespace) -> dict:
    from autotune.emulate import Cluster, EmulatorError

    out: dict[str, Any] = {}
    for model in a.model_list:
        runs: dict[str, list] = {arm: [] for arm in ARMS}
        with Cluster(hosts=2, rate=a.rate, flow_cap=a.flow_cap,
                     congestion=a.congestion) as c:
            for i in range(a.repeats):
                for arm in ARMS:
                    argv = [sys.executable, os.path.abspath(__file__), "--job", "rank",
                            "--model", model, "--arm", arm, "--warmup", str(a.warmup),
                            "--iterations", str(a.iterations),
                            "--rank-timeout", str(a.rank_timeout)]
                    job = c.launch(argv, workers=2, timeout_s=a.rank_timeout + 300)
                    try:
                        job.check()
                    except EmulatorError as e:
                        raise SystemExit(f"goodput_overhead_bench: {model}, {arm} failed:\n{e}")
                    r = job.last_json(MARK)
                    print(f"{model} {arm} launch {i + 1}: median {r['median_s'] * 1e3:.1f} ms,"
                          f" probe {r['probe_s'] * 1e3:.2f} ms", file=sys.stderr)
                    runs[arm].append(r)
        m = {arm: [r["median_s"] for r in rs] for arm, rs in runs.items()}
        probe = median([r["probe_s"] for r in runs["measured"]])
        out[model] = {
            "rate": a.rate,
            "median_s": {arm: {"median": median(v), "min": min(v), "max": max(v)}
                         for arm, v in m.items()},
            "ratio": median(m["measured"]) / median(m["off"]),
            "probe_s": probe, "probe_share": probe / median(m["measured"]),
            "launches": runs}
    return {"benchmark": "goodput_overhead_bench", "repeats": a.repeats,
            "iterations": a.iterations, "models": out, "machine": machine(),
            "command": "benchmarks/goodput_overhead_bench.py " + " ".join(sys.argv[1:])}


def table(res: dict) -> None:
    print(f"{'model':6s} {'off ms':>22s} {'measured ms':>22s} {'ratio':>7s} {'probe ms':>9s} "
          f"{'share':>7s}")
    for model, r in res["models"].items():
        cells = []
        for arm in ("off", "measured"):
            s = r["median_s"][arm]
            cells.append(f"{s['median'] * 1e3:7.1f} ({s['min'] * 1e3:.1f}-{s['max'] * 1e3:.1f})")
        print(f"{model:6s} {cells[0]:>22s} {cells[1]:>22s} {r['ratio']:7.3f} "
              f"{r['probe_s'] * 1e3:9.2f} {100 * r['probe_share']:6.2f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt,cnn")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=25,
                    help="iterations before timing (the noise scale's warm-up included)")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--rank-timeout", type=float, default=120.0)
    add_cluster_args(ap)
    ap.set_defaults(rate="50mbit")
    ap.add_argument("--json", type=Path, default=RESULTS / "goodput_overhead" / "overhead.json")
    ap.add_argument("--job", choices=("rank",), help=argparse.SUPPRESS)
    ap.add_argument("--model", default="gpt", help=argparse.SUPPRESS)
    ap.add_argument("--arm", choices=tuple(ARMS), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.job == "rank":
        rank_main(a)
        return
    a.model_list = [m.strip() for m in a.models.split(",") if m.strip()]
    require_emulator("goodput_overhead_bench")
    report(run(a), table, a.json)


if __name__ == "__main__":
    main()
