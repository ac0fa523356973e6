"""The issue's targets for the Tuner's runs in TUNER.json against the stock methods' (Bayes,
TPE) in STOCK.json, per suite: pooled median regret and its ratio, slowdown against TPE's,
per job the Tuner's median over the best stock method's (floor 1 %).

    python targets.py STOCK.json TUNER.json
"""
import collections
import json
import statistics as st
import sys

stock = [r for r in json.load(open(sys.argv[1]))["runs"] if r["method"] in ("bayes", "tpe")]
tuner = [r for r in json.load(open(sys.argv[2]))["runs"] if r["method"] == "tuner"]
by = collections.defaultdict(list)
for r in stock + tuner:
    by[(r["method"], r["scenario"])].append(r)
med = {m: st.median(r["regret"] for r in stock + tuner if r["method"] == m) for m in ("tuner", "bayes", "tpe")}
cost = {m: st.mean(r["tuning_cost"] for r in stock + tuner if r["method"] == m) for m in ("tuner", "tpe")}
print({k: round(v * 100, 2) for k, v in med.items()}, "ratio %.2f" % (med["tuner"] / min(med["bayes"], med["tpe"])),
      "within 1 %%: %.0f %%" % (100 * sum(r["regret"] <= 0.01 for r in tuner) / len(tuner)),
      "to95", st.median(r["iterations_to_95"] for r in tuner),
      "slowdown %.1f / %.1f %% (%.2fx)" % (cost["tuner"] * 100, cost["tpe"] * 100, cost["tuner"] / cost["tpe"]))
for s in sorted({r["scenario"] for r in tuner}):
    t = st.median(r["regret"] for r in by[("tuner", s)])
    b = min(st.median(r["regret"] for r in by[(m, s)]) for m in ("bayes", "tpe"))
    print(f"   {s:25s} tuner {t * 100:.2f} best stock {b * 100:.2f} ratio {max(t, 0.01) / max(b, 0.01):.2f}")
