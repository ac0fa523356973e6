"""Warm start: the best configurations of the most similar stored runs, made usable in
a new job's search space.

The AIACC-Training paper (ICDCS 2022, §VI) uses the best setting found for the most similar earlier deployment as
the starting point of the search. Seeding points (rather than a surrogate model) is
what the Tuner does with them: it tries them first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

    from autotune.tuning.space import Config, SearchSpace
    from autotune.store.db import Store


def project_configs(configs: Iterable[Mapping[str, Any]], space: "SearchSpace") -> list["Config"]:
    """Each config mapped into ``space`` (``space.project``: ordinals snapped to its
    domains), invalid ones dropped, duplicates dropped, order kept."""
    out: list[Config] = []
    seen: set[tuple[int, ...]] = set()
    for c in configs:
        if not isinstance(c, Mapping):
            continue
        p = space.project(c)
        if p is None:
            continue
        key = space.key(p)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def warm_start_configs(store: "Store", model_graph: "nx.Graph | None",
                       topology_graph: "nx.Graph | None", space: "SearchSpace",
                       k: int = 3, **nearest_kw: Any) -> list["Config"]:
    """The best configs of the ``k`` nearest finished runs, projected into ``space``,
    nearest first (see :func:`project_configs`)."""
    near = store.nearest(model_graph, topology_graph, k, **nearest_kw)
    return project_configs((run["best_config"] for run, _ in near), space)
