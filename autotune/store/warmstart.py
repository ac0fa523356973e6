"""Warm start: the best configurations of the most similar stored runs, made usable in
a new job's search space.

The AIACC-Training paper (ICDCS 2022, §VI) uses the best setting found for the most similar earlier deployment as
the starting point of the search. Seeding points (rather than a surrogate model) is
what the Tuner does with them: it tries them first.

Only alike jobs count (docs/store.md, "Warm start"): a stored run warm-starts a job when

* its scores are of the job's kind (:func:`autotune.units.alike_units`: measured
  throughput, goodput, or simulated; samples/s and it/s alike, as an offline ``autotune
  tune`` scores it/s and a job with ``samples_per_step`` samples/s): a simulated run's best
  is a prediction, not a measurement, and warm-starts only simulated runs;
* its search space had the same facts :data:`SAME_FACTS` (the servers launched, the
  workers per machine: what decides the transport and the intra-machine strategy);
* it ran on one machine if the job does, across machines if the job does (loopback
  versus a network);
* its job distance (model + cluster graph edit distance) is at most :data:`MAX_DISTANCE`,
  and at most :data:`OTHER_JOB_DISTANCE` when it is another job (another name: the default
  name is the script and the model's class, so two scripts on one machine differ).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

    from autotune.store.nearest import NearestRuns
    from autotune.tuning.space import Config, SearchSpace


#: The largest job distance that warm-starts (normalized model GED + cluster GED).
#: ``scripts/warm_distances.py``: variants of one model family (ResNet-50/101 0.01,
#: BERT-base/large 0.27, GPT-2/medium 0.29, wider or deeper MLPs 0.10-0.30) and a cluster
#: of half or twice the machines (0.44-0.47) stay at or below 0.5; another model family
#: (0.71-1.03) or a cluster four times the size (0.71-0.72) is beyond it.
MAX_DISTANCE = 0.5

#: The largest distance at which *another* job's run warm-starts: small models of unrelated
#: families are only 0.5 apart (measured: a 3-layer MLP, a 2-convolution CNN and a 2-layer
#: transformer LM, pairwise, on one machine), so a run of another name must be as close as
#: variants of one family (0.10-0.30 above).
OTHER_JOB_DISTANCE = 0.3

#: Space facts a stored run must share with the job (``SearchSpace.facts``).
SAME_FACTS = ("k_max", "workers_per_machine")


def project_configs(configs: Iterable[Mapping[str, Any]], space: "SearchSpace") -> list["Config"]:
    """Each config mapped into ``space`` (``space.project``: ordinals snapped to its
    domains), invalid ones dropped, duplicates dropped, order kept."""
    return [c for c, _ in _projected(((c, None) for c in configs), space)]


def _projected(pairs: Iterable[tuple[Any, Any]], space: "SearchSpace") -> list[tuple["Config", Any]]:
    """:func:`project_configs` of the first of each pair, the second carried along."""
    out: list[tuple[Config, Any]] = []
    seen: set[tuple[int, ...]] = set()
    for c, extra in pairs:
        if not isinstance(c, Mapping):
            continue
        p = space.project(c)
        if p is None:
            continue
        key = space.key(p)
        if key not in seen:
            seen.add(key)
            out.append((p, extra))
    return out


def warm_start_sources(store: "NearestRuns", model_graph: "nx.Graph | None",
                       topology_graph: "nx.Graph | None", space: "SearchSpace",
                       k: int = 3, *, unit: str, machines: int,
                       max_distance: float = MAX_DISTANCE, job: str | None = None,
                       **nearest_kw: Any) -> list[tuple["Config", dict[str, Any]]]:
    """The best configs of the ``k`` nearest finished runs of jobs alike this one (the
    module docstring: scores of ``unit``'s kind, the same :data:`SAME_FACTS` as ``space``, the
    same machine class as a job on ``machines`` machines, at most ``max_distance``
    away; a run of a job named other than ``job`` at most :data:`OTHER_JOB_DISTANCE`,
    when ``job`` is given), projected into ``space``, nearest first (see :func:`project_configs`), each
    with its origin (:func:`autotune.store.origin.origin_of`: the run, its job, when;
    how: ``warm start``; its ``distance``, and ``speedup``/``beat_default``: how its best
    did against its own default)."""
    from autotune.store.origin import WARM_START, origin_of
    from autotune.units import alike_units

    facts = dict(space.facts)
    near = store.nearest(model_graph, topology_graph, k, unit=alike_units(unit),
                         space_facts={f: facts[f] for f in SAME_FACTS if f in facts},
                         across_machines=machines > 1, max_distance=max_distance,
                         **nearest_kw)
    if job is not None:
        near = [(run, d) for run, d in near
                if run.get("job") == job or d <= min(max_distance, OTHER_JOB_DISTANCE)]
    return _projected(((run["best_config"], {**origin_of(run, WARM_START),
                                               "distance": round(float(d), 4),
                                               **_against_default(run)})
                       for run, d in near), space)


#: standard errors by which a stored best must have beaten its own run's default to be
#: tried where a job affords no search (as a kept configuration must: schedule/kept.py)
Z_STORED = 1.0


def _against_default(run: Mapping[str, Any]) -> dict[str, Any]:
    """What the run measured of its best against its own default: ``speedup`` (the ratio,
    None when refused) and ``beat_default``, whether by more than the noise
    (:data:`Z_STORED` standard errors; :meth:`autotune.speedup.Speedup.beats`)."""
    from autotune.speedup import Speedup

    s = Speedup.of_run(run)
    ratio = s.ratio
    return {"speedup": None if ratio is None else round(ratio, 3),
            "beat_default": s.beats(Z_STORED)}


def warm_start_configs(store: "NearestRuns", model_graph: "nx.Graph | None",
                       topology_graph: "nx.Graph | None", space: "SearchSpace",
                       k: int = 3, *, unit: str, machines: int,
                       max_distance: float = MAX_DISTANCE, **nearest_kw: Any) -> list["Config"]:
    """:func:`warm_start_sources` without the origins."""
    return [c for c, _ in warm_start_sources(store, model_graph, topology_graph, space, k,
                                             unit=unit, machines=machines,
                                             max_distance=max_distance, **nearest_kw)]
