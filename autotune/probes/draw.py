"""Draw a machine or cluster graph to an image with matplotlib (the ``plot`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx

from autotune.errors import AutotuneError
from autotune.probes.graph import (
    GPU, HOST_BRIDGE, KIND, LINKS, MACHINE, NIC, NUMA, NVLINK, NVSWITCH, PCIE_SWITCH, ROOT, child_key,
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


KIND_NAMES = {MACHINE: "machine", NUMA: "NUMA node (CPU socket)", HOST_BRIDGE: "PCIe root complex",
              PCIE_SWITCH: "PCIe switch / root port", GPU: "GPU", NIC: "NIC",
              NVSWITCH: "NVSwitch"}
NVLINK_COLOUR = "#2ca02c"


def _nvlink_width(links: int) -> float:
    """Line width of an NVLink connection of ``links`` links (NV1 thin, NV12 capped)."""
    return min(1.0 + 0.6 * (max(links, 1) - 1), 3.5)
ROOT_COLOUR = "#b8860b"


def _label(g: nx.Graph, n: Any) -> str:
    """A short plain-text label for a machine-graph node."""
    d = g.nodes[n]
    kind = d.get(KIND)
    if kind == MACHINE:
        return f"machine {g.graph.get('hostname') or ''}".strip()
    if kind == NUMA:
        return f"NUMA {d.get('numa', '?')}" + (f"\ncpus {d['cpus']}" if d.get("cpus") else "")
    if kind == HOST_BRIDGE:
        return f"root complex\n{d.get('bus', str(n).split(':', 1)[-1])}"
    if kind == PCIE_SWITCH:
        what = {True: "PCIe switch", False: "root port"}.get(d.get("switched"), "PCIe switch/port")
        return f"{what}\n{d.get('root_port') or str(n).split(':', 1)[-1]}"
    if kind == GPU:
        return f"GPU {d.get('index', '?')}"
    if kind == NIC:
        name = d.get("ibdev") or d.get("netdev") or d.get("name") or str(n).split(":", 1)[-1]
        speed = f"\n{d['speed_gbps']:g} Gbit/s" if d.get("speed_gbps") else ""
        return f"NIC {name}{speed}"
    return str(n)


def _verdict_title(g: nx.Graph, verdict: Any) -> str:
    host = g.graph.get("hostname") or ""
    rule = {0: "nothing to aggregate", 1: "rule 1: reduce to a root + broadcast",
            2: "rule 2: reduce-scatter + all-gather"}.get(verdict.rule, f"rule {verdict.rule}")
    roots = ", ".join(str(r) for r in verdict.root_candidates) or "-"
    return (f"{'machine ' + host + ': ' if host else ''}S_n={verdict.S_n}, S_g={verdict.S_g}"
            f" -> intra={verdict.intra} ({rule}{', CPU-assisted' if verdict.cpu_assisted else ''})"
            f"\nreduce root candidates (best first): GPU {roots}" if verdict.root_candidates
            else f"{'machine ' + host + ': ' if host else ''}S_n={verdict.S_n}, S_g={verdict.S_g}"
            f" -> intra={verdict.intra} ({rule})")


def _draw_machine(plt: Any, g: nx.Graph, verdict: Any) -> Any:
    """A machine graph as a tree, NVLinks as whole arcs under the GPUs, a legend, and the
    verdict in the title."""
    import textwrap

    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, PathPatch
    from matplotlib.path import Path as MPath

    g = _tree_order(g)
    pos = _tree_layout(g)
    leaves = max(1.0, max((x for x, _ in pos.values()), default=0.0) + 1)
    depth = max((-y for _, y in pos.values()), default=0.0)
    nv = [(a, b, d) for a, b, d in g.edges(data=True) if d.get(KIND) == NVLINK]
    # NVLink arcs hang under the GPUs, deeper the further apart their ends are
    arcs = []
    for a, b, d in nv:
        (xa, ya), (xb, yb) = pos[a], pos[b]
        sag = 0.35 + 0.12 * abs(xb - xa)
        arcs.append(((xa, ya), (xb, yb), sag, int(d.get(LINKS) or 1)))
    lowest = min([min(pa[1], pb[1]) - sag for pa, pb, sag, _ in arcs] + [-depth])
    width = max(7.0, 1.25 * leaves + 1.5)
    height = max(4.0, 1.1 * (depth + 1) + (-depth - lowest) * 1.1 + 2.2)
    fig, ax = plt.subplots(figsize=(width, height))
    for a, b, k in g.edges(data=KIND):
        if k != NVLINK:
            (xa, ya), (xb, yb) = pos[a], pos[b]
            ax.plot([xa, xb], [ya, yb], color="#888888", lw=1.2, zorder=1)
    for (xa, ya), (xb, yb), sag, links in arcs:
        mid = ((xa + xb) / 2, min(ya, yb) - 2 * sag)  # a quadratic Bezier dips to -sag
        path = MPath([(xa, ya), mid, (xb, yb)], [MPath.MOVETO, MPath.CURVE3, MPath.CURVE3])
        ax.add_patch(PathPatch(path, fill=False, edgecolor=NVLINK_COLOUR, lw=_nvlink_width(links),
                               alpha=0.6, zorder=2))
    roots = list(verdict.root_candidates) if verdict.rule == 1 else []
    for n, (x, y) in pos.items():
        kind = g.nodes[n].get(KIND)
        is_root = kind == GPU and g.nodes[n].get("index") in roots
        ax.text(x, y, _label(g, n), ha="center", va="center", fontsize=8, zorder=3,
                color="white" if kind in (MACHINE, NUMA, GPU, NIC) else "black",
                bbox=dict(boxstyle="round,pad=0.35", fc=COLORS.get(kind, "#999999"),
                          ec=ROOT_COLOUR if is_root else "none", lw=2.5 if is_root else 0))
    kinds = [k for k in KIND_NAMES if any(d == k for _, d in g.nodes(data=KIND))]
    handles = [Patch(facecolor=COLORS[k], label=KIND_NAMES[k]) for k in kinds]
    handles.append(Line2D([], [], color="#888888", lw=1.2, label="PCIe / socket link"))
    if nv:
        counts = sorted({lk for *_, lk in arcs})
        each = "-".join(str(c) for c in dict.fromkeys([counts[0], counts[-1]]))
        handles.append(Line2D([], [], color=NVLINK_COLOUR, lw=_nvlink_width(counts[-1]),
                              label=f"NVLink: {len(nv)} GPU pairs, {each} link(s) each "
                                    "(thicker = more)"))
    if roots:
        handles.append(Patch(facecolor="white", edgecolor=ROOT_COLOUR, lw=2.5,
                             label="reduce root candidate"))
    ax.legend(handles=handles, loc="upper left", fontsize=8, framealpha=0.9,
              bbox_to_anchor=(0.0, 1.0))
    ax.set_xlim(-0.8, leaves - 0.2)
    ax.set_ylim(lowest - 0.3, 0.6)
    ax.set_axis_off()
    reason = "\n".join(textwrap.wrap(verdict.reason, width=int(12 * width)))
    ax.set_title(_verdict_title(g, verdict) + "\n" + reason, fontsize=10, loc="left")
    return fig


def draw_graph(g: nx.Graph, path: str | Path, verdict: Any = None) -> None:
    """Save a picture of ``g``: a machine graph as a tree with its NVLinks as whole arcs,
    a legend and the S_n/S_g verdict (``verdict``, else :func:`classify` of ``g``) in the
    title; a cluster as a ring with the measured Gbit/s on each link (the slowest in red)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise DrawError("drawing needs matplotlib: pip install 'autotune[plot]'") from exc
    if not g.is_directed():
        if verdict is None:
            from autotune.probes.classify import classify

            verdict = classify(g)
        fig = _draw_machine(plt, g, verdict)
        fig.tight_layout()
        fig.savefig(str(path), dpi=110)
        plt.close(fig)
        return
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * g.number_of_nodes()), 6))
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
    ax.set_axis_off()
    ax.margins(0.15)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    plt.close(fig)
