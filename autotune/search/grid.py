"""Grid search: a coarse grid walked from the defaults outward.

The grid is :meth:`SearchSpace.grid` (ordinal parameters at a few evenly spread
levels, categorical ones at every value). The first point is the default (the safe
baseline); each next point is the unevaluated grid point closest to a *centre*: the
default, or — with ``recentre=True`` (the default) — the best configuration observed so
far, by anyone. Closest means fewest parameters changed, then fewest grid steps, then
grid order, so the walk is deterministic and moves outward from what works. Every grid
point is proposed at most once; ``ask`` returns ``None`` when the grid is exhausted.
"""

from __future__ import annotations

import numpy as np

from autotune.search.base import Searcher
from autotune.space import Config, SearchSpace


class GridSearch(Searcher):
    name = "grid"

    def __init__(self, space: SearchSpace, seed: int = 0, levels: int = 5,
                 recentre: bool = True) -> None:
        super().__init__(space, seed)
        self.recentre = recentre
        self.points = space.grid(levels)
        self._codes = np.array([space.encode(c) for c in self.points], dtype=np.int64)
        params = space.params
        self._ordinal = np.array([p.ordinal for p in params])
        # one coarse grid step, in domain indices, per ordinal parameter
        self._step = np.array(
            [max(1.0, (len(p.values) - 1) / max(1, levels - 1)) if p.ordinal else 1.0 for p in params]
        )
        self._order = np.arange(len(self.points))
        self._index = {tuple(int(v) for v in row): i for i, row in enumerate(self._codes)}
        self._free = np.ones(len(self.points), dtype=bool)

    def ask(self) -> Config | None:
        for k in list(self.obs.stats) + list(self.pending):
            i = self._index.get(k)
            if i is not None:
                self._free[i] = False
        free = self._free
        if not free.any():
            return None
        centre = self.space.default()
        if self.recentre:
            best = self.obs.best()
            if best is not None:
                centre = best[0]
        e = np.array(self.space.encode(centre), dtype=np.int64)
        diff = self._codes[free] - e
        changed = (diff != 0).sum(axis=1)
        steps = np.where(self._ordinal, np.abs(diff) / self._step, (diff != 0).astype(float)).sum(axis=1)
        order = self._order[free]
        pick = np.lexsort((order, np.round(steps, 9), changed))[0]
        return self._propose(dict(self.points[int(order[pick])]))
