"""Search techniques with one ask/tell interface (scores are maximised).

``grid``, ``pbt``, ``bayes`` (scikit-optimize GP) and ``hyperband`` are the ensemble of
paper 004 §VI; ``random`` and ``tpe`` / ``optuna-gp`` (Optuna's samplers) are there as
baselines and alternatives. :func:`make_searcher` builds one by name.
"""

from __future__ import annotations

from typing import Any

from autotune.search.base import Observations, Searcher, canonical_table
from autotune.search.bayes import BayesianSearch, OptunaSearch
from autotune.search.grid import GridSearch
from autotune.search.hyperband import Hyperband
from autotune.search.pbt import PopulationBasedSearch
from autotune.search.random import RandomSearch
from autotune.space import SearchSpace

TECHNIQUES: dict[str, Any] = {
    "grid": GridSearch,
    "pbt": PopulationBasedSearch,
    "bayes": BayesianSearch,
    "hyperband": Hyperband,
    "random": RandomSearch,
    "tpe": lambda space, seed=0, **kw: OptunaSearch(space, seed, sampler="tpe", **kw),
    "optuna-gp": lambda space, seed=0, **kw: OptunaSearch(space, seed, sampler="gp", **kw),
}


def make_searcher(name: str, space: SearchSpace, seed: int = 0, **options: Any) -> Searcher:
    """The searcher called ``name`` (one of :data:`TECHNIQUES`)."""
    try:
        factory = TECHNIQUES[name]
    except KeyError:
        raise ValueError(f"unknown technique {name!r}; choose from {', '.join(TECHNIQUES)}") from None
    return factory(space, seed, **options)


__all__ = [
    "BayesianSearch", "GridSearch", "Hyperband", "Observations", "OptunaSearch",
    "PopulationBasedSearch", "RandomSearch", "Searcher", "TECHNIQUES", "canonical_table",
    "make_searcher",
]
