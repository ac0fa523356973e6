"""BytePS's intra-machine classifier (the BytePS paper, OSDI 2020, §4.2.3) over a machine graph.

S_n = PCIe switches (uplink groups) holding GPUs and at least one NIC; S_g = switches
holding only GPUs.

- Rule 1 (S_n > 0 and S_g > 0, asymmetric like the paper's NVLink box): reduce into a
  root and broadcast (``intra="root"``); roots are GPUs not under a NIC's switch, nearest
  to the NIC first (same host bridge, then same NUMA node, then the other sockets).
- Rule 2 (S_n = 0 or S_g = 0, symmetric like the PCIe-only box): reduce-scatter +
  all-gather (``intra="scatter"``), CPU-assisted when there is no NVLink.
- Rule 0: fewer than two GPUs, nothing to aggregate inside the machine (``intra="flat"``).

Multi-NIC machines only change the counts. Root candidates are local GPU indices, best
first; under rule 2 they list every GPU (GPUs off the NIC switches first) so a tuner that
tries ``intra=root`` anyway still gets the least harmful root first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import networkx as nx

from autotune.probes.graph import (
    HOST_BRIDGE, KIND, NUMA, NVLINK, PCIE_SWITCH, ancestor_of_kind, gpu_nodes, nic_nodes,
    tree_parents)


@dataclass(frozen=True)
class Verdict:
    """What the classifier says about one machine."""

    S_n: int
    S_g: int
    rule: int  # 0: fewer than 2 GPUs, 1: asymmetric, 2: symmetric
    intra: str  # recommended intra-machine strategy: "flat", "root" or "scatter"
    root_candidates: tuple[int, ...]  # local GPU indices, best first
    reason: str
    cpu_assisted: bool
    n_gpus: int = 0
    n_nics: int = 0
    nvlink: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["root_candidates"] = list(self.root_candidates)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Verdict":
        return cls(**{**d, "root_candidates": tuple(d["root_candidates"])})


def _gpu_list(indices: list[int]) -> str:
    return ",".join(str(i) for i in indices)


def classify(g: nx.Graph) -> Verdict:
    """Classify a machine graph (from sysfs, ``nvidia-smi topo -m`` or both)."""
    parents = tree_parents(g)
    gpus = gpu_nodes(g)
    nics = nic_nodes(g)
    index = {n: int(g.nodes[n]["index"]) for n in gpus}

    def group(n: Any) -> Any:
        return ancestor_of_kind(parents, g, n, PCIE_SWITCH) or n

    def level(a: Any, b: Any) -> int:
        """0 same switch, 1 same host bridge, 2 same NUMA node, 3 across sockets."""
        if group(a) == group(b):
            return 0
        for lvl, kind in ((1, HOST_BRIDGE), (2, NUMA)):
            x = ancestor_of_kind(parents, g, a, kind)
            if x is not None and x == ancestor_of_kind(parents, g, b, kind):
                return lvl
        return 3

    members: dict[Any, dict[str, list]] = {}
    for n in gpus:
        members.setdefault(group(n), {"gpus": [], "nics": []})["gpus"].append(n)
    for n in nics:
        members.setdefault(group(n), {"gpus": [], "nics": []})["nics"].append(n)
    s_n = sum(1 for m in members.values() if m["gpus"] and m["nics"])
    s_g = sum(1 for m in members.values() if m["gpus"] and not m["nics"])
    nvlink = any(k == NVLINK for _, _, k in g.edges(data=KIND))
    nic_groups = {group(n) for n in nics}

    def distance(n: Any) -> int:
        return min((level(n, x) for x in nics), default=0)

    off = sorted((n for n in gpus if group(n) not in nic_groups),
                 key=lambda n: (distance(n), index[n]))
    on = sorted((n for n in gpus if group(n) in nic_groups), key=lambda n: index[n])
    off_idx = [index[n] for n in off]
    on_idx = [index[n] for n in on]
    common = dict(S_n=s_n, S_g=s_g, n_gpus=len(gpus), n_nics=len(nics), nvlink=nvlink)
    counts = f"S_n={s_n}, S_g={s_g}"

    if len(gpus) < 2:
        what = "no GPU" if not gpus else "one GPU"
        return Verdict(rule=0, intra="flat", root_candidates=tuple(off_idx + on_idx),
                       cpu_assisted=False,
                       reason=f"{counts}: {what}, nothing to aggregate inside the machine; "
                              f"every worker talks across machines (flat)", **common)
    if s_n > 0 and s_g > 0:
        return Verdict(rule=1, intra="root", root_candidates=tuple(off_idx),
                       cpu_assisted=False,
                       reason=f"{counts}: asymmetric, GPUs {_gpu_list(on_idx)} share a PCIe "
                              f"switch with a NIC; reduce into GPU {off_idx[0]} (off the NIC's "
                              f"switch) and broadcast", **common)
    cpu = not nvlink
    how = ("CPU-assisted (no NVLink found)" if cpu else "over NVLink")
    why = ("every GPU switch also holds a NIC" if s_g == 0 else "no GPU shares a switch with "
           "a NIC")
    return Verdict(rule=2, intra="scatter", root_candidates=tuple(off_idx + on_idx),
                   cpu_assisted=cpu,
                   reason=f"{counts}: symmetric, {why}; reduce-scatter + all-gather {how}",
                   **common)
