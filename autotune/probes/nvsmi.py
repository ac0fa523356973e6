"""Parser for ``nvidia-smi topo -m`` output, and the machine graph it implies.

The matrix relates every pair of GPUs and NICs: ``NV#`` (a bonded set of # NVLinks),
``PIX``/``PXB`` (through PCIe bridges only: same switch), ``PHB`` (through a PCIe host
bridge: same root complex), ``NODE`` (between host bridges of one NUMA node), ``SYS``
(across the SMP interconnect). Old drivers print ``SOC`` for ``SYS``. NICs are named
``NIC<n>`` with a ``NIC Legend`` (newer drivers) or by their device name (``mlx5_0``).
GPU rows end with CPU and NUMA affinity columns.

From that the graph is rebuilt with the same shape as the sysfs one: devices joined by
PIX/PXB form one uplink group (``pcie_switch`` node), groups joined by PHB share a host
bridge, host bridges joined by PHB/NODE or by the GPUs' affinity share a NUMA node.
Where NVLink hides the PCIe relation of two GPUs and no NIC links them, each is taken
as its own group: S_g may then exceed the number of physical switches, but whether it is
zero, S_n and the root candidates do not change.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field

import networkx as nx

from autotune.errors import AutotuneError
from autotune.probes.graph import (
    GPU, HOST_BRIDGE, NIC, NUMA, NVLINK, PCIE, PCIE_SWITCH, ROOT, SMP, gpu_nodes,
    new_machine_graph, nvlink_label)

ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RELATION_RE = re.compile(r"^(X|SYS|NODE|PHB|PXB|PIX|NV\d+)$")
LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
GPU_RE = re.compile(r"^GPU(\d+)$")
_AFFINITY = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


class NvsmiParseError(AutotuneError, ValueError):
    """Malformed or truncated ``nvidia-smi topo -m`` text; names the offending line."""

    def __init__(self, lineno: int, line: str, message: str) -> None:
        self.lineno = lineno
        super().__init__(f"nvidia-smi topo line {lineno}: {message}: {line.rstrip()!r}")


@dataclass
class TopoMatrix:
    """The parsed matrix. ``rel[a][b]`` is the relation token of devices ``a`` and ``b``."""

    devices: list[str]
    rel: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, int | None] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if GPU_RE.match(d)]

    @property
    def nics(self) -> list[str]:
        return [d for d in self.devices if not GPU_RE.match(d)]

    def nvlinks(self) -> dict[tuple[int, int], int]:
        """``{(i, j): links}`` for GPU pairs i < j joined by NVLink."""
        out = {}
        gpus = self.gpus
        for a in gpus:
            for b in gpus:
                ia, ib = int(a[3:]), int(b[3:])
                r = self.rel[a][b]
                if ia < ib and r.startswith("NV"):
                    out[(ia, ib)] = int(r[2:])
        return out


def _fields(line: str) -> list[str]:
    if "\t" in line:
        return [f.strip() for f in line.split("\t")]
    return line.split()


def _header(line: str) -> tuple[list[str], list[str]] | None:
    text = ANSI_RE.sub("", line)
    if "\t" not in text:
        for name in _AFFINITY:
            text = text.replace(name, name.replace(" ", "_"))
    tokens = [t.replace("_", " ") if t.replace("_", " ") in _AFFINITY else t
              for t in _fields(text) if t]
    if not tokens or tokens[0] != "GPU0":
        return None
    devices: list[str] = []
    for t in tokens:
        if "Affinity" in t or t in _AFFINITY:
            break
        devices.append(t)
    return devices, tokens[len(devices):]


def parse_topo(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` output (``#`` comment lines and leading text skipped)."""
    lines = text.splitlines()
    i = 0
    header = None
    first = 0  # the first line that could have been the header
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        first = first or i
        header = _header(line)
        if header is not None:
            break
    if header is None:
        first = first or 1
        raise NvsmiParseError(first, lines[first - 1] if lines else "",
                              f"no header row starting with GPU0 found in {len(lines)} lines")
    devices, aff_cols = header
    header_lineno = i
    if len(set(devices)) != len(devices):
        raise NvsmiParseError(header_lineno, lines[i - 1], "duplicate column names")
    n = len(devices)
    rel: dict[str, dict[str, str]] = {d: {} for d in devices}
    row_line: dict[str, int] = {}
    matrix = TopoMatrix(devices=devices, rel=rel)
    for k, dev in enumerate(devices):
        if i >= len(lines) or not lines[i].strip() or lines[i].strip().startswith("Legend"):
            at = min(i, len(lines)) or 1
            missing = ", ".join(devices[k:])
            raise NvsmiParseError(at, lines[at - 1] if lines else "",
                                  f"truncated matrix: rows for {missing} are missing")
        line = lines[i]
        i += 1
        fields = _fields(ANSI_RE.sub("", line))
        if fields and fields[0] == "":
            fields = fields[1:]
        if not fields or fields[0] != dev:
            raise NvsmiParseError(i, line, f"expected the row for {dev}")
        cells = fields[1:n + 1]
        if len(cells) < n or any(c == "" for c in cells):
            raise NvsmiParseError(i, line, f"row {dev} has {len([c for c in cells if c])} "
                                           f"of {n} entries")
        for other, cell in zip(devices, cells):
            token = cell.upper()
            token = "SYS" if token == "SOC" else token
            if not RELATION_RE.match(token):
                raise NvsmiParseError(i, line, f"unknown relation {cell!r} ({dev} to {other})")
            if (token == "X") != (other == dev):
                raise NvsmiParseError(i, line, f"'X' must be on the diagonal only "
                                               f"({dev} to {other} is {cell!r})")
            rel[dev][other] = token
        row_line[dev] = i
        extras = [f for f in fields[n + 1:] if f]
        for col, value in zip(aff_cols, extras):
            if col == "CPU Affinity":
                matrix.cpu_affinity[dev] = value
            elif col == "NUMA Affinity":
                matrix.numa_affinity[dev] = int(value) if value.isdigit() else None
    for a in devices:
        for b in devices:
            if rel[a][b] != rel[b][a]:
                later = a if row_line[a] > row_line[b] else b
                raise NvsmiParseError(row_line[later], lines[row_line[later] - 1],
                                      f"matrix not symmetric: {a} to {b} is {rel[a][b]} "
                                      f"but {b} to {a} is {rel[b][a]}")
    gpus = matrix.gpus
    expected = [f"GPU{j}" for j in range(len(gpus))]
    if gpus != expected:
        raise NvsmiParseError(header_lineno, lines[header_lineno - 1],
                              f"GPU columns must be GPU0..GPU{len(gpus) - 1}")
    for line in lines[i:]:
        m = LEGEND_RE.match(line)
        if m and m.group(1) in rel:
            matrix.nic_names[m.group(1)] = m.group(2)
    return matrix


