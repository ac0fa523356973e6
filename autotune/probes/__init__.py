"""Topology probes: the machine graph, BytePS's S_n/S_g classifier, the cluster graph.

- :func:`local_facts` - this machine's graph and verdict (cheap, never raises).
- :func:`machine_graph`, :func:`read_sysfs`, :func:`parse_topo` - graphs from saved inputs.
- :func:`classify` -> :class:`Verdict` (S_n, S_g, rule, intra, root candidates).
- :func:`probe_cluster` - the bandwidth probe over ``torch.distributed`` (imports torch).
- :func:`save_graph` / :func:`load_graph` - node-link JSON.

See ``docs/probes.md``.
"""

from __future__ import annotations

from typing import Any

from autotune.probes.classify import Verdict, classify
from autotune.probes.facts import LocalFacts, cpu_only_graph, local_facts, machine_graph
from autotune.probes.graph import (
    bandwidth_class, from_json, load_graph, save_graph, to_json)
from autotune.probes.nvsmi import NvsmiParseError, TopoMatrix, parse_topo, topo_graph
from autotune.probes.sysfs import SysfsError, read_sysfs

__all__ = [
    "LocalFacts", "NvsmiParseError", "SysfsError", "TopoMatrix", "Verdict", "bandwidth_class",
    "classify", "cpu_only_graph", "from_json", "load_graph", "local_facts", "machine_graph",
    "parse_topo", "probe_cluster", "read_sysfs", "save_graph", "to_json", "topo_graph",
]


def __getattr__(name: str) -> Any:
    if name == "probe_cluster":  # imports torch: only when asked for
        from autotune.probes.cluster import probe_cluster
        return probe_cluster
    raise AttributeError(f"module 'autotune.probes' has no attribute {name!r}")
