"""Paired comparison of runs: python pairs.py BASE.json VARIANT.json [BASE2 VARIANT2 ...] (the Tuner's runs, by scenario and seed)."""
import json, sys, statistics as st, collections
from scipy.stats import wilcoxon
def load(p, m='tuner'): return {(r['scenario'], r['seed']): r for r in json.load(open(p))['runs'] if r['method']==m}
args = sys.argv[1:]
base, var = {}, {}
for i in range(0, len(args), 2):
    base.update(load(args[i])); var.update(load(args[i+1]))
keys = sorted(set(base) & set(var))
d = [var[k]['regret'] - base[k]['regret'] for k in keys]
better = sum(x < -1e-12 for x in d); worse = sum(x > 1e-12 for x in d)
nz = [x for x in d if abs(x) > 1e-12]
p = wilcoxon(nz).pvalue if nz else 1
f = lambda runs, key, agg: agg([runs[k][key] for k in keys])
print(len(keys), f'better {better} worse {worse} p={p:.3f}',
      'median', round(f(base,'regret',st.median)*100,2), '->', round(f(var,'regret',st.median)*100,2),
      'within1', round(sum(base[k]['regret']<=0.01 for k in keys)/len(keys)*100), '->', round(sum(var[k]['regret']<=0.01 for k in keys)/len(keys)*100),
      'to95', f(base,'iterations_to_95',st.median), '->', f(var,'iterations_to_95',st.median),
      'cost', round(f(base,'tuning_cost',st.mean)*100,1), '->', round(f(var,'tuning_cost',st.mean)*100,1))
by = collections.defaultdict(list)
for k in keys: by[k[0]].append(k)
for sc, ks in by.items():
    print(f'  {sc:25s} median {st.median(base[k]["regret"] for k in ks)*100:.2f} -> {st.median(var[k]["regret"] for k in ks)*100:.2f}  to95 {st.median(base[k]["iterations_to_95"] for k in ks)} -> {st.median(var[k]["iterations_to_95"] for k in ks)}  cost {st.mean(base[k]["tuning_cost"] for k in ks)*100:.1f} -> {st.mean(var[k]["tuning_cost"] for k in ks)*100:.1f}')