def run_nvidia_smi(timeout: float = 15.0) -> str | None:
    """The output of ``nvidia-smi topo -m`` here, or None where there is no nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        res = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True,
                             timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout if res.returncode == 0 and res.stdout.strip() else None


def _components(nodes: list, pairs: list[tuple]) -> list[list]:
    h = nx.Graph()
    h.add_nodes_from(nodes)
    h.add_edges_from(pairs)
    order = {n: k for k, n in enumerate(nodes)}
    comps = [sorted(c, key=order.__getitem__) for c in nx.connected_components(h)]
    return sorted(comps, key=lambda c: order[c[0]])


def topo_graph(m: TopoMatrix) -> nx.Graph:
    """The machine graph implied by a parsed matrix (see the module docstring)."""
    devs = m.devices
    rel = m.rel
    pairs = [(a, b) for a in devs for b in devs if a < b]
    groups = _components(devs, [(a, b) for a, b in pairs if rel[a][b] in ("PIX", "PXB")])
    group_of = {d: k for k, grp in enumerate(groups) for d in grp}
    gids = list(range(len(groups)))
    hbs = _components(gids, [(group_of[a], group_of[b]) for a, b in pairs
                             if rel[a][b] == "PHB"])
    hb_of = {gid: k for k, hb in enumerate(hbs) for gid in hb}

    def hb_dev(d: str) -> int:
        return hb_of[group_of[d]]

    numa_pairs = [(hb_dev(a), hb_dev(b)) for a, b in pairs if rel[a][b] in ("PHB", "NODE")]
    gpus = m.gpus
    for a in gpus:
        for b in gpus:
            na, nb = m.numa_affinity.get(a), m.numa_affinity.get(b)
            ca, cb = m.cpu_affinity.get(a), m.cpu_affinity.get(b)
            if a < b and ((na is not None and na == nb)
                          or (ca and ca not in ("N/A",) and ca == cb)):
                numa_pairs.append((hb_dev(a), hb_dev(b)))
    numas = _components(list(range(len(hbs))), numa_pairs)
    # NUMA ids: the GPUs' NUMA affinity where printed, else the next unused id
    numa_ids: list[int | None] = []
    for comp in numas:
        ids = [m.numa_affinity.get(d) for d in gpus if hb_dev(d) in comp]
        ids = [x for x in ids if x is not None]
        numa_ids.append(min(ids) if ids else None)
    used = {x for x in numa_ids if x is not None}
    nxt = 0
    for k, x in enumerate(numa_ids):
        if x is None or numa_ids.index(x) != k:
            while nxt in used:
                nxt += 1
            numa_ids[k] = nxt
            used.add(nxt)
    g = new_machine_graph("nvidia-smi")
    numa_of_hb = {}
    for comp, nid in zip(numas, numa_ids):
        cpus = next((m.cpu_affinity[d] for d in gpus if hb_dev(d) in comp
                     and d in m.cpu_affinity), "")
        g.add_node(f"numa:{nid}", kind=NUMA, label="numa", numa=nid, cpus=cpus)
        g.add_edge(ROOT, f"numa:{nid}", kind=SMP, label="smp")
        for hb in comp:
            numa_of_hb[hb] = nid
    for k in range(len(hbs)):
        g.add_node(f"hb:{k}", kind=HOST_BRIDGE, label="host_bridge", numa=numa_of_hb[k])
        g.add_edge(f"numa:{numa_of_hb[k]}", f"hb:{k}", kind=PCIE, label="pcie:root")
    for k, grp in enumerate(groups):
        g.add_node(f"sw:{k}", kind=PCIE_SWITCH, label="pcie_switch",
                   switched=True if len(grp) > 1 else None)
        g.add_edge(f"hb:{hb_of[k]}", f"sw:{k}", kind=PCIE, label="pcie")
        for d in grp:
            nid = numa_of_hb[hb_of[k]]
            if GPU_RE.match(d):
                node = f"gpu:{int(d[3:])}"
                g.add_node(node, kind=GPU, label="gpu", index=int(d[3:]), numa=nid,
                           cpus=m.cpu_affinity.get(d, ""))
            else:
                name = m.nic_names.get(d, d)
                node = f"nic:{name}"
                g.add_node(node, kind=NIC, label="nic", name=name, numa=nid)
            g.add_edge(f"sw:{k}", node, kind=PCIE, label="pcie")
    add_nvlinks(g, m.nvlinks())
    return g


def add_nvlinks(g: nx.Graph, links: dict[tuple[int, int], int]) -> None:
    """Add NVLink edges ``{(i, j): n_links}`` between the GPUs of ``g`` by local index."""
    by_index = {g.nodes[n]["index"]: n for n in gpu_nodes(g)}
    for (a, b), n in sorted(links.items()):
        if a not in by_index or b not in by_index:
            raise ValueError(f"NVLink between GPU{a} and GPU{b}, but the graph has "
                             f"{len(by_index)} GPUs")
        g.add_edge(by_index[a], by_index[b], kind=NVLINK, label=nvlink_label(n), links=n)


def merge_topo(g: nx.Graph, m: TopoMatrix) -> nx.Graph:
    """Add the matrix's NVLinks to a sysfs graph (GPUs matched by local index)."""
    n_graph, n_topo = len(gpu_nodes(g)), len(m.gpus)
    if n_graph != n_topo:
        raise ValueError(f"nvidia-smi lists {n_topo} GPUs but the sysfs graph has {n_graph}")
    add_nvlinks(g, m.nvlinks())
    g.graph["source"] = f"{g.graph.get('source', 'sysfs')}+nvidia-smi"
    return g
