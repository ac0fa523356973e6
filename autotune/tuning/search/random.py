"""Random search: a uniformly drawn unseen configuration each time (the baseline)."""

from __future__ import annotations

from autotune.tuning.search.base import Searcher
from autotune.tuning.space import Config


class RandomSearch(Searcher):
    name = "random"

    def ask(self) -> Config | None:
        c = self.random_unseen()
        return None if c is None else self._propose(c)
