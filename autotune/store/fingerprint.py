"""Model and topology graphs, coarsened and fingerprinted for the results store.

Two jobs are alike when their models produce alike gradients and their clusters are
alike (the AIACC-Training paper, ICDCS 2022, §VI). Both are described as small labelled networkx graphs:

* **Model graph** (:func:`model_graph`): one node per layer that owns gradients, in the
  order the forward pass uses them, edges where data flows from one to the next
  (``torch.fx`` when the model traces; otherwise the module tree in registration order
  as a chain). A node's ``kind`` is the layer type (``Linear``) and its ``label`` adds
  the log2 bucket of its gradient elements (``Linear:20`` holds 2^19..2^20-1
  elements). The graph is then *coarsened* so edit distance stays fast: a run of a
  repeated block of layers (a transformer layer, a ResNet bottleneck) becomes one node
  whose kind names the block and whose label adds the log2 bucket of the repeat count,
  and if more than ``max_nodes`` nodes remain, consecutive nodes are merged into
  segments.
* **Topology graph**: a graph of the schema in :mod:`autotune.probes.graph`: the job
  graph a session records (:func:`~autotune.probes.graph.job_graph`: worker machines
  labelled ``machine:<w>w`` and servers around one network node) or a probed cluster
  graph (:func:`~autotune.probes.graph.cluster_graph`: machines labelled
  ``machine:<n>gpu``, links labelled with a bandwidth class such as ``net:10G``). Any
  graph with ``kind``/``label`` string attributes works.

:func:`normalize` gives every node and edge a string ``kind`` and ``label`` (a missing
label defaults to the kind) and renumbers nodes 0..n-1 (the original name is kept in
``name``). :func:`coarsen` shrinks graphs of more than ``max_nodes`` nodes (big clusters)
by merging same-labelled nodes. :func:`fingerprint` is the sha256 of a canonical form of
the coarsened graph that does not depend on node names: the labelled Weisfeiler-Lehman hash plus the sorted node and edge label
multisets. Equal fingerprints short-circuit the edit distance to 0. (Graphs that
4-round WL cannot tell apart share a fingerprint; for layer chains and cluster graphs
that is as good as isomorphic.)

torch is imported only inside :func:`model_graph`.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import networkx as nx

from autotune.probes.graph import KIND, LABEL

if TYPE_CHECKING:  # pragma: no cover
    import torch

MAX_NODES = 48
MAX_BLOCK = 64  # longest repeated block (in layers) that is looked for
WL_ITERATIONS = 4


def bucket(n: int) -> int:
    """log2 bucket of a count: 1 -> 1, 2..3 -> 2, 4..7 -> 3, ..., 0 -> 0."""
    return max(int(n), 0).bit_length()


# ---------------------------------------------------------------- layer lists
@dataclass
class Layer:
    """One node of a model graph before it becomes a networkx node."""

    kind: str
    elements: int
    label: str = ""
    count: int = 1
    members: tuple[str, ...] = ()
    sources: list[int] = field(default_factory=list)  # indices of the fine layers it holds

    def __post_init__(self) -> None:
        if not self.label:
            self.label = f"{self.kind}:{bucket(self.elements)}"


def _trace_layers(model: "torch.nn.Module") -> tuple[list[tuple[str, int]], set[tuple[int, int]]]:
    """Layers that own gradients and the data-flow edges between them, via torch.fx."""
    import torch.fx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm = torch.fx.symbolic_trace(model)
    modules = dict(gm.named_modules())
    seen: set[int] = set()
    layers: list[tuple[str, int]] = []
    edges: set[tuple[int, int]] = set()
    frontier: dict[Any, frozenset[int]] = {}  # fx node -> nearest gradient layers upstream
    for node in gm.graph.nodes:
        params: list[torch.nn.Parameter] = []
        kind = ""
        if node.op == "call_module":
            mod = modules[node.target]
            params = list(mod.parameters())
            kind = type(mod).__name__
        elif node.op == "get_attr":
            try:
                params = [gm.get_parameter(node.target)]
            except (AttributeError, TypeError):
                params = []
            kind = "Parameter"
        fresh = [p for p in params if p.requires_grad and id(p) not in seen]
        seen.update(id(p) for p in fresh)
        upstream = frozenset().union(*(frontier.get(i, frozenset()) for i in node.all_input_nodes))
        elements = sum(p.numel() for p in fresh)
        if elements > 0:
            idx = len(layers)
            layers.append((kind, elements))
            edges.update((u, idx) for u in upstream)
            frontier[node] = frozenset((idx,))
        else:
            frontier[node] = upstream
    return layers, edges


def _module_tree_layers(model: "torch.nn.Module") -> tuple[list[tuple[str, int]], set[tuple[int, int]]]:
    """Fallback: modules owning parameters, in registration order, as a chain."""
    seen: set[int] = set()
    layers: list[tuple[str, int]] = []
    for _, mod in model.named_modules():
        fresh = [p for p in mod.parameters(recurse=False) if p.requires_grad and id(p) not in seen]
        seen.update(id(p) for p in fresh)
        elements = sum(p.numel() for p in fresh)
        if elements > 0:
            layers.append((type(mod).__name__, elements))
    return layers, {(i, i + 1) for i in range(len(layers) - 1)}


def model_graph(model: "torch.nn.Module", *, max_nodes: int = MAX_NODES, trace: bool = True) -> nx.DiGraph:
    """The coarsened model graph of ``model`` (see the module docstring).

    ``trace=False`` skips torch.fx and uses the module tree. The graph records how it was
    built in ``graph["source"]`` (``"fx"`` or ``"modules"``).
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model_graph needs a torch.nn.Module, got {type(model).__name__}")
    source = "modules"
    layers: list[tuple[str, int]] = []
    edges: set[tuple[int, int]] = set()
    if trace:
        try:
            layers, edges = _trace_layers(model)
            source = "fx"
        except Exception:  # noqa: BLE001 - any tracing failure means: use the module tree
            layers = []
    if source == "modules" or not layers:
        layers, edges = _module_tree_layers(model)
        source = "modules"
    g = layers_graph(layers, edges, max_nodes=max_nodes)
    g.graph["source"] = source
    return g


