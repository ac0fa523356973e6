"""The guard: a nominee the physics calls hopeless does not run.

Some configurations are slower than the default by a large factor, and the physics knows
it: under push/pull, one Summation Service carrying the whole gradient (one server, or a
chunk larger than the model); on the demo's cluster such a trial took 6.5 s where the
default takes 1.34 s and the best 1.0 s. Cut short after its switch iteration it still
costs five iterations of the job. The screen (:mod:`autotune.tuning.screen`) lets a share
of the nominees through unscreened, and none is screened before the prior has earned its
weight by ranking the trials (near-ties among the best make that slow), so such nominees
ran, about once a search.

:func:`hopeless`: the prior's own prediction (no weight, no residual model), relative to
its prediction of the incumbent, under :data:`HOPELESS`, where the prior was measured
right (within that factor) in the nominee's categorical subspace: same transport,
intra, root and codec. A subspace the prior was never checked in is left to the screen,
so a prior blind to a whole region (it believes push/pull a hundred times slower, and the
optimum is there) is found out there; and once any measurement shows the prior wrong by
the factor, nothing is guarded. Nothing here imports torch.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

HOPELESS = 1 / 3  # predicted at under this share of the incumbent's speed: not run


def hopeless(surrogate: Any, config: Mapping) -> float | None:
    """The score ``config`` would have if the prior's ratio to the incumbent held, when it
    is hopeless (module docstring) for the :class:`~autotune.tuning.prior.Surrogate`
    ``surrogate``; else None."""
    s = surrogate
    best = s.obs.best()
    if best is None or s.failed is not None:
        return None
    c = s.space.validate(config)
    i, j = s.locate(best[0]), s.locate(c)  # (either may grow the pool)
    ref = float(s.log_prior[i])
    ratio = float(s.log_prior[j]) - ref
    if not (math.isfinite(ref) and math.isfinite(ratio)) or ratio >= math.log(HOPELESS):
        return None
    categorical = [p.name for p in s.space.params if not p.ordinal]
    checked, factor = False, -math.log(HOPELESS)
    for _, st in s.obs.scored():
        k = s.locate(st.config)
        error = math.log(max(st.mean, 1e-12) / best[1]) - (float(s.log_prior[k]) - ref)
        if error > factor:  # it ran that much faster than the prior said
            return None
        checked |= abs(error) < factor and all(st.config[n] == c[n] for n in categorical)
    return best[1] * math.exp(ratio) if checked else None
