"""A described cluster for the simulator: machines, NICs, servers and each machine's insides.

:class:`ClusterSpec` is a plain, validated dataclass, loadable from JSON
(:meth:`ClusterSpec.from_json`). Bandwidths are in Gbit/s per direction (links are full
duplex), times in microseconds. A machine's insides come either from a few numbers
(``pcie_gbps``, ``gpus_per_switch``, ``nic_switch``, ``nvlink_gbps``) or from a probe
graph (``topology``: node-link JSON of one machine as written by ``autotune.probes``, in
the schema of :mod:`autotune.probes.graph`: nodes of kind ``gpu``/``nic``/``pcie_switch``/
``nvswitch``, edges of kind ``pcie`` and ``nvlink``). :class:`MachineModel` turns either
into *resources* (a GPU's PCIe link, a switch's uplink to the CPU, an NVLink, host memory)
and the paths between GPUs and the host, which is what the intra-machine strategies are
charged against.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from autotune.errors import AutotuneError, did_you_mean

GBIT = 1e9 / 8
"""Bytes per second in one Gbit/s."""

#: Per-lane payload rate (Gbit/s) of each PCIe generation after line encoding.
PCIE_LANE_GBPS = {1: 2.0, 2: 4.0, 3: 7.877, 4: 15.754, 5: 31.508, 6: 60.5}
#: Share of the PCIe line rate a DMA copy reaches (BytePS measures 105 of 126 Gbit/s, x16 gen3).
PCIE_EFFICIENCY = 0.85
#: One NVLink (per direction) when a probe graph has NVLinks but the cluster names no rate.
DEFAULT_NVLINK_GBPS = 200.0


class ClusterError(AutotuneError, ValueError):
    """A cluster description with a missing, unknown or out-of-range field."""


Resource = tuple
"""A resource id: ("gpu", g) PCIe link of GPU g, ("up", s) uplink of switch s,
("nv", g, h) an NVLink pair, ("nvport", g) a GPU's NVSwitch port, ("mem",) host memory."""

HOST = "host"


