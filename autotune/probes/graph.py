"""Graph conventions shared by the probes and the store, and node-link JSON save/load.

Every node carries ``kind`` (what it is) and ``label`` (a short class string the store's
graph-edit-distance uses as substitution cost); every edge carries ``kind`` and ``label``
too. Bandwidths are bucketed into classes so two machines with the same hardware get the
same labels.

Machine graph (undirected ``nx.Graph``, a tree of PCIe/SMP edges plus NVLink edges)::

    machine ── numa:<id> ── hb:<root bus> ── sw:<root port> ── gpu:<i> / nic:<name>
                                             (or gpu/nic straight on the root bus)
    gpu:<i> ══ gpu:<j>  (kind "nvlink", label "nvlink:<links>")

Node kinds: ``machine``, ``numa`` (a CPU socket / NUMA node, with its ``cpus``),
``host_bridge`` (a PCIe root complex), ``pcie_switch`` (an *uplink group*: everything below
one CPU root port; ``switched`` says whether a real switch chip is there), ``gpu``, ``nic``,
``nvswitch``. Edge kinds: ``smp``, ``pcie``, ``nvlink``.

Cluster graph (``nx.DiGraph``, :func:`cluster_graph`, what the bandwidth probe returns):
one node per machine (kind ``machine``, label ``machine:<n>gpu``), one edge per direction
(kind ``net``, measured ``gbps`` in Gbit/s, ``label`` ``net:<class>``, ``slowest`` true on
the slowest one).

Job graph (undirected ``nx.Graph``, :func:`job_graph`, what a session records in the store
and compares with earlier jobs): worker machines (kind ``machine``, label
``machine:<w>w``) and Summation Service servers (kind ``server``) joined through one
network node (kind ``switch``) by ``net`` edges: O(n) edges, so large jobs stay cheap to
compare. Its labels are part of every stored database's fingerprints: keep them stable.

This module is the one place the schema is spelled out: the probes build machine and
cluster graphs with it, the session and the offline tuner the job graph, the simulator
reads machine graphs through it, and the store reads ``kind``/``label``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import networkx as nx

#: Node kinds of a machine graph, from the root down.
MACHINE, NUMA, HOST_BRIDGE, PCIE_SWITCH, GPU, NIC, NVSWITCH = (
    "machine", "numa", "host_bridge", "pcie_switch", "gpu", "nic", "nvswitch")
#: Node kinds of a job graph besides ``machine``: the network, a Summation Service server.
SWITCH, SERVER = "switch", "server"
#: Edge kinds.
SMP, PCIE, NVLINK, NET = "smp", "pcie", "nvlink", "net"
#: Graph kinds (``g.graph["kind"]``).
MACHINE_GRAPH, CLUSTER_GRAPH = "machine", "cluster"
#: The root node of a machine graph.
ROOT = "machine"
#: The network node of a job graph.
NETWORK = "net"

#: Attribute names. Every node and edge: ``kind`` and ``label``. GPUs: their local
#: ``index``. PCIe edges: ``gen``, ``width`` (and ``gbps`` when known). NVLink edges:
#: ``links``. Cluster edges: ``gbps`` measured, ``slowest``.
KIND, LABEL, INDEX, GEN, WIDTH, GBPS, LINKS, SLOWEST = (
    "kind", "label", "index", "gen", "width", "gbps", "links", "slowest")

#: Bandwidth classes in Gbit/s used in labels (``net:10G``, ``nic:100G``).
BANDWIDTH_CLASSES: tuple[float, ...] = (
    0.1, 1, 2.5, 5, 10, 25, 40, 50, 100, 200, 400, 800, 1600, 3200)

#: PCIe transfer rate (GT/s) -> generation.
_PCIE_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def _fmt_gbps(value: float) -> str:
    if value < 1:
        return f"{int(round(value * 1000))}M"
    return f"{value:g}G"


def bandwidth_class(gbps: float) -> str:
    """The nearest class (in log scale) of a bandwidth in Gbit/s, e.g. 9.4 -> ``"10G"``."""
    if not gbps or gbps <= 0 or math.isnan(gbps):
        return "?"
    best = min(BANDWIDTH_CLASSES, key=lambda c: abs(math.log(gbps / c)))
    return _fmt_gbps(best)


def pcie_gen(speed_gts: float | None) -> int | None:
    """PCIe generation of a transfer rate in GT/s (8.0 -> 3), ``None`` when unknown."""
    if speed_gts is None:
        return None
    return _PCIE_GEN.get(round(float(speed_gts), 1))


def pcie_label(gen: int | None, width: int | None) -> str:
    """Edge label of a PCIe link: ``pcie:gen3x16``, ``pcie:x16``, or ``pcie`` when unknown."""
    parts = ""
    if gen:
        parts += f"gen{gen}"
    if width:
        parts += f"x{width}"
    return f"pcie:{parts}" if parts else "pcie"


def nvlink_label(links: int) -> str:
    return f"nvlink:{links}"


def nic_label(speed_gbps: float | None) -> str:
    return f"nic:{bandwidth_class(speed_gbps)}" if speed_gbps else "nic"


def net_label(gbps: float) -> str:
    """Label of a measured network link: ``net:10G``."""
    return f"net:{bandwidth_class(gbps)}"


# ----------------------------------------------------------------------------------------
# builders

def new_machine_graph(source: str, **attrs: Any) -> nx.Graph:
    """An empty machine graph with its root ``machine`` node."""
    g = nx.Graph(kind=MACHINE_GRAPH, source=source, **attrs)
    g.add_node(ROOT, kind=MACHINE, label="machine")
    return g


def cluster_graph(machines: list[str], names: list[str], gpus: list[int],
                  gbps: list[list[float]], rtt: list[list[float]], seconds: float,
                  budget: float) -> nx.DiGraph:
    """The cluster graph of a bandwidth probe: ``machines`` (distinct names in order),
    ``names``/``gpus`` per rank, ``gbps``/``rtt`` (seconds) per ordered machine pair, the
    probe's duration and time budget."""
    g = nx.DiGraph(kind=CLUSTER_GRAPH, source="probe_cluster", probe_seconds=round(seconds, 3),
                   time_budget_s=budget)
    for name in machines:
        ranks = [r for r, n in enumerate(names) if n == name]
        n = max(gpus[r] for r in ranks)
        g.add_node(name, kind=MACHINE, label=f"machine:{n}gpu", n_gpus=n, ranks=ranks,
                   leader=ranks[0])
    for i, a in enumerate(machines):
        for j, b in enumerate(machines):
            if i != j:
                g.add_edge(a, b, kind=NET, gbps=gbps[i][j], gbytes_per_s=gbps[i][j] / 8,
                           rtt_us=rtt[i][j] * 1e6, label=net_label(gbps[i][j]), slowest=False)
    if g.number_of_edges():
        a, b = min(g.edges, key=lambda e: (g.edges[e][GBPS], e))
        g.edges[a, b][SLOWEST] = True
        g.graph["slowest"] = [a, b]
        g.graph["slowest_gbps"] = g.edges[a, b][GBPS]
    return g


