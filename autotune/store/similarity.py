"""How far apart two jobs are: graph edit distance over model and topology graphs.

Paper 004 §VI starts a new job from the best setting of the most similar earlier one,
similarity being the graph edit distance (GED) of the DNN graph and of the cluster
graph. Here:

* Costs come from labels: substituting a node costs 0 when the labels are equal, 0.5
  when only the kinds are equal, 1 otherwise; deleting or inserting a node costs 1.
  Edges likewise.
* Each GED is divided by the size (nodes + edges) of the larger graph, so model and
  topology weigh the same; the job distance is their sum (0 = same job).
* Equal fingerprints short-circuit to 0. Before any GED, a cheap lower bound from the
  node/edge counts and label multisets prunes candidates that cannot enter the top k.
* Each GED (networkx ``optimize_edit_paths``) runs under a hard time limit and an upper
  bound (the current k-th best); when time runs out the best edit path found so far is
  taken. A comparison that finds no path within the limit counts as too far.
  :func:`rank` also has an overall time budget.

Everything here works on :class:`Summary` objects and knows nothing of SQLite.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Hashable, Iterable

import networkx as nx

from autotune.store.fingerprint import fingerprint, normalize

TIMEOUT_S = 0.05  # per graph comparison
BUDGET_S = 0.35  # per ranking, all comparisons together


def node_subst_cost(a: dict, b: dict) -> float:
    if a.get("label") == b.get("label"):
        return 0.0
    return 0.5 if a.get("kind") == b.get("kind") else 1.0


edge_subst_cost = node_subst_cost


@dataclass(frozen=True)
class Summary:
    """A normalized graph with what the lower bounds need."""

    fp: str
    graph: nx.Graph = field(repr=False, compare=False)
    nodes: int
    edges: int
    node_labels: Counter = field(repr=False, compare=False)
    edge_labels: Counter = field(repr=False, compare=False)

    @classmethod
    def of(cls, g: nx.Graph | None, fp: str | None = None) -> "Summary":
        g = normalize(g)
        return cls(
            fp=fp or fingerprint(g),
            graph=g,
            nodes=g.number_of_nodes(),
            edges=g.number_of_edges(),
            node_labels=Counter(d["label"] for _, d in g.nodes(data=True)),
            edge_labels=Counter(d["label"] for _, _, d in g.edges(data=True)),
        )

    @property
    def size(self) -> int:
        return self.nodes + self.edges


def _part_bound(n1: int, n2: int, l1: Counter, l2: Counter) -> float:
    # |n1 - n2| insertions/deletions at least; of the min(n1, n2) matched pairs, those
    # not matched label to label cost at least 0.5 each.
    common = sum((l1 & l2).values())
    return abs(n1 - n2) + 0.5 * max(0, min(n1, n2) - common)


def lower_bound(a: Summary, b: Summary) -> float:
    """A lower bound of the (unnormalized) GED from counts and label multisets."""
    if a.fp == b.fp:
        return 0.0
    return (_part_bound(a.nodes, b.nodes, a.node_labels, b.node_labels)
            + _part_bound(a.edges, b.edges, a.edge_labels, b.edge_labels))


def norm(a: Summary, b: Summary) -> float:
    return float(max(a.size, b.size, 1))


def edit_distance(
    a: Summary, b: Summary, *, timeout: float = TIMEOUT_S, upper_bound: float | None = None
) -> tuple[float | None, bool]:
    """The (unnormalized) GED of two graphs, or the best found within ``timeout``.

    Returns ``(cost, complete)``: ``complete`` is False when the time limit cut the
    search short. ``cost`` is None when no edit path of cost <= ``upper_bound`` was
    found (proved when ``complete``). Without ``upper_bound`` a cost is always returned:
    if no path was found in time, the cost of deleting ``a`` and inserting ``b``.
    """
    if a.fp == b.fp:
        return 0.0, True
    if a.nodes == 0 or b.nodes == 0:
        cost = float(a.size + b.size)
        return (cost if upper_bound is None or cost <= upper_bound else None), True
    g1, g2 = a.graph, b.graph
    if g1.is_directed() != g2.is_directed():
        g1, g2 = g1.to_undirected(), g2.to_undirected()
    _warm_up()
    start = time.perf_counter()
    best: float | None = None
    for _, _, cost in nx.optimize_edit_paths(
        g1, g2,
        node_subst_cost=node_subst_cost, edge_subst_cost=edge_subst_cost,
        upper_bound=upper_bound, strictly_decreasing=True, timeout=timeout,
    ):
        best = cost
    complete = time.perf_counter() - start < timeout
    if best is None and upper_bound is None:
        best = float(a.size + b.size)
    return best, complete


_warm = False


def _warm_up() -> None:
    """Run one tiny GED so networkx's lazy imports (scipy, backends) are not timed."""
    global _warm
    if not _warm:
        g = nx.path_graph(2)
        for _ in nx.optimize_edit_paths(g, g, timeout=1.0):
            pass
        _warm = True


