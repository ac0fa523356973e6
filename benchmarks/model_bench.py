"""How well the tuner's model ranks real measurements: the prior on the measured tables.

For each table of ``benchmarks/data/tables`` (replayed by ``measured.py``), the prior a
session builds (the link timed at the start, this machine's host and codec rates, the
warm-up's cap) is judged against the table's medians:

- **at the start**: Kendall's tau over every measured configuration, and its own top
  pick's measured throughput as a share of the table's best;
- **fitted**: after :meth:`ModelPrior.fit <autotune.sim.predict.ModelPrior.fit>` on ``n``
  configurations drawn at random (their medians, as 6 told iterations each), the same on
  the configurations not drawn; over ``--seeds`` draws, the median and the range;
- **the ceiling**: the tau of the table with itself, the medians of its first three
  samples against those of its last three. No model ranks the table better than its own
  noise allows.

It also times one fit (CPU s). Results go to ``benchmarks/results/model_bench.json``.

    .venv/bin/python benchmarks/model_bench.py              # ~1-2 min
    .venv/bin/python benchmarks/model_bench.py --n 8,16 --seeds 10
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from measured import load_all  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "model_bench.json"


def judge(prior, configs: list, measured: np.ndarray) -> tuple[float, float]:
    """Kendall's tau of the prior with ``measured``, and its top pick's share of the best."""
    from scipy.stats import kendalltau

    predicted = np.asarray(prior(configs), dtype=float)
    tau = float(kendalltau(predicted, measured).statistic)
    return tau, float(measured[int(np.argmax(predicted))] / measured.max())


def table(job, sizes: list[int], seeds: int) -> dict:
    rows = job._rows
    configs = [c for c, _ in rows]
    med = np.array([np.median(s) for _, s in rows])
    from scipy.stats import kendalltau

    half = float(kendalltau([np.median(s[:3]) for _, s in rows],
                            [np.median(s[3:]) for _, s in rows]).statistic)
    tau0, top0 = judge(job.prior(), configs, med)
    out = {"table": job.name, "configurations": len(rows), "ceiling_tau": half,
           "start": {"tau": tau0, "top": top0}, "fitted": {}}
    for n in sizes:
        taus, tops, cpu = [], [], []
        for seed in range(seeds):
            drawn = set(random.Random(seed).sample(range(len(rows)), n))
            prior = job.prior()
            t0 = time.process_time()
            prior.fit([(configs[i], med[i], 6) for i in sorted(drawn)])
            cpu.append(time.process_time() - t0)
            rest = [i for i in range(len(rows)) if i not in drawn]
            tau, top = judge(prior, [configs[i] for i in rest], med[rest])
            taus.append(tau)
            tops.append(top)
        out["fitted"][n] = {"tau": float(np.median(taus)), "tau_range": [min(taus), max(taus)],
                            "top": float(np.median(tops)), "top_range": [min(tops), max(tops)],
                            "fit_cpu_s": float(np.median(cpu))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="8,16", help="configurations each fit is told (comma list)")
    ap.add_argument("--seeds", type=int, default=10, help="random draws per n")
    ap.add_argument("--json", "--out", dest="out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.n.split(",") if x.strip()]
    from rich.console import Console
    from rich.progress import track
    from rich.table import Table

    results = [table(j, sizes, a.seeds) for j in track(load_all(), description="tables")]
    t = Table(title="the prior against the measured tables (Kendall's tau; top: its pick's "
                    "share of the best)")
    for col in ["table", "ceiling tau", "start tau", "start top"] + [
            f"{x} n={n}" for n in sizes for x in ("tau", "top")]:
        t.add_column(col, justify="right")
    for r in results:
        cells = [r["table"].removeprefix("measured-"), f"{r['ceiling_tau']:.2f}",
                 f"{r['start']['tau']:.2f}", f"{r['start']['top']:.2f}"]
        for n in sizes:
            f = r["fitted"][n]
            cells += [f"{f['tau']:.2f} ({f['tau_range'][0]:.2f}-{f['tau_range'][1]:.2f})",
                      f"{f['top']:.2f} ({f['top_range'][0]:.2f}-{f['top_range'][1]:.2f})"]
        t.add_row(*cells)
    Console(width=170).print(t)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"n": sizes, "seeds": a.seeds, "tables": results}, indent=1))
    print(f"-> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
