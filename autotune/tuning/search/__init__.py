"""Search techniques with one ask/tell interface (scores are maximised).

``grid``, ``pbt``, ``bayes`` (scikit-optimize GP) and ``hyperband`` are the ensemble of
the AIACC-Training paper (ICDCS 2022, §VI); ``structured`` searches the categorical
subspaces and a compass on the ordinal knobs (AutoCCL, NSDI 2025); ``random`` and
``tpe`` / ``optuna-gp`` (Optuna's samplers) are there as baselines and alternatives. :func:`make_searcher` builds one by name.
"""

from __future__ import annotations

from typing import Any

from autotune.tuning.search.base import Observations, Searcher, canonical_table
from autotune.tuning.search.bayes import BayesianSearch, OptunaSearch
from autotune.tuning.search.grid import GridSearch
from autotune.tuning.search.hyperband import Hyperband
from autotune.tuning.search.pbt import PopulationBasedSearch
from autotune.tuning.search.random import RandomSearch
from autotune.tuning.search.structured import StructuredSearch
from autotune.tuning.space import SearchSpace

def _bayes(space: SearchSpace, seed: int = 0, sampler: str = "gp", **options: Any) -> Searcher:
    """The ``bayes`` technique: scikit-optimize's GP (``sampler="gp"``), or Optuna's
    TPE (``"tpe"``) or GP (``"optuna-gp"``) sampler behind the same interface."""
    if sampler == "gp":
        return BayesianSearch(space, seed, **options)
    if sampler in ("tpe", "optuna-gp"):
        return OptunaSearch(space, seed, sampler="tpe" if sampler == "tpe" else "gp", **options)
    raise ValueError(f"bayes sampler must be 'gp', 'tpe' or 'optuna-gp', got {sampler!r}")


TECHNIQUES: dict[str, Any] = {
    "grid": GridSearch,
    "pbt": PopulationBasedSearch,
    "bayes": _bayes,
    "hyperband": Hyperband,
    "random": RandomSearch,
    "structured": StructuredSearch,
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
    "PopulationBasedSearch", "RandomSearch", "Searcher", "StructuredSearch", "TECHNIQUES",
    "canonical_table", "make_searcher",
]
