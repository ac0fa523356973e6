"""The cost of tuning itself at scale: what one switch costs at 2, 4 and 8 machines (root only).

A trial's first iteration pays for the switch: the collective ``sync`` with its vote, and
the rebuild of the Communication Service (new stream groups, chunk plan, buffers) when the
configuration changed. On the emulated cluster at ``--machines`` (default 2, 4, 8), one
worker per machine (and ``--servers`` Summation Service hosts), the rank program of
``record_tables.py`` runs ``--configs`` configurations of the session's space, each a
switch iteration and ``--iterations`` steady ones. A switch's *overhead* is its time minus
the median steady time of the same configuration.

The overhead is fitted as ``a + b * machines`` (least squares over the per-size medians)
and modelled to 256 machines. Worthwhile means: the overhead of a 100-iteration budget's
trials (one switch per trial: 50 trials of 2 iterations) stays below the gain of the kept
configuration over the rest of a run, here taken as ``--gain`` (default 10 %, a modest
speed-up) of the steady iteration time over ``--run`` (default 10,000) iterations. The
steady iteration time at 256 machines is not modelled: the ratio is given per unit of it.

    sudo .venv/bin/python benchmarks/switch_bench.py              # ~6 min
    sudo .venv/bin/python benchmarks/switch_bench.py --machines 2,4 --configs 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import RESULTS, machine, require_emulator, save  # noqa: E402
from record_tables import Job, run_job  # noqa: E402

OUT = RESULTS / "switch_bench.json"


def overheads(table: dict) -> dict:
    """Per configuration: switch time minus its median steady time (seconds)."""
    rows = table["rows"]
    over = [r["switch_s"] - statistics.median(r["times_s"]) for r in rows]
    steady = [statistics.median(r["times_s"]) for r in rows]
    return {"overhead_s": over, "steady_s": steady,
            "median_overhead_s": statistics.median(over),
            "median_steady_s": statistics.median(steady),
            "spread_overhead_s": [min(over), max(over)]}


def fit(sizes: list[int], values: list[float]) -> tuple[float, float]:
    """Least-squares ``a + b * n``."""
    import numpy as np

    b, a = np.polyfit(np.asarray(sizes, float), np.asarray(values, float), 1)
    return float(a), float(b)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--machines", default="2,4,8")
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--model", default="resnet50/8")
    p.add_argument("--configs", type=int, default=16)
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gain", type=float, default=0.10)
    p.add_argument("--run", type=int, default=10_000)
    p.add_argument("--budget", type=int, default=100)
    p.add_argument("--trial-iterations", type=int, default=2)
    p.add_argument("--json", "--out", dest="out", type=Path, default=OUT)
    a = p.parse_args(argv)
    sizes = [int(x) for x in a.machines.split(",")]
    if any(n < 2 for n in sizes):
        p.error("--machines: every size must be >= 2")
    require_emulator(p.prog)
    from rich.console import Console
    from rich.table import Table

    con = Console()
    per: dict[int, dict] = {}
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            job = Job(f"switch{n}", f"{n} machines, one worker each", machines=n,
                      servers=a.servers, rate=a.rate, model=a.model, fwd_ms=2.0, bwd_ms=4.0)
            table = run_job(job, Path(tmp) / f"{n}.json", configs=a.configs,
                            iterations=a.iterations, seed=a.seed, timeout=1800)
            per[n] = {**overheads(table), "job": asdict(job), "rows": table["rows"]}
    med = [per[n]["median_overhead_s"] for n in sizes]
    fa, fb = fit(sizes, med) if len(sizes) > 1 else (med[0], 0.0)
    trials = a.budget // a.trial_iterations
    model = {n: fa + fb * n for n in (*sizes, 16, 64, 256)}
    t = Table(title="switch overhead: a trial's first iteration minus its steady time")
    for col in ("machines", "steady s (median)", "overhead s (median)", "spread", "model s"):
        t.add_column(col, justify="right")
    for n in sizes:
        r = per[n]
        t.add_row(str(n), f"{r['median_steady_s']:.3f}", f"{r['median_overhead_s']:.3f}",
                  f"{r['spread_overhead_s'][0]:.3f}..{r['spread_overhead_s'][1]:.3f}",
                  f"{model[n]:.3f}")
    for n in (16, 64, 256):
        t.add_row(str(n), "", "", "", f"{model[n]:.3f}")
    con.print(t)
    cost256 = trials * model[256]
    # worthwhile at 256 while the switches cost less than the gain: with T the steady
    # iteration time there, gain * T * run > cost256, i.e. T > cost256 / (gain * run)
    t_min = cost256 / (a.gain * a.run)
    con.print(f"fit: overhead = {fa:.3f} s + {fb * 1e3:.2f} ms x machines; at 256 machines "
              f"{model[256]:.2f} s a switch, {cost256:.0f} s for {trials} trials. Worthwhile "
              f"(a {a.gain:.0%} gain over {a.run} iterations pays for it) when a steady "
              f"iteration there takes over {t_min:.3f} s")
    res = {"benchmark": "switch_bench", "machines": sizes, "servers": a.servers, "rate": a.rate,
           "model": a.model, "configs": a.configs, "iterations": a.iterations,
           "per_size": {str(n): per[n] for n in sizes},
           "fit": {"a_s": fa, "b_s_per_machine": fb},
           "modelled_s": {str(n): v for n, v in model.items()},
           "budget": a.budget, "trials": trials, "cost_256_s": cost256,
           "worthwhile_if_iteration_s_over": t_min, "gain": a.gain, "run": a.run,
           "wall_s": time.time() - started, "machine": machine(),
           "command": "benchmarks/switch_bench.py " + " ".join(sys.argv[1:])}
    save(res, a.out)
    con.print(f"results: {a.out}")


if __name__ == "__main__":
    main()