def job_graph(machines: int, workers_per_machine: int, servers: int) -> nx.Graph:
    """The compact graph of a job's cluster that the store compares: ``machines`` worker
    machines of ``workers_per_machine`` workers and ``servers`` servers, each joined to
    one network node (see the module docstring)."""
    g = nx.Graph()
    g.add_node(NETWORK, kind=SWITCH, label="switch")
    for i in range(machines):
        g.add_node(f"m{i}", kind=MACHINE, label=f"machine:{workers_per_machine}w")
        g.add_edge(NETWORK, f"m{i}", kind=NET, label="net")
    for s in range(servers):
        g.add_node(f"s{s}", kind=SERVER, label="server")
        g.add_edge(NETWORK, f"s{s}", kind=NET, label="net")
    return g


# ----------------------------------------------------------------------------------------
# tree helpers (the PCIe/SMP edges of a machine graph form a tree rooted at "machine")

def tree_parents(g: nx.Graph) -> dict[Any, Any]:
    """Parent of every node in the PCIe/SMP tree (NVLink edges ignored), root -> None.

    The tree is walked from the ``machine`` node(s) first; a part not connected to one
    gets its first node as its own root."""
    tree = nx.Graph()
    tree.add_nodes_from(g.nodes)
    tree.add_edges_from((u, v) for u, v, k in g.edges(data=KIND) if k != NVLINK)
    parents: dict[Any, Any] = {}
    roots = [n for n, k in g.nodes(data=KIND) if k == MACHINE] + list(g.nodes)
    for root in roots:
        if root in parents:
            continue
        parents[root] = None
        for parent, child in nx.bfs_edges(tree, root):
            parents[child] = parent
    return parents


def ancestor_of_kind(parents: dict[Any, Any], g: nx.Graph, node: Any, kind: str) -> Any:
    """The nearest ancestor of ``node`` (itself excluded) of the given kind, or None."""
    cur = parents.get(node)
    while cur is not None:
        if g.nodes[cur].get(KIND) == kind:
            return cur
        cur = parents.get(cur)
    return None


def child_key(g: nx.Graph) -> Callable[[Any], tuple]:
    """Sort key for siblings in the tree: GPUs by index, then NICs, then the rest by name."""
    return lambda n: (g.nodes[n].get(KIND) == NIC, g.nodes[n].get(INDEX, 0), str(n))


def gpu_nodes(g: nx.Graph) -> list[Any]:
    """GPU nodes sorted by their local index (then by name)."""
    return sorted((n for n, k in g.nodes(data=KIND) if k == GPU),
                  key=lambda n: (g.nodes[n].get(INDEX, 0), str(n)))


def nic_nodes(g: nx.Graph) -> list[Any]:
    """NIC nodes sorted by name."""
    return sorted((n for n, k in g.nodes(data=KIND) if k == NIC), key=str)


# ----------------------------------------------------------------------------------------
# JSON

def to_json(g: nx.Graph) -> dict[str, Any]:
    """Node-link JSON data of a graph (machine or cluster)."""
    return nx.node_link_data(g, edges="edges")


def from_json(data: dict[str, Any]) -> nx.Graph:
    """Inverse of :func:`to_json`; a directed graph comes back as ``nx.DiGraph``."""
    if not isinstance(data, dict) or "nodes" not in data or "edges" not in data:
        raise ValueError("not node-link graph data (needs 'nodes' and 'edges')")
    return nx.node_link_graph(data, edges="edges")


def save_graph(g: nx.Graph, path: str | Path) -> None:
    Path(path).write_text(json.dumps(to_json(g), indent=1, sort_keys=True) + "\n")


def load_graph(path: str | Path) -> nx.Graph:
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    return from_json(data)
