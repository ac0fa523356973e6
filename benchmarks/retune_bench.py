"""How fast a session with ``retune_on_drift`` notices a link change and recovers (root).

On a 2-host emulated cluster the job of ``tests/retune_worker.py`` (2 workers, 1 MiB of
gradients, 50 ms of emulated compute, ``retune_on_drift=0.2``, drift window 6) trains
until the session has locked and measured its drift baseline; then the link changes under
it (``Cluster.reshape``: ``tc`` on the running hosts). Per scenario:

* ``notice``: from the change to the iteration at which drift started a re-tune (seconds
  and iterations);
* ``within_10pct``: from the change until the job's throughput (median of 5 iterations)
  is within 10 % of the new optimum, estimated as the kept throughput of a fresh job
  tuned on the new link from the start (``--ref-budget`` iterations);
* ``retunes``: how many re-tunes the change started.

    sudo PYTHONPATH=. python benchmarks/retune_bench.py [--scenarios cut,raise,cap]

Writes ``benchmarks/results/retune_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
import retune_worker  # noqa: E402

#: name: (link before, link after), each (rate, per-flow cap)
SCENARIOS = {
    "cut": (("40mbit", None), ("10mbit", None)),
    "raise": (("10mbit", None), ("40mbit", None)),
    "cap": (("40mbit", None), ("40mbit", "5mbit")),
}


def median_rate(rows: list, start: int, n: int = 5) -> float | None:
    """Iterations per second: median over ``rows[start:start + n]``."""
    part = rows[start:start + n]
    return 1.0 / statistics.median(r[1] for r in part) if len(part) == n else None


def reference(after: tuple, budget: int, steps: int, tmp: Path) -> float:
    """The new optimum: a fresh job tuned on the new link, its locked throughput."""
    from autotune.emulate import Cluster

    with Cluster(hosts=2, rate=after[0], flow_cap=after[1]) as c:
        res = retune_worker.run_job(c, tmp, lambda: None, budget=budget, steps=steps)
    locked = [r[1] for r in res["rows"] if r[2] == "locked"]
    return 1.0 / statistics.median(locked)


def scenario(name: str, a: argparse.Namespace, tmp: Path) -> dict:
    from autotune.emulate import Cluster

    before, after = SCENARIOS[name]
    with Cluster(hosts=2, rate=before[0], flow_cap=before[1]) as c:
        res = retune_worker.run_job(c, tmp / name, lambda: c.reshape(after[0], flow_cap=after[1]),
                                    steps=a.steps)
    ref = reference(after, a.ref_budget, a.ref_budget + 30, tmp / f"{name}-ref")
    rows, at, t0 = res["rows"], res["changed_at"], res["change_time"]
    # schedule.retunes counts iterations measured (1-based); rows are 0-based steps
    retunes = [i - 1 for i in res["retunes"] if i > at]
    out = {"before": before, "after": after, "changed_at_iteration": at,
           "retunes": len(retunes), "new_optimum_it_s": ref, "notice_s": None,
           "notice_iterations": None, "within_10pct_s": None}
    if retunes:
        out["notice_iterations"] = retunes[0] - at + 1
        out["notice_s"] = rows[retunes[0]][0] - t0
    for i in range(at, len(rows)):
        rate = median_rate(rows, i)
        if rate is not None and rate >= 0.9 * ref:
            out["within_10pct_s"] = rows[i + 4][0] - t0  # the window's last iteration
            break
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", default="cut,raise,cap")
    ap.add_argument("--steps", type=int, default=90)
    ap.add_argument("--ref-budget", type=int, default=24)
    ap.add_argument("--json", "--out", dest="out", default=str(HERE / "results" / "retune_bench.json"))
    a = ap.parse_args(argv)
    started = time.time()
    results = {}
    with tempfile.TemporaryDirectory() as d:
        for name in a.scenarios.split(","):
            results[name] = scenario(name, a, Path(d))
            print(name, json.dumps(results[name]), flush=True)
    doc = {"command": "benchmarks/retune_bench.py " + " ".join(argv or sys.argv[1:]),
           "spec": retune_worker.SPEC, "wall_s": time.time() - started, "scenarios": results}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