@dataclass
class Candidate:
    """A group of stored runs sharing one model and one topology graph."""

    key: Hashable
    model: Summary
    topology: Summary
    weight: int = 1  # how many runs share it


class Matcher:
    """Ranks candidates by job distance to one query; caches graph distances."""

    def __init__(self, cache: dict | None = None) -> None:
        self.cache: dict[tuple[str, str], float] = {} if cache is None else cache
        self.comparisons = 0  # GEDs actually run (for benchmarks and tests)

    def graph_distance(self, q: Summary, c: Summary, *, slack: float = math.inf,
                       timeout: float = TIMEOUT_S) -> float | None:
        """Normalized distance of two graphs, or None when it exceeds ``slack`` or no
        edit path was found in time."""
        if q.fp == c.fp:
            return 0.0
        key = (q.fp, c.fp)
        if key in self.cache:
            d = self.cache[key]
            return d if d <= slack else None
        n = norm(q, c)
        if lower_bound(q, c) / n > slack:
            return None
        ub = None if math.isinf(slack) else slack * n + 1e-9
        self.comparisons += 1
        cost, complete = edit_distance(q, c, timeout=timeout, upper_bound=ub)
        if cost is None:
            return None
        d = cost / n
        if complete or ub is None:
            self.cache[key] = d
        return d if d <= slack else None

    def rank(
        self,
        model: Summary,
        topology: Summary,
        candidates: Iterable[Candidate],
        k: int = 3,
        *,
        timeout: float = TIMEOUT_S,
        budget: float | None = BUDGET_S,
    ) -> list[tuple[Candidate, float]]:
        """The candidates nearest to (``model``, ``topology``), nearest first, enough
        of them to cover ``k`` runs (ties at the k-th distance are kept)."""
        if k < 1:
            return []
        cands = list(candidates)
        lb: dict[int, float] = {}
        for i, c in enumerate(cands):
            lb[i] = (lower_bound(model, c.model) / norm(model, c.model)
                     + lower_bound(topology, c.topology) / norm(topology, c.topology))
        order = sorted(range(len(cands)), key=lambda i: (lb[i], -cands[i].weight, str(cands[i].key)))
        found: list[tuple[float, int]] = []  # kept sorted
        start = time.perf_counter()

        def kth() -> float:
            total = 0
            for d, i in found:
                total += cands[i].weight
                if total >= k:
                    return d
            return math.inf

        for i in order:
            dk = kth()
            if lb[i] > dk:
                break
            left = timeout
            if budget is not None:
                left = min(timeout, budget - (time.perf_counter() - start))
                if left <= 0:
                    break
            c = cands[i]
            t_lb = lower_bound(topology, c.topology) / norm(topology, c.topology)
            dm = self.graph_distance(model, c.model, slack=dk - t_lb, timeout=left)
            if dm is None:
                continue
            dt = self.graph_distance(topology, c.topology, slack=dk - dm, timeout=max(left, 1e-3))
            if dt is None:
                continue
            bisect.insort(found, (dm + dt, i))
        found.sort(key=lambda t: (t[0], -cands[t[1]].weight, str(cands[t[1]].key)))
        out: list[tuple[Candidate, float]] = []
        total = 0
        for d, i in found:
            if total >= k and d > out[-1][1]:
                break
            out.append((cands[i], d))
            total += cands[i].weight
        return out


def job_distance(model_a: nx.Graph | None, topo_a: nx.Graph | None,
                 model_b: nx.Graph | None, topo_b: nx.Graph | None, *,
                 timeout: float = 1.0) -> float:
    """Distance of two jobs (normalized model GED + normalized topology GED)."""
    m = Matcher()
    dm = m.graph_distance(Summary.of(model_a), Summary.of(model_b), timeout=timeout)
    dt = m.graph_distance(Summary.of(topo_a), Summary.of(topo_b), timeout=timeout)
    assert dm is not None and dt is not None  # without slack a cost is always returned
    return dm + dt
