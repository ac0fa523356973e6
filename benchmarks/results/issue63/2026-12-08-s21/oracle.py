"""A replay oracle for the measured tables: it is told the rows within X % of the optimum
(their order unknown) and spends S scored iterations racing them (round robin, one recorded
sample each, with replacement, as the replay draws them); it keeps the best mean. How often
is that within 1 % of the optimum? (issue 63, twenty-first session; run on the six-sample
tables, before intra and wlossycap were recorded again)

    .venv/bin/python benchmarks/results/issue63/2026-12-08-s21/oracle.py   (from the repository root)
"""
import sys; sys.path.insert(0, 'benchmarks')
import numpy as np
from measured import load_all
rng = np.random.default_rng(0)
R = 4000
for job in load_all():
    samples = [s for _, s in job._rows]
    med = np.array([np.median(s) for s in samples]); opt = med.max()
    out = []
    for X in (0.03, 0.05, 0.10):
        idx = np.where(med >= (1 - X) * opt)[0]
        for S in (25, 50):
            per = max(1, S // len(idx))
            w = 0
            for _ in range(R):
                means = [rng.choice(samples[i], size=per).mean() for i in idx]
                w += med[idx[int(np.argmax(means))]] >= 0.99 * opt
            out.append(f"X{int(X*100)}%:{len(idx)}rows S{S}:{w / R * 100:.0f}%")
    print(f"{job.name:20s}", "  ".join(out))
