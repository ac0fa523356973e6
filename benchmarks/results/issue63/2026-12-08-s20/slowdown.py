"""Where the Tuner's slowdown goes (issue 63, twentieth session): per technique, its trials
and iterations, their median truth (share of the optimum), how many at 0.95 or more and under
0.3; the median iterations to 95 %; then each technique's share of the slowdown (the optimum's
share lost, summed over iterations, overtime included) and of the iterations.

    .venv/bin/python benchmarks/results/issue63/2026-12-08-s20/slowdown.py unseen 16 20 [JSON]
    (from the repository root: suite, first seed, end seed, Tuner options)
"""
import collections, json, statistics, sys
sys.path.insert(0, "benchmarks")
import numpy as np
import tuner_bench as tb
from autotune.sim.calibration import Calibration
suite, seeds = sys.argv[1], range(int(sys.argv[2]), int(sys.argv[3]))
opts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
N = 10**6
per = collections.defaultdict(list)
it_by = collections.Counter(); cost = collections.Counter()
to95s = []
for si, sc in enumerate(tb.OBJECTIVES):
    if si not in tb.SUITES[suite]:
        continue
    _, _, opt = tb._optimum(si)
    for seed in seeds:
        if si in tb.SUITES["measured"]:
            hosts = tb._hosts([si], sorted(tb.HOSTS.glob("*.json")))
            sc.pin_host(Calibration.from_json(tb._host_of(hosts, si, seed)))
        rng, switches = np.random.default_rng([seed, si]), np.random.default_rng([seed, si, 1])
        t = tb._tuner(sc, "tuner", seed, 100, opts)
        spent, to95 = 0, None
        while (trial := t.ask()) is not None:
            score, used, measured = tb._measure(sc, t, trial, rng, switches, tb.CUT_SHORT)
            t.tell(trial, score, iterations=used, measured=measured)
            if spent < N:
                per[trial.technique].append(sc.throughput(trial.config) / opt)
                it_by[trial.technique] += used; cost[trial.technique] += used * (1 - sc.throughput(trial.config) / opt)
            spent += used
            held = t.best
            if to95 is None and held and sc.throughput(held[0]) >= 0.95 * opt:
                to95 = spent
        to95s.append(to95 or 101)
for k, v in sorted(per.items()):
    print(f"{k:10s} trials={len(v):4d} iters={it_by[k]:4d} median={statistics.median(v):.3f} >=.95:{sum(x>=.95 for x in v):3d} <.3:{sum(x<.3 for x in v):3d}")
print("median to95", statistics.median(to95s), "mean", statistics.mean(to95s))
tot = sum(cost.values()); its = sum(it_by.values())
print("slowdown", tot / its)
for k, v in cost.most_common():
    print(f"{k:10s} cost share {v / tot:.3f}  iters share {it_by[k] / its:.3f}  per-iter {v / it_by[k]:.3f}")