def layers_graph(
    layers: Sequence[tuple[str, int]],
    edges: Iterable[tuple[int, int]] | None = None,
    *,
    max_nodes: int = MAX_NODES,
) -> nx.DiGraph:
    """A coarsened model graph from ``(kind, gradient elements)`` per layer, in forward
    order, and data-flow edges between layer indices (default: a chain).

    Useful where only gradient shapes are known (offline tuning of a named model).
    """
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    fine = [Layer(str(k), int(n), sources=[i]) for i, (k, n) in enumerate(layers)]
    if edges is None:
        edges = {(i, i + 1) for i in range(len(fine) - 1)}
    coarse = _collapse_repeats(fine)
    if len(coarse) > max_nodes:
        coarse = _merge_segments(coarse, max_nodes)
    owner: dict[int, int] = {}
    g = nx.DiGraph(kind="model")
    for j, layer in enumerate(coarse):
        g.add_node(j, kind=layer.kind, label=layer.label, elements=layer.elements,
                   count=layer.count, members=list(layer.members))
        for s in layer.sources:
            owner[s] = j
    for u, v in edges:
        a, b = owner.get(u), owner.get(v)
        if a is not None and b is not None and a != b:
            g.add_edge(a, b, kind="data", label="data")
    return g


def _collapse_repeats(seq: list[Layer]) -> list[Layer]:
    """Replace each run of a repeated block of consecutive layers by one node; repeat
    until nothing changes (so repeats of repeats collapse too)."""
    while True:
        labels = [x.label for x in seq]
        out: list[Layer] = []
        i, n = 0, len(seq)
        changed = False
        while i < n:
            best_b, best_r = 1, 1
            for b in range(1, min(MAX_BLOCK, (n - i) // 2) + 1):
                block = labels[i : i + b]
                r = 1
                while labels[i + r * b : i + (r + 1) * b] == block:
                    r += 1
                if r >= 2 and b * r > best_b * best_r:
                    best_b, best_r = b, r
            if best_r >= 2:
                out.append(_block(seq[i : i + best_b * best_r], best_b, best_r))
                i += best_b * best_r
                changed = True
            else:
                out.append(seq[i])
                i += 1
        seq = out
        if not changed:
            return seq


def _block(run: list[Layer], b: int, r: int) -> Layer:
    members = tuple(x.label for x in run[:b])
    if b == 1:
        kind = run[0].kind
        label = f"{run[0].label}x{bucket(r)}"
    else:
        kind = "block:" + hashlib.sha1("|".join(members).encode()).hexdigest()[:8]
        label = f"{kind}x{bucket(r)}"
    return Layer(
        kind=kind,
        elements=sum(x.elements for x in run),
        label=label,
        count=r * (run[0].count if b == 1 else 1),
        members=members,
        sources=[s for x in run for s in x.sources],
    )


def _merge_segments(seq: list[Layer], max_nodes: int) -> list[Layer]:
    """Merge consecutive nodes into ``max_nodes`` segments of near-equal length; a
    segment is named after the kind holding most of its elements."""
    n = len(seq)
    out: list[Layer] = []
    for s in range(max_nodes):
        part = seq[s * n // max_nodes : (s + 1) * n // max_nodes]
        if len(part) == 1:
            out.append(part[0])
            continue
        weight: Counter[str] = Counter()
        for x in part:
            weight[x.kind] += x.elements
        kind = max(sorted(weight), key=lambda k: weight[k])
        elements = sum(x.elements for x in part)
        out.append(Layer(kind=kind, elements=elements, label=f"{kind}+:{bucket(elements)}",
                         count=sum(x.count for x in part),
                         members=tuple(x.label for x in part),
                         sources=[s_ for x in part for s_ in x.sources]))
    return out


# ------------------------------------------------------- coarsening big graphs
def coarsen(g: nx.Graph, max_nodes: int = MAX_NODES) -> nx.Graph:
    """A normalized graph with more than ``max_nodes`` nodes, made small for edit
    distance: nodes with the same label become one node (label ``<label>x<log2 bucket
    of how many>``, ``count`` attribute), edges between groups become one edge (a
    self-loop inside a group) labelled with the labels they carried. If that still
    leaves too many nodes, nodes are grouped by kind instead. Smaller graphs are
    returned as they are. (A cluster of 128 identical machines becomes one node.)"""
    if g.number_of_nodes() <= max_nodes:
        return g
    for attr in ("label", "kind"):
        groups: dict[tuple[str, str], list] = {}
        for n, d in g.nodes(data=True):
            groups.setdefault((d["kind"], d[attr]), []).append(n)
        if len(groups) <= max_nodes:
            break
    q = nx.DiGraph() if g.is_directed() else nx.Graph()
    q.graph.update(g.graph)
    q.graph["coarsened_from"] = g.number_of_nodes()
    owner = {}
    for j, ((kind, name), members) in enumerate(sorted(groups.items())):
        q.add_node(j, kind=kind, label=f"{name}x{bucket(len(members))}", count=len(members),
                   name=name)
        owner.update((m, j) for m in members)
    labels: dict[tuple[int, int], set[str]] = {}
    kinds: dict[tuple[int, int], set[str]] = {}
    for u, v, d in g.edges(data=True):
        a, b = owner[u], owner[v]
        if not g.is_directed() and a > b:
            a, b = b, a
        labels.setdefault((a, b), set()).add(d["label"])
        kinds.setdefault((a, b), set()).add(d["kind"])
    for (a, b), ls in labels.items():
        q.add_edge(a, b, kind="|".join(sorted(kinds[(a, b)])), label="|".join(sorted(ls)))
    return q


# -------------------------------------------------------- normal form, hashing
def normalize(g: nx.Graph | None) -> nx.Graph:
    """A copy with nodes renumbered 0..n-1 (in the graph's node order; the old name in
    ``name``) and a string ``kind`` and ``label`` on every node and edge. ``None`` is the
    empty graph."""
    if g is None:
        return nx.Graph()
    if not isinstance(g, nx.Graph) or g.is_multigraph():
        raise TypeError(f"expected a networkx Graph or DiGraph, got {type(g).__name__}")
    out = nx.DiGraph() if g.is_directed() else nx.Graph()
    out.graph.update({k: v for k, v in g.graph.items() if isinstance(v, (str, int, float, bool))})
    index = {}
    for i, (node, data) in enumerate(g.nodes(data=True)):
        index[node] = i
        attrs = dict(data)
        kind = str(attrs.get(KIND, ""))
        attrs.update({KIND: kind, LABEL: str(attrs.get(LABEL, kind)),
                      "name": str(attrs.get("name", node))})
        out.add_node(i, **attrs)
    for u, v, data in g.edges(data=True):
        attrs = dict(data)
        kind = str(attrs.get(KIND, ""))
        attrs.update({KIND: kind, LABEL: str(attrs.get(LABEL, kind))})
        out.add_edge(index[u], index[v], **attrs)
    return out


def _canonical(g: nx.Graph) -> dict:
    h = nx.Graph() if not g.is_directed() else nx.DiGraph()
    for n, d in g.nodes(data=True):
        h.add_node(n, key=f"{d.get('kind', '')}|{d.get('label', '')}")
    for u, v, d in g.edges(data=True):
        h.add_edge(u, v, key=f"{d.get('kind', '')}|{d.get('label', '')}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "hashes for directed graphs changed in 3.5"
        wl = nx.weisfeiler_lehman_graph_hash(h, node_attr="key", edge_attr="key",
                                             iterations=WL_ITERATIONS, digest_size=16)
    return {
        "directed": g.is_directed(),
        "wl": wl,
        "nodes": sorted(d["key"] for _, d in h.nodes(data=True)),
        "edges": sorted(
            (h.nodes[u]["key"], d["key"], h.nodes[v]["key"]) if g.is_directed()
            else tuple(sorted((h.nodes[u]["key"], h.nodes[v]["key"]))) + (d["key"],)
            for u, v, d in h.edges(data=True)
        ),
    }


def fingerprint(g: nx.Graph | None) -> str:
    """sha256 (hex) of the node-name-free canonical form of the :func:`coarsen`-ed
    graph (so clusters of 128 and 130 identical machines share a fingerprint)."""
    g = coarsen(normalize(g))
    text = json.dumps(_canonical(g), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def to_json(g: nx.Graph) -> str:
    """The graph as node-link JSON text (what the store keeps)."""
    return json.dumps(nx.node_link_data(normalize(g), edges="edges"), sort_keys=True,
                      separators=(",", ":"), default=str)


def from_json(text: str) -> nx.Graph:
    """Inverse of :func:`to_json` (for its own output: builds the graph in bulk, which is
    several times faster than ``nx.node_link_graph``)."""
    data = json.loads(text)
    g = nx.DiGraph() if data.get("directed") else nx.Graph()
    g.graph.update(data.get("graph", {}))
    g.add_nodes_from((d["id"], {k: v for k, v in d.items() if k != "id"}) for d in data["nodes"])
    g.add_edges_from((d["source"], d["target"], {k: v for k, v in d.items()
                                                 if k not in ("source", "target")})
                     for d in data["edges"])
    return g
