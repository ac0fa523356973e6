"""How far apart two jobs are: graph edit distance over model and topology graphs.

The AIACC-Training paper (ICDCS 2022, §VI) starts a new job from the best setting of the most similar earlier one,
similarity being the graph edit distance (GED) of the DNN graph and of the cluster
graph. Here:

* Costs come from labels: substituting a node costs 0 when the labels are equal, 0.5
  when only the kinds are equal, 1 otherwise; deleting or inserting a node costs 1.
  Edges likewise.
* Each GED is divided by the size (nodes + edges) of the larger graph, so model and
  topology weigh the same; the job distance is their sum (0 = same job).
* Equal fingerprints short-circuit to 0. For every other pair of graphs there are two
  cheap bounds: a lower bound from node/edge counts and label multisets, and an upper
  bound, the cost of the edit path a linear sum assignment of the nodes implies
  (Riesen and Bunke's bipartite GED; about a millisecond). Candidates whose lower bound
  exceeds the k-th smallest upper bound are out at once.
* The rest are refined with the exact GED of networkx (``optimize_edit_paths``), under
  a hard time limit per comparison and searching only for paths cheaper than the upper
  bound; when time runs out the best path found so far counts. :meth:`Matcher.rank`
  also has an overall time budget, after which the bounds stand.

Everything here works on :class:`Summary` objects and knows nothing of SQLite.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Hashable, Iterable

import networkx as nx
import numpy as np

from autotune.store.fingerprint import coarsen, fingerprint, normalize

TIMEOUT_S = 0.05  # per graph comparison
# networkx builds an (edges x edges) cost matrix before its time limit applies: above
# this product the bounds alone decide
MAX_EDGE_PAIRS = 40_000
BUDGET_S = 0.25  # per ranking, all exact GED searches together


def node_subst_cost(a: dict, b: dict) -> float:
    if a.get("label") == b.get("label"):
        return 0.0
    return 0.5 if a.get("kind") == b.get("kind") else 1.0


edge_subst_cost = node_subst_cost


_ids: dict[str, int] = {}


def _intern(text: str) -> int:
    return _ids.setdefault(text, len(_ids))


@dataclass(eq=False)
class Summary:
    """A normalized graph with what the bounds need: label multisets for the lower
    bound, label-id arrays and adjacency matrices for the assignment upper bound."""

    fp: str
    graph: nx.Graph = field(repr=False)
    nodes: int
    edges: int
    node_labels: Counter = field(repr=False)
    edge_labels: Counter = field(repr=False)
    arrays: dict = field(repr=False, default_factory=dict)

    @classmethod
    def of(cls, g: nx.Graph | None, fp: str | None = None, *, normalized: bool = False) -> "Summary":
        """``normalized=True`` skips :func:`normalize` (graphs read back from the store).
        Big graphs are :func:`~autotune.store.fingerprint.coarsen`-ed first."""
        if not normalized or g is None:
            g = normalize(g)
        g = coarsen(g)
        fp = fp or fingerprint(g)
        return cls(
            fp=fp,
            graph=g,
            nodes=g.number_of_nodes(),
            edges=g.number_of_edges(),
            node_labels=Counter(d["label"] for _, d in g.nodes(data=True)),
            edge_labels=Counter(d["label"] for _, _, d in g.edges(data=True)),
        )

    @property
    def size(self) -> int:
        return self.nodes + self.edges

    def matrices(self, directed: bool) -> dict:
        """Node label/kind ids, edge label/kind id matrices (-1: no edge), degrees."""
        key = "directed" if directed else "undirected"
        if key not in self.arrays:
            g = self.graph if directed or not self.graph.is_directed() else self.graph.to_undirected()
            index = {n: i for i, n in enumerate(g.nodes)}
            n = len(index)
            nl = np.array([_intern(d["label"]) for _, d in g.nodes(data=True)], dtype=np.int64)
            nk = np.array([_intern(d["kind"]) for _, d in g.nodes(data=True)], dtype=np.int64)
            al = np.full((n, n), -1, dtype=np.int64)
            ak = np.full((n, n), -1, dtype=np.int64)
            for u, v, d in g.edges(data=True):
                i, j = index[u], index[v]
                al[i, j], ak[i, j] = _intern(d["label"]), _intern(d["kind"])
                if not g.is_directed():
                    al[j, i], ak[j, i] = al[i, j], ak[i, j]
            e = al >= 0
            if g.is_directed():
                din, dout = e.sum(axis=0).astype(float), e.sum(axis=1).astype(float)
            else:
                din, dout = e.sum(axis=1).astype(float), np.zeros(n)
            self.arrays[key] = {"nl": nl, "nk": nk, "al": al, "ak": ak, "din": din, "dout": dout,
                                "directed": g.is_directed()}
        return self.arrays[key]


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


def _subst(l1: np.ndarray, l2: np.ndarray, k1: np.ndarray, k2: np.ndarray) -> np.ndarray:
    return np.where(l1 == l2, 0.0, np.where(k1 == k2, 0.5, 1.0))


def assignment_bound(a: Summary, b: Summary) -> float:
    """The cost of one valid edit path (so an upper bound of the GED), in about a
    millisecond: nodes are matched by a linear sum assignment on label costs plus
    degree differences (Riesen and Bunke's bipartite GED), and the edges that mapping
    implies are costed exactly."""
    if a.fp == b.fp:
        return 0.0
    if a.nodes == 0 or b.nodes == 0:
        return float(a.size + b.size)
    from scipy.optimize import linear_sum_assignment

    directed = a.graph.is_directed() and b.graph.is_directed()
    x, y = a.matrices(directed), b.matrices(directed)
    n1, n2 = a.nodes, b.nodes
    sub = _subst(x["nl"][:, None], y["nl"][None, :], x["nk"][:, None], y["nk"][None, :])
    local = 0.5 * (np.abs(x["din"][:, None] - y["din"][None, :])
                   + np.abs(x["dout"][:, None] - y["dout"][None, :]))
    big = 1e9
    c = np.zeros((n1 + n2, n1 + n2))
    c[:n1, :n2] = sub + local
    c[:n1, n2:] = big
    c[n1:, :n2] = big
    c[np.arange(n1), n2 + np.arange(n1)] = 1.0 + 0.5 * (x["din"] + x["dout"])
    c[n1 + np.arange(n2), np.arange(n2)] = 1.0 + 0.5 * (y["din"] + y["dout"])
    rows, cols = linear_sum_assignment(c)
    f = np.full(n1, -1)
    hit = (rows < n1) & (cols < n2)
    f[rows[hit]] = cols[hit]
    matched = np.flatnonzero(f >= 0)
    cost = float(sub[matched, f[matched]].sum()) + (n1 - len(matched)) + (n2 - len(matched))
    # edges: those of a whose ends map onto an edge of b are substituted, the rest
    # deleted; the edges of b not hit are inserted
    bl = np.full((n1, n1), -1)
    bk = np.full((n1, n1), -1)
    bl[np.ix_(matched, matched)] = y["al"][np.ix_(f[matched], f[matched])]
    bk[np.ix_(matched, matched)] = y["ak"][np.ix_(f[matched], f[matched])]
    e1 = x["al"] >= 0
    if not x["directed"]:
        e1 = np.triu(e1)
    both = e1 & (bl >= 0)
    e_sub = _subst(x["al"][both], bl[both], x["ak"][both], bk[both]).sum()
    n_e1, n_e2, n_both = int(e1.sum()), (y["al"] >= 0).sum(), int(both.sum())
    if not y["directed"]:
        n_e2 = int(np.triu(y["al"] >= 0).sum())
    return cost + float(e_sub) + (n_e1 - n_both) + (int(n_e2) - n_both)


def edit_distance(
    a: Summary, b: Summary, *, timeout: float = TIMEOUT_S, upper_bound: float | None = None
) -> tuple[float | None, bool]:
    """The (unnormalized) GED of two graphs, or the best found within ``timeout``.

    Returns ``(cost, complete)``: ``complete`` is False when the time limit cut the
    search short. ``cost`` is None when no edit path of cost <= ``upper_bound`` was
    found (proved when ``complete``). Without ``upper_bound`` a cost is always returned:
    if no path was found in time, :func:`assignment_bound`.
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
        best = assignment_bound(a, b)
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
    """Ranks candidates by job distance to one query; caches graph distances.

    For each distinct graph a candidate uses, the query gets a lower bound and an
    assignment upper bound (cheap). Pairs whose lower bound exceeds the k-th smallest
    upper bound are out. The rest are refined with networkx's exact GED (time limit
    each, searching only for paths cheaper than the upper bound), lowest lower bound
    first, until the ranking is settled or the budget is spent. A distance is the cost
    of the best edit path found (exact where the search completed).
    """

    def __init__(self, cache: dict | None = None) -> None:
        # (query fp, candidate fp) -> [lower, upper, settled] (normalized)
        self.cache: dict[tuple[str, str], list] = {} if cache is None else cache
        self.comparisons = 0  # exact GED searches run (for benchmarks and tests)

    def bounds(self, q: Summary, c: Summary) -> list:
        key = (q.fp, c.fp)
        if key not in self.cache:
            if q.fp == c.fp:
                self.cache[key] = [0.0, 0.0, True]
            else:
                n = norm(q, c)
                lo, hi = lower_bound(q, c) / n, assignment_bound(q, c) / n
                self.cache[key] = [lo, hi, hi - lo < 1e-12]
        return self.cache[key]

    def refine(self, q: Summary, c: Summary, timeout: float) -> None:
        """Search for a cheaper edit path than the upper bound; settle the pair."""
        b = self.bounds(q, c)
        if b[2]:
            return
        if (q.edges + q.nodes) * (c.edges + c.nodes) > MAX_EDGE_PAIRS:
            b[2] = True  # too big for the exact search: the assignment bound stands
            return
        n = norm(q, c)
        self.comparisons += 1
        cost, complete = edit_distance(q, c, timeout=max(timeout, 1e-3), upper_bound=b[1] * n - 1e-9)
        if cost is not None:
            b[1] = cost / n
        if complete:
            b[0] = b[1]  # the search proved nothing cheaper exists
        b[2] = True  # settled: exact, or the best found within the time limit

    def graph_distance(self, q: Summary, c: Summary, *, timeout: float = TIMEOUT_S) -> float:
        """Normalized distance of two graphs: the best edit path found in ``timeout``."""
        self.refine(q, c, timeout)
        return self.bounds(q, c)[1]

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
        cands = list(candidates)
        if k < 1 or not cands:
            return []
        start = time.perf_counter()
        parts: list[tuple[Summary, Summary]] = []  # (query graph, stored graph)
        index: dict[tuple[str, str], int] = {}

        def part(q: Summary, c: Summary) -> int:
            key = (q.fp, c.fp)
            if key not in index:
                index[key] = len(parts)
                parts.append((q, c))
            return index[key]

        pm = np.array([part(model, c.model) for c in cands])
        pt = np.array([part(topology, c.topology) for c in cands])
        weight = np.array([c.weight for c in cands])
        state = [self.bounds(q, c) for q, c in parts]
        while True:
            lo = np.array([b[0] for b in state])
            hi = np.array([b[1] for b in state])
            settled = np.array([b[2] for b in state])
            plo, phi = lo[pm] + lo[pt], hi[pm] + hi[pt]
            order = np.argsort(phi, kind="stable")
            kth = phi[order[min(np.searchsorted(np.cumsum(weight[order]), k), len(order) - 1)]]
            open_ = (plo < kth - 1e-12) & ~(settled[pm] & settled[pt])
            if not open_.any():
                break
            if budget is not None and time.perf_counter() - start >= budget:
                break
            i = min(np.flatnonzero(open_), key=lambda j: (plo[j], phi[j]))
            j = pm[i] if not settled[pm[i]] else pt[i]
            left = timeout if budget is None else min(timeout, budget - (time.perf_counter() - start))
            self.refine(*parts[j], left)
        dist = np.array([state[pm[i]][1] + state[pt[i]][1] for i in range(len(cands))])
        order = sorted(range(len(cands)), key=lambda i: (dist[i], -cands[i].weight, str(cands[i].key)))
        out: list[tuple[Candidate, float]] = []
        total = 0
        for i in order:
            if total >= k and dist[i] > out[-1][1]:
                break
            out.append((cands[i], float(dist[i])))
            total += cands[i].weight
        return out


def job_distance(model_a: nx.Graph | None, topo_a: nx.Graph | None,
                 model_b: nx.Graph | None, topo_b: nx.Graph | None, *,
                 timeout: float = 1.0) -> float:
    """Distance of two jobs (normalized model GED + normalized topology GED)."""
    m = Matcher()
    dm = m.graph_distance(Summary.of(model_a), Summary.of(model_b), timeout=timeout)
    dt = m.graph_distance(Summary.of(topo_a), Summary.of(topo_b), timeout=timeout)
    return dm + dt
