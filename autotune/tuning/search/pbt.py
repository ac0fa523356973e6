"""Population-based training (PBT) as a configuration search.

There are no model weights to copy here (every trial trains the same model), so PBT's
exploit/explore loop acts on configurations only: the *population* is the
``population`` best configurations observed so far (by mean score, including other
techniques' trials). Until it is full, new members are the default and then random
configurations. Afterwards each ask *exploits* — picks a parent uniformly from the top
``quantile`` of the population — and *explores* — perturbs it (ordinal parameters
x0.8 or x1.2, at least one step; categorical ones resampled with ``resample_prob``).
A child replaces the worst member as soon as its mean beats it, which is the
truncation selection of PBT. Children already seen are redrawn; if perturbation keeps
hitting seen configurations, an unseen neighbour of a top member, or finally a random
unseen configuration, is proposed.
"""

from __future__ import annotations

import math

from autotune.tuning.search.base import Searcher
from autotune.tuning.space import Config, SearchSpace


class PopulationBasedSearch(Searcher):
    name = "pbt"

    def __init__(self, space: SearchSpace, seed: int = 0, population: int = 8,
                 quantile: float = 0.25, resample_prob: float = 0.25,
                 factors: tuple[float, float] = (0.8, 1.2)) -> None:
        super().__init__(space, seed)
        if population < 1:
            raise ValueError(f"population must be >= 1, got {population}")
        if not 0 < quantile <= 1:
            raise ValueError(f"quantile must be in (0, 1], got {quantile}")
        self.population = population
        self.quantile = quantile
        self.resample_prob = resample_prob
        self.factors = factors

    def members(self) -> list[Config]:
        """The current population, best first."""
        return [dict(st.config) for _, st in self.obs.ranked()[: self.population]]

    def ask(self) -> Config | None:
        members = self.members()
        if len(members) + len(self.pending) < self.population:
            default = self.space.default()
            if not self.seen(self.space.key(default)):
                return self._propose(default)
            c = self.random_unseen()
            return None if c is None else self._propose(c)
        if not members:  # population slots all pending: keep exploring
            c = self.random_unseen()
            return None if c is None else self._propose(c)
        top = members[: max(1, math.ceil(self.quantile * len(members)))]
        for _ in range(20):
            parent = self.rng.choice(top)
            child = self.space.perturb(parent, self.rng, self.factors, self.resample_prob)
            if not self.seen(self.space.key(child)):
                return self._propose(child)
        for parent in top:
            free = [n for n in self.space.neighbours(parent) if not self.seen(self.space.key(n))]
            if free:
                return self._propose(self.rng.choice(free))
        c = self.random_unseen()
        return None if c is None else self._propose(c)
