# Where the iterations to 95 % go (issue 63, nineteenth session): for each run, the first
# trial truly at 95 % of the optimum, its technique, and when the kept one is.
# .venv/bin/python benchmarks/results/issue63/2026-12-07-s19/first95.py unseen 16 24 (from the repository root)
import sys, json, collections, statistics
sys.path.insert(0, 'benchmarks')  # run from the repository root
import numpy as np
import tuner_bench as tb
suite = sys.argv[1]; seeds = range(int(sys.argv[2]), int(sys.argv[3]))
opts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
names = {o.name for o in tb.OBJECTIVES}
rows = []
for si, sc in enumerate(tb.OBJECTIVES):
    if si not in tb.SUITES[suite]:
        continue
    _, oc, opt = tb._optimum(si)
    for seed in seeds:
        if si in tb.SUITES['measured']:
            from autotune.sim.calibration import Calibration
            hosts = tb._hosts([si], sorted(tb.HOSTS.glob("*.json"))); sc.pin_host(Calibration.from_json(tb._host_of(hosts, si, seed)))
        rng = np.random.default_rng([seed, si]); sw = np.random.default_rng([seed, si, 1])
        t = tb._tuner(sc, 'tuner', seed, 100, opts)
        spent = 0; tried95 = None; by = None; to95 = None; first = []
        while (tr := t.ask()) is not None:
            score, used, m = tb._measure(sc, t, tr, rng, sw, tb.CUT_SHORT)
            t.tell(tr, score, iterations=used, measured=m)
            spent += used
            truth = sc.throughput(tr.config) / opt
            if tried95 is None and truth >= 0.95:
                tried95, by = spent, tr.technique
            h = t.best
            if to95 is None and h and sc.throughput(h[0]) >= 0.95 * opt:
                to95 = spent
        rows.append((sc.name, seed, tried95, by, to95))
        print(sc.name, seed, tried95, by, to95, flush=True)
print('median tried95', statistics.median([r[2] or 101 for r in rows]), 'median to95', statistics.median([r[4] or 101 for r in rows]))
print(collections.Counter(r[3] for r in rows))
