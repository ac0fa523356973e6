"""Draw a machine or cluster graph to an image with matplotlib (the ``plot`` extra)."""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from autotune.errors import AutotuneError
from autotune.probes.graph import (
    GPU, HOST_BRIDGE, KIND, MACHINE, NIC, NUMA, NVLINK, NVSWITCH, PCIE_SWITCH, ROOT, child_key,
    tree_parents)

COLORS = {MACHINE: "#4c72b0", NUMA: "#8172b2", HOST_BRIDGE: "#937860",
          PCIE_SWITCH: "#ccb974", GPU: "#55a868", NIC: "#c44e52", NVSWITCH: "#64b5cd"}


class DrawError(AutotuneError, RuntimeError):
    """matplotlib is missing."""


def _tree_order(g: nx.Graph) -> nx.Graph:
    """A copy of ``g`` with nodes in depth-first tree order and a ``_layer`` (depth) each,
    so a layered layout puts every child under its parent."""
    parents = tree_parents(g)
    children: dict = {}
    for n, p in parents.items():
        children.setdefault(p, []).append(n)
    h = nx.Graph()

    def visit(n, depth: int) -> None:
        h.add_node(n, **g.nodes[n], _layer=depth)
        for c in sorted(children.get(n, []), key=child_key(g)):
            visit(c, depth + 1)

    for root in sorted(children.get(None, []), key=lambda x: (x != ROOT, str(x))):
        visit(root, 0)
    h.add_edges_from(g.edges(data=True))
    return h


def _tree_layout(g: nx.Graph) -> dict:
    """Leaves side by side in tree order, each parent above the middle of its children."""
    parents = tree_parents(g)
    children: dict = {}
    for n in g.nodes:  # g is in depth-first order: children stay in order
        children.setdefault(parents.get(n), []).append(n)
    pos: dict = {}
    next_x = [0.0]

    def place(n) -> float:
        kids = children.get(n, [])
        x = sum(place(c) for c in kids) / len(kids) if kids else next_x[0]
        if not kids:
            next_x[0] += 1.0
        pos[n] = (x, -float(g.nodes[n]["_layer"]))
        return x

    for root in children.get(None, []):
        place(root)
    return pos


def draw_graph(g: nx.Graph, path: str | Path) -> None:
    """Save a picture of ``g``: a machine graph as a tree (NVLinks dashed), a cluster as a
    ring with the measured Gbit/s on each link (the slowest in red)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise DrawError("drawing needs matplotlib: pip install 'autotune[plot]'") from exc
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * g.number_of_nodes()), 6))
    if g.is_directed():  # cluster graph
        pos = nx.circular_layout(g)
        nx.draw_networkx_nodes(g, pos, ax=ax, node_color=COLORS[MACHINE], node_size=900)
        nx.draw_networkx_labels(g, pos, ax=ax, labels={n: f"{n}\n{d['label']}" for n, d in
                                                       g.nodes(data=True)}, font_size=8)
        colors = ["red" if d.get("slowest") else "gray" for _, _, d in g.edges(data=True)]
        nx.draw_networkx_edges(g, pos, ax=ax, edge_color=colors, connectionstyle="arc3,rad=0.1",
                               arrows=True)
        nx.draw_networkx_edge_labels(
            g, pos, ax=ax, font_size=7, connectionstyle="arc3,rad=0.1",
            edge_labels={(a, b): f"{d['gbps']:.1f}G" for a, b, d in g.edges(data=True)})
    else:
        g = _tree_order(g)
        pos = _tree_layout(g)
        tree = [(a, b) for a, b, k in g.edges(data=KIND) if k != NVLINK]
        nv = [(a, b) for a, b, k in g.edges(data=KIND) if k == NVLINK]
        nx.draw_networkx_nodes(g, pos, ax=ax, node_size=700,
                               node_color=[COLORS.get(k, "#999999")
                                           for _, k in g.nodes(data=KIND)])
        nx.draw_networkx_labels(g, pos, ax=ax, font_size=7)
        nx.draw_networkx_edges(g, pos, ax=ax, edgelist=tree, edge_color="gray")
        nx.draw_networkx_edges(g, pos, ax=ax, edgelist=nv, edge_color="green", style="dashed",
                               connectionstyle="arc3,rad=0.3", arrows=True, arrowstyle="-")
    ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    plt.close(fig)
