"""Grid search: a coarse grid walked from the defaults outward.

The grid is the space's canonical configurations with each ordinal parameter at a few
evenly spread levels (:meth:`SearchSpace.coarse_values`) and each categorical one at
every value, in order outward from the default (:meth:`GridSearch.points`). The first
point is the default (the safe
baseline); each next point is the unevaluated grid point closest to a *centre*.
Closest means fewest parameters changed, then fewest grid steps, then grid order, so
the walk is deterministic. The centre depends on ``recentre``:

- ``"grid"`` (default): the best grid point measured so far (by anyone). The walk is a
  coordinate search on the coarse grid that starts at the default and follows what
  works, and stays independent of off-grid finds of other techniques, which keeps the
  ensemble diverse (a lucky random config elsewhere does not capture the walk);
- ``"any"``: the best configuration measured so far, on the grid or not;
- ``"none"``: always the default (plain outward order).

Every grid point is proposed at most once; ``ask`` returns ``None`` when the grid is
exhausted.
"""

from __future__ import annotations

import numpy as np

from autotune.tuning.search.base import Searcher, canonical_table
from autotune.tuning.space import Config, SearchSpace


class GridSearch(Searcher):
    name = "grid"

    def __init__(self, space: SearchSpace, seed: int = 0, levels: int = 5,
                 recentre: str = "grid") -> None:
        super().__init__(space, seed)
        if recentre not in ("grid", "any", "none"):
            raise ValueError(f"recentre must be 'grid', 'any' or 'none', got {recentre!r}")
        self.recentre = recentre
        # the coarse grid, taken from the table of canonical configurations (fast even
        # for spaces of 10^5..10^6 configurations)
        table = canonical_table(space)
        keep = np.ones(len(table), dtype=bool)
        for i, p in enumerate(space.params):
            if p.ordinal:
                keep &= np.isin(table[:, i], [p.index(v) for v in space.coarse_values(p, levels)])
        codes = table[keep]
        params = space.params
        self._ordinal = np.array([p.ordinal for p in params])
        # one coarse grid step, in domain indices, per ordinal parameter
        self._step = np.array(
            [max(1.0, (len(p.values) - 1) / max(1, levels - 1)) if p.ordinal else 1.0 for p in params]
        )
        # grid order: outward from the default (fewest parameters changed, then fewest
        # coarse steps), the tie-break later
        changed, steps = self._distance(codes, np.array(space.encode(space.default())))
        codes = codes[np.lexsort((np.arange(len(codes)), steps, changed))]
        self._codes = codes
        self._radix = np.cumprod([1] + [len(p.values) for p in params[:-1]]).astype(np.int64)
        self._index = {int(c): i for i, c in enumerate(codes @ self._radix)}
        self._free = np.ones(len(codes), dtype=bool)

    def __len__(self) -> int:
        """Number of grid points."""
        return len(self._codes)

    def points(self) -> list[Config]:
        """The grid in its order, outward from the default (module docstring)."""
        return [self.space.decode(c) for c in self._codes]

    def _distance(self, codes: np.ndarray, centre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(parameters changed, coarse grid steps) from ``centre`` to each row."""
        diff = codes - centre
        changed = (diff != 0).sum(axis=1)
        steps = np.where(self._ordinal, np.abs(diff) / self._step, (diff != 0).astype(float)).sum(axis=1)
        return changed, np.round(steps, 9)

    def ask(self) -> Config | None:
        for k in list(self.obs.stats) + list(self.pending):
            i = self._index.get(int(np.dot(k, self._radix)))
            if i is not None:
                self._free[i] = False
        free = np.flatnonzero(self._free)
        if len(free) == 0:
            return None
        centre = self.space.default()
        if self.recentre == "any":
            best = self.obs.best()
            if best is not None:
                centre = best[0]
        elif self.recentre == "grid":
            on_grid = [st for k, st in self.obs.ranked()
                       if int(np.dot(k, self._radix)) in self._index]
            if on_grid:
                centre = on_grid[0].config
        changed, steps = self._distance(self._codes[free], np.array(self.space.encode(centre)))
        pick = free[np.lexsort((free, steps, changed))[0]]
        return self._propose(self.space.decode(self._codes[pick]))
