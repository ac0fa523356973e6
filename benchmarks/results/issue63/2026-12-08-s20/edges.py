"""Where each technique's trials go (issue 63, twentieth session): per technique and ordinal
knob, the share of its trials (within the budget) with the knob at an end of its range; then
per technique, its trials with the streams or the chunk size at an end (True) or not (False):
how many, their median truth (share of the optimum), the share under 0.3 and at 0.95 or more.

    .venv/bin/python benchmarks/results/issue63/2026-12-08-s20/edges.py unseen 16 20 [METHOD [JSON]]
    (from the repository root: suite, first seed, end seed, method (tuner), Tuner options)
"""
import collections, json, sys
sys.path.insert(0, "benchmarks")
import numpy as np
import tuner_bench as tb
from autotune.sim.calibration import Calibration
suite, seeds = sys.argv[1], range(int(sys.argv[2]), int(sys.argv[3]))
method = sys.argv[4] if len(sys.argv) > 4 else "tuner"
opts = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
tot = collections.Counter(); edge = collections.Counter(); tr = collections.defaultdict(list)
for si, sc in enumerate(tb.OBJECTIVES):
    if si not in tb.SUITES[suite]:
        continue
    oc, _ = sc.optimum
    ords = [p for p in sc.space.params if p.ordinal and len(p.values) > 2]
    print(sc.name, "optimum", {p.name: f"{p.values.index(oc[p.name])}/{len(p.values)-1}" for p in ords if p.active(oc)})
    for seed in seeds:
        if si in tb.SUITES["measured"]:
            hosts = tb._hosts([si], sorted(tb.HOSTS.glob("*.json")))
            sc.pin_host(Calibration.from_json(tb._host_of(hosts, si, seed)))
        rng, switches = np.random.default_rng([seed, si]), np.random.default_rng([seed, si, 1])
        t = tb._tuner(sc, method, seed, 100, opts)
        while (trial := t.ask()) is not None:
            score, used, measured = tb._measure(sc, t, trial, rng, switches, tb.CUT_SHORT)
            t.tell(trial, score, iterations=used, measured=measured)
            if t.spent > 100: continue
            e = any(p.active(trial.config) and p.values.index(trial.config[p.name]) in (0, len(p.values)-1) for p in ords if p.name in ('streams','chunk_bytes'))
            tr[(trial.technique, e)].append(sc.throughput(trial.config)/sc.optimum[1])
            for p in ords:
                if p.active(trial.config):
                    tot[(trial.technique, p.name)] += 1
                    i = p.values.index(trial.config[p.name])
                    edge[(trial.technique, p.name)] += i in (0, len(p.values) - 1)
for k in sorted(tot):
    print(k, tot[k], f"{edge[k]/tot[k]:.2f}")

import statistics
for k in sorted(tr): print(k, len(tr[k]), 'median truth %.3f' % statistics.median(tr[k]), '<.3: %.2f' % (sum(x<.3 for x in tr[k])/len(tr[k])), '>=.95: %.2f' % (sum(x>=.95 for x in tr[k])/len(tr[k])))
