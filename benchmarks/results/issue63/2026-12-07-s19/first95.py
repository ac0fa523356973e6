"""Where the iterations to 95 % go (issue 63, nineteenth session): for each run of the
Tuner as ``tuner_bench.py`` runs it, the first trial whose configuration is truly at 95 % of
the optimum, its technique, and the iteration at which the kept one is.

    .venv/bin/python benchmarks/results/issue63/2026-12-07-s19/first95.py unseen 16 24
    (from the repository root: suite, first seed, end seed; optional JSON Tuner options)
"""
import collections
import json
import statistics
import sys

sys.path.insert(0, "benchmarks")
import numpy as np  # noqa: E402
import tuner_bench as tb  # noqa: E402
from autotune.sim.calibration import Calibration  # noqa: E402

suite, seeds = sys.argv[1], range(int(sys.argv[2]), int(sys.argv[3]))
opts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
rows = []
for si, sc in enumerate(tb.OBJECTIVES):
    if si not in tb.SUITES[suite]:
        continue
    _, _, opt = tb._optimum(si)
    for seed in seeds:
        if si in tb.SUITES["measured"]:  # the recorded host calibration, as _run pins it
            hosts = tb._hosts([si], sorted(tb.HOSTS.glob("*.json")))
            sc.pin_host(Calibration.from_json(tb._host_of(hosts, si, seed)))
        rng, switches = np.random.default_rng([seed, si]), np.random.default_rng([seed, si, 1])
        t = tb._tuner(sc, "tuner", seed, 100, opts)
        spent, tried95, by, to95 = 0, None, None, None
        while (trial := t.ask()) is not None:
            score, used, measured = tb._measure(sc, t, trial, rng, switches, tb.CUT_SHORT)
            t.tell(trial, score, iterations=used, measured=measured)
            spent += used
            if tried95 is None and sc.throughput(trial.config) >= 0.95 * opt:
                tried95, by = spent, trial.technique
            held = t.best
            if to95 is None and held and sc.throughput(held[0]) >= 0.95 * opt:
                to95 = spent
        rows.append((sc.name, seed, tried95, by, to95))
        print(sc.name, seed, tried95, by, to95, flush=True)
print("median tried95", statistics.median([r[2] or 101 for r in rows]),
      "median to95", statistics.median([r[4] or 101 for r in rows]))
print(collections.Counter(r[3] for r in rows))