@dataclass(frozen=True)
class ClusterSpec:
    """n worker machines with w workers each, k server machines, and their links.

    Network: every machine has one NIC of ``nic_gbps`` (server machines
    ``server_nic_gbps``, default the same); one TCP flow reaches at most
    ``per_flow_gbps`` (``None``: no cap); every message pays ``latency_us``. Summation
    Services sum at ``cpu_sum_gbps`` (input bytes; ``None``: free).

    Inside a worker machine (``worker_device="gpu"``): each GPU has a PCIe link of
    ``pcie_gbps`` to its switch; GPUs are grouped ``gpus_per_switch`` per switch
    (``None``: every GPU on its own root port), each switch has an uplink of
    ``pcie_gbps`` to the CPU, and the NIC sits under switch ``nic_switch`` (``None``: on
    its own root port). ``nvlink_gbps`` gives every GPU pair one NVLink of that rate
    (``None``: no NVLink). ``topology`` (a probe graph) replaces all of these. With
    ``worker_device="cpu"`` workers are processes and local copies go through host
    memory at ``intra_gbps``.

    Runtime behaviour: ``stream_overhead`` is the share of NIC efficiency each stream
    beyond the first costs; ``chunk_overhead_us`` the serial software cost of one chunk;
    ``pipeline_depth`` how many chunks one stream keeps in flight under ``pushpull``;
    ``iteration_overhead_us`` the cost of one iteration that overlaps nothing (the
    runtime's per-iteration synchronisation and bookkeeping); ``codec_call_us`` what a
    codec costs a chunk beyond its bytes (the calls that encode and decode it, with
    error feedback).
    ``codecs`` overrides the codec cost table: ``{name: {"ratio", "encode_gbps",
    "decode_gbps"}}``.
    """

    machines: int
    workers_per_machine: int = 1
    nic_gbps: float = 25.0
    per_flow_gbps: float | None = None
    latency_us: float = 50.0
    server_machines: int = 0
    server_nic_gbps: float | None = None
    cpu_sum_gbps: float | None = 200.0
    worker_device: str = "gpu"
    pcie_gbps: float = 105.0
    gpus_per_switch: int | None = None
    nic_switch: int | None = None
    nvlink_gbps: float | None = None
    intra_gbps: float = 80.0
    intra_latency_us: float = 5.0
    stream_overhead: float = 0.02
    chunk_overhead_us: float = 10.0
    iteration_overhead_us: float = 0.0
    codec_call_us: float = 0.0
    pipeline_depth: int = 4
    topology: dict | None = None
    nic: str | None = None
    codecs: dict | None = None
    name: str = ""
    machine: "MachineModel" = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _validate(self)
        object.__setattr__(self, "machine", MachineModel.from_cluster(self))

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "cluster") -> "ClusterSpec":
        """A cluster from a dict of fields (``gpus_per_machine`` is an alias of
        ``workers_per_machine``); unknown or malformed fields raise :class:`ClusterError`."""
        if not isinstance(data, Mapping):
            raise ClusterError(f"{source}: a cluster is a JSON object, got {type(data).__name__}")
        data = dict(data)
        if "gpus_per_machine" in data:
            if "workers_per_machine" in data:
                raise ClusterError(f"{source}: give workers_per_machine or gpus_per_machine, not both")
            data["workers_per_machine"] = data.pop("gpus_per_machine")
        known = [f.name for f in dataclasses.fields(cls) if f.init]
        for key in data:
            if key not in known:
                extra = did_you_mean(key, known + ["gpus_per_machine"])
                raise ClusterError(
                    f"{source}: unknown field {key!r}{extra}; known fields: {', '.join(known)}")
        if "machines" not in data:
            raise ClusterError(f"{source}: missing required field 'machines' (worker machines)")
        try:
            return cls(**data)
        except ClusterError as exc:
            raise ClusterError(f"{source}: {exc}") from None

    @classmethod
    def from_json(cls, src: str | Path | Mapping[str, Any]) -> "ClusterSpec":
        """A cluster from a JSON file path, a JSON string, or an already parsed dict."""
        if isinstance(src, Mapping):
            return cls.from_dict(src)
        text = str(src)
        source = "cluster JSON"
        if not text.lstrip().startswith("{"):
            path = Path(text)
            source = str(path)
            try:
                text = path.read_text()
            except OSError as exc:
                raise ClusterError(f"cannot read cluster file {path}: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ClusterError(f"{source}: not valid JSON: {exc}") from None
        return cls.from_dict(data, source)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    # ------------------------------------------------------------------ derived
    @property
    def workers(self) -> int:
        return self.machines * self.workers_per_machine

    @property
    def nic_Bps(self) -> float:
        return self.nic_gbps * GBIT

    @property
    def server_nic_Bps(self) -> float:
        return (self.server_nic_gbps or self.nic_gbps) * GBIT

    def root_candidates(self) -> list[int]:
        """Local workers as reduce roots, best first: GPUs off the NIC's PCIe switch
        (BytePS §4.2.2: keep the NIC's uplink for the NIC), then by index."""
        m = self.machine
        return sorted(range(m.w), key=lambda g: (m.nic_sw is not None and m.sw[g] == m.nic_sw, g))

    def space(self, allow_lossy: bool = False, **kw: Any):
        """The :class:`autotune.tuning.space.SearchSpace` of a job on this cluster."""
        from autotune.tuning.space import SearchSpace

        return SearchSpace.build(k_max=self.server_machines,
                                 workers_per_machine=self.workers_per_machine,
                                 root_candidates=self.root_candidates(),
                                 allow_lossy=allow_lossy, **kw)


# ------------------------------------------------------------------------ validation
def _number(c: ClusterSpec, name: str, *, positive: bool = True, optional: bool = False,
            integer: bool = False, minimum: float | None = None) -> None:
    value = getattr(c, name)
    if value is None and optional:
        return
    kind = "an integer" if integer else "a number"
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or (not integer and not math.isfinite(value)):
        none = " or null" if optional else ""
        raise ClusterError(f"field {name!r} must be {kind}{none}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ClusterError(f"field {name!r} must be >= {minimum:g}, got {value!r}")
    if positive and minimum is None and value <= 0:
        raise ClusterError(f"field {name!r} must be > 0, got {value!r}")


def _validate(c: ClusterSpec) -> None:
    _number(c, "machines", integer=True, minimum=1)
    _number(c, "workers_per_machine", integer=True, minimum=1)
    _number(c, "server_machines", integer=True, minimum=0)
    _number(c, "pipeline_depth", integer=True, minimum=1)
    _number(c, "gpus_per_switch", integer=True, minimum=1, optional=True)
    _number(c, "nic_switch", integer=True, minimum=0, optional=True)
    for name in ("nic_gbps", "pcie_gbps", "intra_gbps"):
        _number(c, name)
    for name in ("per_flow_gbps", "server_nic_gbps", "cpu_sum_gbps", "nvlink_gbps"):
        _number(c, name, optional=True)
    for name in ("latency_us", "intra_latency_us", "chunk_overhead_us", "iteration_overhead_us",
                 "codec_call_us", "stream_overhead"):
        _number(c, name, minimum=0)
    if c.worker_device not in ("gpu", "cpu"):
        raise ClusterError(f"field 'worker_device' must be 'gpu' or 'cpu', got {c.worker_device!r}")
    if not isinstance(c.name, str):
        raise ClusterError(f"field 'name' must be a string, got {c.name!r}")
    if c.nic is not None and not isinstance(c.nic, str):
        raise ClusterError(f"field 'nic' must be a NIC node name, got {c.nic!r}")
    if c.topology is not None and not isinstance(c.topology, Mapping):
        raise ClusterError("field 'topology' must be a node-link graph object (nodes, edges)")
    if c.topology is not None and c.worker_device != "gpu":
        raise ClusterError("field 'topology' describes GPUs: it needs worker_device 'gpu'")
    if c.nic_switch is not None and c.topology is None:
        switches = _n_switches(c)
        if switches is None or c.nic_switch >= switches:
            raise ClusterError(
                f"field 'nic_switch' is {c.nic_switch} but the machine has "
                f"{switches or 0} PCIe switch(es) (set gpus_per_switch)")
    if c.codecs is not None:
        if not isinstance(c.codecs, Mapping):
            raise ClusterError("field 'codecs' must be an object {codec: {ratio, encode_gbps, decode_gbps}}")
        for codec, over in c.codecs.items():
            if not isinstance(over, Mapping):
                raise ClusterError(f"field 'codecs.{codec}' must be an object")
            for key, value in over.items():
                if key not in ("ratio", "encode_gbps", "decode_gbps", "summable"):
                    raise ClusterError(
                        f"field 'codecs.{codec}.{key}' is unknown (ratio, encode_gbps, decode_gbps, summable)")
                if key != "summable" and (isinstance(value, bool) or not isinstance(value, (int, float))
                                          or value <= 0):
                    raise ClusterError(f"field 'codecs.{codec}.{key}' must be a number > 0, got {value!r}")


def _n_switches(c: ClusterSpec) -> int | None:
    if c.gpus_per_switch is None:
        return None
    return -(-c.workers_per_machine // c.gpus_per_switch)


# ---------------------------------------------------------------------- machine model
@dataclass
class MachineModel:
    """One worker machine as resources and paths (see the module docstring).

    ``sw[g]``: the PCIe switch of GPU g (``None``: on its own root port); ``nic_sw``: the
    NIC's switch; ``bw[resource]``: bytes/s of each resource per direction; ``nv``: GPU
    pairs joined by NVLink; ``ports``: GPUs on an NVSwitch (any two talk at port rate).
    """

    w: int
    device: str
    sw: list[int | None]
    nic_sw: int | None
    bw: dict[Resource, float]
    nv: dict[tuple[int, int], Resource] = field(default_factory=dict)
    ports: frozenset[int] = frozenset()

    @classmethod
    def from_cluster(cls, c: ClusterSpec) -> "MachineModel":
        w = c.workers_per_machine
        if c.worker_device == "cpu":
            return cls(w, "cpu", [None] * w, None, {("mem",): c.intra_gbps * GBIT})
        if c.topology is not None:
            return _from_topology(c)
        bw: dict[Resource, float] = {("gpu", g): c.pcie_gbps * GBIT for g in range(w)}
        if c.gpus_per_switch is None:
            sw: list[int | None] = [None] * w
        else:
            sw = [g // c.gpus_per_switch for g in range(w)]
            for s in set(sw):
                bw[("up", s)] = c.pcie_gbps * GBIT
        if c.nic_switch is not None:
            bw.setdefault(("up", c.nic_switch), c.pcie_gbps * GBIT)
        nv: dict[tuple[int, int], Resource] = {}
        if c.nvlink_gbps:
            for g in range(w):
                for h in range(g + 1, w):
                    nv[(g, h)] = ("nv", g, h)
                    bw[("nv", g, h)] = c.nvlink_gbps * GBIT
        return cls(w, "gpu", sw, c.nic_switch, bw, nv)

    # ------------------------------------------------------------------ paths
    def path(self, a: int | str, b: int | str) -> list[tuple[Resource, int]]:
        """(resource, direction) pairs a copy from ``a`` to ``b`` crosses (a GPU index or
        ``"host"``); direction 0 is up/out of the lower GPU, 1 the other way. Host
        memory has one direction: every copy counts against it."""
        if a == b:
            return []
        if self.device == "cpu":
            return [(("mem",), 0)]
        if a != HOST and b != HOST:
            key = (min(a, b), max(a, b))
            if key in self.nv:
                return [(self.nv[key], 0 if a < b else 1)]
            if a in self.ports and b in self.ports:
                return [(("nvport", a), 0), (("nvport", b), 1)]
        out: list[tuple[Resource, int]] = []
        if a != HOST:
            out.append((("gpu", a), 0))
        if b != HOST:
            out.append((("gpu", b), 1))
        sa = self.sw[a] if a != HOST else None
        sb = self.sw[b] if b != HOST else None
        if a != HOST and b != HOST and sa is not None and sa == sb:
            return out  # peer-to-peer under one switch
        if sa is not None:
            out.append((("up", sa), 0))
        if sb is not None:
            out.append((("up", sb), 1))
        return out

    def intra_load(self, strategy: str, root: int, ring_factor: float = 0.0,
                   nic_factor: float = 0.0) -> dict[Resource, float]:
        """Bytes each resource carries in its busier direction per byte of gradient, for
        the local part of ``strategy`` (``root``, ``scatter``, ``flat`` (each worker
        stages to the host) or ``flat-ring`` (the local edges of an all-reduce ring over
        every worker, ``ring_factor`` bytes each)), plus ``nic_factor`` bytes each way
        through the NIC's switch uplink."""
        load: dict[Resource, list[float]] = {}

        def add(a: int | str, b: int | str, amount: float, mirror: bool = True) -> None:
            for src, dst in ((a, b), (b, a)) if mirror else ((a, b),):
                for res, d in self.path(src, dst):
                    load.setdefault(res, [0.0, 0.0])[d] += amount

        w = self.w
        gpu = self.device == "gpu"
        if strategy == "root":  # reduce into the root, broadcast back (mirror)
            for g in range(w):
                if g != root:
                    add(g, root, 1.0)
            if gpu:
                add(root, HOST, 1.0)
        elif strategy == "scatter":  # reduce-scatter ring, all-gather ring (mirror)
            for g in range(w):
                if w > 1:
                    add(g, (g + 1) % w, (w - 1) / w)
                if gpu:
                    add(g, HOST, 1.0 / w)
        elif strategy == "flat-ring":  # one ring through every worker of every machine
            for g in range(w - 1):
                add(g, g + 1, ring_factor, mirror=False)
            if gpu:  # the ring leaves and enters the machine through the host
                add(w - 1, HOST, ring_factor, mirror=False)
                add(HOST, 0, ring_factor, mirror=False)
        elif strategy == "flat":
            if gpu:
                for g in range(w):
                    add(g, HOST, 1.0)
        else:
            raise ValueError(f"unknown intra strategy {strategy!r}")
        if nic_factor and self.nic_sw is not None:
            up = load.setdefault(("up", self.nic_sw), [0.0, 0.0])
            up[0] += nic_factor  # received bytes go up to memory
            up[1] += nic_factor  # sent bytes come down from memory
        return {res: (ud[0] + ud[1] if res == ("mem",) else max(ud)) for res, ud in load.items()}


def _from_topology(c: ClusterSpec) -> MachineModel:
    """The machine model of a probe graph (schema: :mod:`autotune.probes.graph`): the
    first ``workers_per_machine`` GPUs, their PCIe links and switch uplinks, the NIC's
    switch, NVLinks and NVSwitch ports."""
    from autotune.probes.graph import tree_parents

    g = _read_topology(c.topology)
    gpus = _topology_gpus(g, c.workers_per_machine)
    nic = _topology_nic(g, c.nic)
    parents = tree_parents(g)
    bw: dict[Resource, float] = {}
    sw, nic_sw = _pcie_resources(g, parents, gpus, nic, c.pcie_gbps, bw)
    per_link = (c.nvlink_gbps or DEFAULT_NVLINK_GBPS) * GBIT
    nv, ports = _nvlink_resources(g, gpus, per_link, bw)
    return MachineModel(len(gpus), "gpu", sw, nic_sw, bw, nv, ports)


def _read_topology(data: Mapping[str, Any]) -> Any:
    """The ``topology`` field as a networkx graph whose nodes have a kind and whose edges
    are PCIe, SMP or NVLink edges."""
    import networkx as nx

    from autotune.probes.graph import KIND, NVLINK, PCIE, SMP

    if "nodes" not in data or ("edges" not in data and "links" not in data):
        raise ClusterError("field 'topology' must be node-link graph data with 'nodes' and 'edges'")
    try:
        g = nx.node_link_graph(data, edges="edges" if "edges" in data else "links")
    except Exception as exc:  # networkx raises several kinds for malformed data
        raise ClusterError(f"field 'topology' is not a readable node-link graph: {exc}") from None
    for node, kind in g.nodes(data=KIND):
        if kind is None:
            raise ClusterError(f"topology node {node!r} has no {KIND!r}")
    for u, v, kind in g.edges(data=KIND):
        if kind not in (PCIE, NVLINK, SMP):
            raise ClusterError(f"topology edge {u!r}-{v!r} has kind {kind!r}; "
                               f"expected {PCIE}, {NVLINK} or {SMP}")
    return g


def _topology_gpus(g: Any, w: int) -> list[Any]:
    """The GPU nodes the ``w`` workers of a machine use, by local index."""
    from autotune.probes.graph import gpu_nodes

    gpus = gpu_nodes(g)
    if len(gpus) < w:
        raise ClusterError(
            f"topology has {len(gpus)} GPU(s) but workers_per_machine is {w}")
    return gpus[:w]


def _topology_nic(g: Any, name: str | None) -> Any:
    """The NIC node named by the ``nic`` field (default: the first NIC), None without one."""
    from autotune.probes.graph import nic_nodes

    nics = [str(n) for n in nic_nodes(g)]
    if name is not None and name not in g:
        raise ClusterError(f"field 'nic' names {name!r}, not a node of the topology (NICs: {nics})")
    nic = name if name is not None else (nics[0] if nics else None)
    return next((n for n in g.nodes if str(n) == str(nic)), None) if nic is not None else None


def _pcie_resources(g: Any, parents: dict[Any, Any], gpus: list[Any], nic: Any,
                    default_gbps: float, bw: dict[Resource, float]
                    ) -> tuple[list[int | None], int | None]:
    """Each GPU's PCIe link and switch uplink into ``bw``; returns every GPU's switch
    index (None: on its own root port) and the NIC's switch index."""
    from autotune.probes.graph import PCIE_SWITCH, ancestor_of_kind

    def uplink(node: Any) -> float:
        """Bytes/s of the PCIe edge from ``node`` up to its parent."""
        up = parents.get(node)
        return (_pcie_gbps(g.edges[node, up], default_gbps) if up is not None else default_gbps) * GBIT

    switches: dict[Any, int] = {}
    sw: list[int | None] = []
    for i, gpu in enumerate(gpus):
        s = ancestor_of_kind(parents, g, gpu, PCIE_SWITCH)
        bw[("gpu", i)] = uplink(gpu)
        if s is None:
            sw.append(None)
            continue
        sw.append(switches.setdefault(s, len(switches)))
        bw[("up", sw[-1])] = uplink(s)
    s = ancestor_of_kind(parents, g, nic, PCIE_SWITCH) if nic is not None else None
    if s is None:
        return sw, None
    nic_sw = switches.setdefault(s, len(switches))
    if ("up", nic_sw) not in bw:
        bw[("up", nic_sw)] = uplink(s)
    return sw, nic_sw


def _nvlink_resources(g: Any, gpus: list[Any], per_link: float, bw: dict[Resource, float]
                      ) -> tuple[dict[tuple[int, int], Resource], frozenset[int]]:
    """NVLinks between the GPUs, and each GPU's port into an NVSwitch, into ``bw``
    (``per_link`` bytes/s per link); returns the linked GPU pairs and the switched GPUs."""
    from autotune.probes.graph import KIND, NVLINK, NVSWITCH

    index = {gpu: i for i, gpu in enumerate(gpus)}
    nv: dict[tuple[int, int], Resource] = {}
    switch_links: dict[int, int] = {}
    for u, v, d in g.edges(data=True):
        if d.get(KIND) != NVLINK:
            continue
        links = _nvlinks(d)
        if u in index and v in index:
            key = (min(index[u], index[v]), max(index[u], index[v]))
            nv[key] = ("nv",) + key
            bw[nv[key]] = links * per_link
        else:  # a GPU's links into an NVSwitch
            for a, b in ((u, v), (v, u)):
                if a in index and g.nodes[b].get(KIND) == NVSWITCH:
                    switch_links[index[a]] = switch_links.get(index[a], 0) + links
    for a, links in switch_links.items():
        bw[("nvport", a)] = links * per_link
    return nv, frozenset(switch_links)


def _pcie_gbps(edge: Mapping[str, Any], default: float) -> float:
    """Bandwidth of a PCIe edge: its ``gbps``, else from ``gen``/``width`` (or a label
    like ``pcie:gen3x16``), else ``default``."""
    if isinstance(edge.get("gbps"), (int, float)) and edge["gbps"] > 0:
        return float(edge["gbps"])
    gen, width = edge.get("gen"), edge.get("width")
    m = re.match(r"pcie:(?:gen(\d))?(?:x(\d+))?", str(edge.get("label", "")))
    if m:
        gen = gen or (int(m.group(1)) if m.group(1) else None)
        width = width or (int(m.group(2)) if m.group(2) else None)
    if gen in PCIE_LANE_GBPS and width:
        return PCIE_LANE_GBPS[gen] * int(width) * PCIE_EFFICIENCY
    return default


def _nvlinks(edge: Mapping[str, Any]) -> int:
    if isinstance(edge.get("links"), int) and edge["links"] > 0:
        return edge["links"]
    m = re.match(r"nvlink:(\d+)", str(edge.get("label", "")))
    return int(m.group(1)) if m else 1
