"""The local machine's graph and verdict in one call, for the session and the CLI.

:func:`machine_graph` picks the sources: a sysfs tree (``/sys`` by default), NVLinks from
NVML when it is there, or from ``nvidia-smi topo -m`` text. :func:`local_facts` is the cheap,
never-raising version the session calls at start-up.
"""

from __future__ import annotations

import os
import socket
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from autotune.probes.classify import Verdict, classify
from autotune.probes.graph import GPU, KIND, NUMA, ROOT, SMP, gpu_nodes, new_machine_graph
from autotune.probes.nvml import merge_nvlinks, read_nvlinks
from autotune.probes.nvsmi import merge_topo, parse_topo, run_nvidia_smi, topo_graph
from autotune.probes.sysfs import read_sysfs


@dataclass
class LocalFacts:
    """This machine: its graph, the classifier's verdict, and what went wrong reading it."""

    graph: nx.Graph
    verdict: Verdict
    warnings: list[str] = field(default_factory=list)

    @property
    def root_candidates(self) -> tuple[int, ...]:
        return self.verdict.root_candidates

    @property
    def intra(self) -> str:
        return self.verdict.intra


def cpu_only_graph(reason: str = "") -> nx.Graph:
    """The fallback graph: the machine and one NUMA node with this process's CPUs."""
    g = new_machine_graph("fallback", hostname=socket.gethostname(), error=reason)
    try:
        n_cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n_cpus = os.cpu_count() or 1
    g.add_node("numa:0", kind=NUMA, label="numa", numa=0, cpus=f"0-{n_cpus - 1}",
               n_cpus=n_cpus)
    g.add_edge(ROOT, "numa:0", kind=SMP, label="smp")
    return g


def machine_graph(sysfs: str | Path | None = None, nvidia_smi: str | Path | None = None,
                  *, nvml: bool = True, run_smi: bool = False) -> nx.Graph:
    """The machine graph from the given sources.

    ``sysfs`` only: that tree. ``nvidia_smi`` only: the matrix alone. Both: the sysfs tree
    with the matrix's NVLinks. Neither: ``/sys`` plus NVLinks from NVML (``nvml``) or, when
    NVML is missing and ``run_smi``, from running ``nvidia-smi topo -m``. Raises on bad input.
    """
    topo = parse_topo(Path(nvidia_smi).read_text(errors="replace")) if nvidia_smi else None
    if sysfs is None and topo is not None:
        g = topo_graph(topo)
    else:
        g = read_sysfs(sysfs if sysfs is not None else "/sys")
        if topo is not None:
            merge_topo(g, topo)
        elif sysfs is None and gpu_nodes(g):
            links = read_nvlinks() if nvml else None
            if links is not None:
                merge_nvlinks(g, links)
            elif run_smi:
                text = run_nvidia_smi()
                if text is not None:
                    merge_topo(g, parse_topo(text))
    local = sysfs is None and nvidia_smi is None
    g.graph.setdefault("hostname", socket.gethostname() if local else "")
    return g


def _visible_gpus(g: nx.Graph) -> nx.Graph:
    """Keep only ``CUDA_VISIBLE_DEVICES`` GPUs, renumbered in that order (the cuda ordinals)."""
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return g
    try:
        wanted = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        warnings.warn(f"CUDA_VISIBLE_DEVICES={spec!r} is not a list of indices; "
                      "GPU indices in the topology are physical ones", stacklevel=3)
        return g
    by_index = {g.nodes[n]["index"]: n for n in gpu_nodes(g)}
    keep = [by_index[i] for i in wanted if i in by_index]
    g = g.copy()
    g.remove_nodes_from(n for n in by_index.values() if n not in keep)
    mapping = {}
    for new, node in enumerate(keep):
        g.nodes[node]["physical_index"] = g.nodes[node]["index"]
        g.nodes[node]["index"] = new
        mapping[node] = f"gpu:{new}"
    return nx.relabel_nodes(g, mapping)


def local_facts(sysfs: str | Path = "/sys", *, nvml: bool = True) -> LocalFacts:
    """Graph and verdict of this machine; never raises (falls back to a CPU-only graph).

    Cheap (a few milliseconds of sysfs reads, plus NVML start-up where present). GPU
    indices are ``CUDA_VISIBLE_DEVICES`` ordinals when that variable is set.
    """
    notes: list[str] = []
    try:
        g = read_sysfs(sysfs)
    except Exception as exc:  # noqa: BLE001 - odd sysfs must not stop training
        notes.append(f"cannot read {sysfs}: {exc}")
        g = cpu_only_graph(str(exc))
    g.graph["hostname"] = socket.gethostname()
    if nvml and any(k == GPU for _, k in g.nodes(data=KIND)):
        try:
            links = read_nvlinks()
            if links is not None:
                merge_nvlinks(g, links)
        except Exception as exc:  # noqa: BLE001
            notes.append(f"NVML: {exc}")
    try:
        g = _visible_gpus(g)
        verdict = classify(g)
    except Exception as exc:  # noqa: BLE001
        notes.append(f"classifier: {exc}")
        g = cpu_only_graph(str(exc))
        verdict = classify(g)
    for note in notes:
        warnings.warn(f"autotune probes: {note}; using a CPU-only machine graph"
                      if "cannot read" in note else f"autotune probes: {note}", stacklevel=2)
    return LocalFacts(graph=g, verdict=verdict, warnings=notes)
