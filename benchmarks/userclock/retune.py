"""Case ``retune``: how fast a session with ``retune_on_drift`` notices a link change and recovers.

On a 2-host emulated cluster the job of ``tests/retune_worker.py`` (2 workers, 1 MiB of
gradients, 50 ms of emulated compute, ``retune_on_drift=0.2``, drift window 6; the job
the re-tune test runs) trains until the session has locked and measured its drift
baseline; then the link changes under it (``Cluster.reshape``: ``tc`` on the running
hosts). Per scenario:

* ``notice``: from the change to the iteration at which drift started a re-tune (seconds
  and iterations);
* ``within_10pct``: from the change until the job's throughput (median of 5 iterations)
  is within 10 % of the new optimum, estimated as the kept throughput of a fresh job
  tuned on the new link from the start (``--ref-budget`` iterations);
* ``retunes``: how many re-tunes the change started.

    sudo .venv/bin/python benchmarks/clock_bench.py retune [--scenarios cut,raise,cap]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import machine
from userclock.common import command

TESTS = Path(__file__).resolve().parents[2] / "tests"
JSON = "clock/retune.json"

#: name: (link before, link after), each (rate, per-flow cap)
SCENARIOS = {
    "cut": (("40mbit", None), ("10mbit", None)),
    "raise": (("10mbit", None), ("40mbit", None)),
    "cap": (("40mbit", None), ("40mbit", "5mbit")),
}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenarios", default="cut,raise,cap", help="of " + ",".join(SCENARIOS))
    p.add_argument("--steps", type=int, default=90)
    p.add_argument("--ref-budget", type=int, default=24)


def check(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    a.scenario_list = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    bad = [s for s in a.scenario_list if s not in SCENARIOS]
    if bad or not a.scenario_list:
        p.error(f"scenarios of {', '.join(SCENARIOS)}; got {a.scenarios!r}")


def _worker():
    sys.path.insert(0, str(TESTS))
    import retune_worker

    return retune_worker


def median_rate(rows: list, start: int, n: int = 5) -> float | None:
    """Iterations per second: median over ``rows[start:start + n]``."""
    part = rows[start:start + n]
    return 1.0 / statistics.median(r[1] for r in part) if len(part) == n else None


def reference(after: tuple, budget: int, steps: int, tmp: Path) -> float:
    """The new optimum: a fresh job tuned on the new link, its locked throughput."""
    from autotune.emulate import Cluster

    with Cluster(hosts=2, rate=after[0], flow_cap=after[1]) as c:
        res = _worker().run_job(c, tmp, lambda: None, budget=budget, steps=steps)
    locked = [r[1] for r in res["rows"] if r[2] == "locked"]
    return 1.0 / statistics.median(locked)


def scenario(name: str, a: argparse.Namespace, tmp: Path) -> dict:
    from autotune.emulate import Cluster

    before, after = SCENARIOS[name]
    with Cluster(hosts=2, rate=before[0], flow_cap=before[1]) as c:
        res = _worker().run_job(c, tmp / name,
                                lambda: c.reshape(after[0], flow_cap=after[1]), steps=a.steps)
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


def run(a: argparse.Namespace) -> dict:
    started = time.time()
    results = {}
    with tempfile.TemporaryDirectory() as d:
        for name in a.scenario_list:
            results[name] = scenario(name, a, Path(d))
    return {"benchmark": "clock_bench", "case": "retune", "command": command("retune"),
            "spec": _worker().SPEC, "wall_s": time.time() - started, "scenarios": results,
            "machine": machine()}


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="re-tune on drift: a link change under a locked session")
    for col in ("scenario", "before -> after", "re-tunes", "noticed after",
                "within 10 % of the new optimum after"):
        t.add_column(col)
    for name, r in res["scenarios"].items():
        t.add_row(name, f"{_link(r['before'])} -> {_link(r['after'])}", str(r["retunes"]),
                  f"{r['notice_s']:.1f} s ({r['notice_iterations']} it)"
                  if r["notice_s"] is not None else "never",
                  f"{r['within_10pct_s']:.1f} s" if r["within_10pct_s"] is not None
                  else "never")
    Console(stderr=True).print(t)


def _link(link: list) -> str:
    rate, cap = link
    return rate + (f", {cap} a flow" if cap else "")
