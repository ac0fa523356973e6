"""An NCCL-like all-reduce, and DDP on top of it: the baseline a real GPU cluster would run.

The rest of :mod:`autotune.sim` models *this project's* runtime, whose all-reduce is a
single ring (``2(E-1)`` latency steps through E endpoints). A PyTorch DDP job on a GPU
cluster runs NCCL instead, which for every call picks an algorithm and a protocol from
a cost model of its own, by message size. This module is that choice:

- **Ring** through every GPU, each machine's GPUs contiguous (NCCL's rings enter and
  leave a machine once per channel through the NIC and run over NVLink/PCIe inside):
  every rank, and every NIC, carries ``2(N-1)/N`` of the bytes each way (N GPUs);
  ``2(N-1)`` latency steps, ``2(n-1)`` of them across the network (n machines) and
  the rest inside machines.
- **Double binary tree** across machines with a chain inside each machine (NCCL 2.4+):
  every NIC carries ``2`` x the bytes each way (an interior node of one tree is a leaf of
  the other: in S + S/2 + S/2, out S/2 + S + S/2), i.e. NCCL's "algorithm bandwidth =
  bus bandwidth / 2"; latency ``2((w-1) intra + floor(log2 n) network)`` steps.
- **Protocols** LL, LL128 and Simple as per-step latency constants and bandwidth
  factors, the numbers of NCCL's own tuning model (NCCL 2.7-era ``src/graph/tuning.cc``:
  ``baseLat``, ``hwLat`` for NVLink/PCI/network, LL at 1/4 of the ring's bandwidth and
  1/3.8 of the tree's, LL128 at 0.92 / 0.915, trees at 0.9), and with
  ``corrections=True`` its two empirical corrections: the ring/Simple latency x1.9 on
  several machines for messages of at least ``N/16 x 64 KiB`` ("plateau") and the trees'
  bandwidth factor per power-of-two size from 64 B to 128 MiB
  (``treeCorrectionFactor``).
- **The choice** is NCCL's: the (algorithm, protocol) with the least
  ``latency + bytes / algorithm bandwidth``.

The *bus* bandwidth (per rank, per direction) is the slowest of the NIC and the machine's
insides as :class:`~autotune.sim.cluster.MachineModel` charges one ring through every
local GPU that enters and leaves the machine through the NIC (:func:`bus_Bps`: NVLink or
PCIe between neighbours, GPUDirect RDMA to a GPU under the NIC's switch).

Not modelled: NCCL's channels and threads (the bus bandwidth is reached whatever the
size, so the per-channel LL128 caps are not applied), CollNet/SHARP, NVLS, several NICs
per machine, the network's congestion, GPU kernels competing with the training's own,
and PyTorch's first 1 MiB bucket (DDP's buckets here are the runtime's cut of the
gradients at 25 MiB, which splits a gradient larger than a bucket where DDP would not).
The latencies are NCCL's InfiniBand/RoCE constants, not the cluster's ``latency_us``
(which is this project's gloo/TCP runtime's); so the baseline is an RDMA NCCL, as in the
BytePS paper's (OSDI 2020) evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from .cluster import HOST, ClusterSpec
from .formulas import allreduce_time
from .job import Job
from .model import IterationEstimate

MiB = 1 << 20

ALGORITHMS = ("ring", "tree")
PROTOCOLS = ("LL", "LL128", "Simple")

#: NCCL's base latency per call (us) by algorithm and protocol (tuning.cc ``baseLat``)
BASE_LAT_US = {"tree": {"LL": 4.4, "LL128": 4.4, "Simple": 0.0},
               "ring": {"LL": 3.6, "LL128": 10.0, "Simple": 8.4}}
#: NCCL's latency per step (us) by link, algorithm and protocol (tuning.cc ``hwLat``)
STEP_LAT_US = {
    "nvlink": {"tree": {"LL": 0.52, "LL128": 1.2, "Simple": 28.0},
               "ring": {"LL": 0.47, "LL128": 1.9, "Simple": 3.4}},
    "pci": {"tree": {"LL": 1.0, "LL128": 1.9, "Simple": 28.0},
            "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}},
    "net": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 50.0},
            "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 9.6}},
}
#: the share of the bus bandwidth each (algorithm, protocol) reaches (tuning.cc)
BW_FACTOR = {"ring": {"LL": 1 / 4, "LL128": 0.92, "Simple": 1.0},
             "tree": {"LL": 0.9 / 3.8, "LL128": 0.9 * 0.915, "Simple": 0.9}}
#: NCCL's tree bandwidth correction per log2(bytes / 64), 64 B .. 128 MiB
#: (tuning.cc ``treeCorrectionFactor``); 1.0 above
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9),
}
#: NCCL's ring/Simple latency factor on several machines for large messages
RING_PLATEAU = 1.9


@dataclass(frozen=True)
class NcclCall:
    """One all-reduce as the NCCL-like model runs it: the chosen ``algorithm`` and
    ``protocol``, its ``time_s``, and the bytes each NIC carries each way."""

    algorithm: str
    protocol: str
    time_s: float
    nic_bytes: float


def bus_Bps(cluster: ClusterSpec) -> float:
    """The bus bandwidth (bytes/s per rank per direction): the slowest resource of one
    ring through the machine's GPUs in index order (each neighbour pair over its path in
    :class:`~autotune.sim.cluster.MachineModel`: NVLink, an NVSwitch port or PCIe) that
    enters and leaves the machine through the NIC (several machines): with GPUDirect RDMA
    straight to a GPU under the NIC's PCIe switch when one is, else through host memory.
    A resource crossed twice in one direction counts twice."""
    m = cluster.machine
    load: dict[tuple, list[float]] = {}

    def add(a: int | str, b: int | str) -> None:
        for res, d in m.path(a, b):
            load.setdefault(res, [0.0, 0.0])[d] += 1.0

    for g in range(m.w - 1):
        add(g, g + 1)
    if cluster.machines > 1:
        near = [g for g in range(m.w) if m.nic_sw is not None and m.sw[g] == m.nic_sw]
        if near and m.device == "gpu":  # GPUDirect: NIC <-> GPU under one switch
            load.setdefault(("gpu", near[0]), [0.0, 0.0])[0] += 1.0
            load.setdefault(("gpu", near[-1]), [0.0, 0.0])[1] += 1.0
        else:
            add(HOST, 0)
            add(m.w - 1, HOST)
            if m.nic_sw is not None:  # the NIC's own switch uplink, both ways
                up = load.setdefault(("up", m.nic_sw), [0.0, 0.0])
                up[0] += 1.0
                up[1] += 1.0
    elif m.w > 1:
        add(m.w - 1, 0)  # the ring closes inside the machine
    rate = cluster.nic_Bps if cluster.machines > 1 else math.inf
    for res, ud in load.items():
        per_byte = ud[0] + ud[1] if res == ("mem",) else max(ud)
        if per_byte > 0:
            rate = min(rate, m.bw[res] / per_byte)
    return rate


def _intra_link(cluster: ClusterSpec) -> str:
    m = cluster.machine
    return "nvlink" if (m.nv or m.ports) else "pci"


def nccl_latency_s(cluster: ClusterSpec, algorithm: str, protocol: str) -> float:
    """NCCL's latency of one all-reduce (seconds, before the size-dependent plateau)."""
    n, w = cluster.machines, cluster.workers_per_machine
    N = n * w
    intra = STEP_LAT_US[_intra_link(cluster)][algorithm][protocol]
    net = STEP_LAT_US["net" if n > 1 else _intra_link(cluster)][algorithm][protocol]
    if n > 1 and protocol == "LL":
        intra *= 1.8  # NCCL: LL inside a machine is slower when the job spans machines
    lat = BASE_LAT_US[algorithm][protocol]
    if algorithm == "ring":
        steps, inter = 2 * (N - 1), 2 * (n - 1)
        lat += (steps - inter) * intra + inter * net
    else:
        lat += 2 * ((w - 1) * intra + int(math.log2(n)) * net)
    return lat * 1e-6


def nccl_call(cluster: ClusterSpec, nbytes: float, algorithm: str, protocol: str,
              corrections: bool = True) -> NcclCall:
    """One all-reduce of ``nbytes`` per rank with a given algorithm and protocol."""
    if algorithm not in ALGORITHMS or protocol not in PROTOCOLS:
        raise ValueError(f"unknown algorithm/protocol {algorithm!r}/{protocol!r}")
    n, N = cluster.machines, cluster.workers
    if N == 1:
        return NcclCall(algorithm, protocol, 0.0, 0.0)
    bus = bus_Bps(cluster) * BW_FACTOR[algorithm][protocol]
    lat = nccl_latency_s(cluster, algorithm, protocol)
    if algorithm == "ring":
        wire = 2 * (N - 1) / N
        if (corrections and protocol == "Simple" and n > 1
                and nbytes >= N / 16 * 65536):
            lat *= RING_PLATEAU
    else:
        wire = 2.0
        if corrections:
            log_size = int(math.log2(max(nbytes, 64) / 64))
            table = TREE_CORRECTION[protocol]
            if log_size < len(table):
                bus *= table[log_size]
    nic = wire * nbytes if n > 1 else 0.0
    if algorithm == "ring":  # the ring's bandwidth term is the paper's 2(N-1)S/(NB)
        return NcclCall(algorithm, protocol, lat + allreduce_time(N, nbytes, bus), nic)
    return NcclCall(algorithm, protocol, lat + wire * nbytes / bus, nic)


def nccl_allreduce(cluster: ClusterSpec, nbytes: float, *, algorithms: Iterable[str] = ALGORITHMS,
                   protocols: Iterable[str] = PROTOCOLS, corrections: bool = True) -> NcclCall:
    """The all-reduce of ``nbytes`` per rank NCCL would run on ``cluster``: the fastest
    (algorithm, protocol) of NCCL's cost model among those allowed."""
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    calls = [nccl_call(cluster, nbytes, a, p, corrections)
             for a in algorithms for p in protocols]
    if not calls:
        raise ValueError("no algorithm/protocol allowed")
    return min(calls, key=lambda c: c.time_s)


def nccl_allreduce_time(cluster: ClusterSpec, nbytes: float, **kw: Any) -> float:
    """Seconds for one NCCL-like all-reduce of ``nbytes`` per rank (:func:`nccl_allreduce`)."""
    return nccl_allreduce(cluster, nbytes, **kw).time_s


def bus_bandwidth(cluster: ClusterSpec, nbytes: float, **kw: Any) -> float:
    """nccl-tests' bus bandwidth (bytes/s) of the NCCL-like all-reduce of ``nbytes``:
    ``algbw * 2(N-1)/N`` with ``algbw = nbytes / time``."""
    N = cluster.workers
    t = nccl_allreduce_time(cluster, nbytes, **kw)
    return nbytes / t * 2 * (N - 1) / N if t > 0 else math.inf


def ddp_nccl(job: Job, cluster: ClusterSpec, bucket_bytes: int = 25 * MiB, **kw: Any) -> IterationEstimate:
    """One DDP iteration over NCCL: buckets of ``bucket_bytes`` (the runtime's cut of the
    gradients in ready order) each all-reduced by :func:`nccl_allreduce` as soon as
    backward has produced it, one at a time in order (DDP's one NCCL stream), overlapping
    the rest of backward; the step ends when compute and the last bucket are done."""
    sizes, ready = job.chunks(bucket_bytes)
    bwd = job.compute_s * job.backward_fraction
    fwd = job.compute_s - bwd
    free = first = 0.0
    nic = 0.0
    used: dict[str, int] = {}
    for j, (b, r) in enumerate(zip(sizes, ready)):
        call = nccl_allreduce(cluster, b, **kw)
        start = max(fwd + bwd * r, free)
        if j == 0:
            first = start
        free = start + call.time_s
        nic += call.nic_bytes
        key = f"{call.algorithm}/{call.protocol}"
        used[key] = used.get(key, 0) + 1
    if cluster.workers == 1:
        free = first = 0.0
    step = max(job.compute_s, free)
    exposed = step - job.compute_s
    return IterationEstimate(
        step_s=step, compute_s=job.compute_s, comm_s=free - first, exposed_comm_s=exposed,
        throughput=job.batch_per_worker * cluster.workers / step if step > 0 else math.inf,
        nic_bytes={"worker": nic, "server": 0.0},
        bottleneck="compute" if exposed <= 0 else "nccl " + max(used, key=used.get),
        chunks=len(sizes),
        breakdown={"forward_s": fwd, "backward_s": bwd, "bus_gbps": bus_Bps(cluster) * 8 / 1e9,
                   **{f"calls_{k}": float(v) for k, v in used.items()}},
        config={"baseline": "ddp-nccl", "bucket_bytes": bucket_bytes},
    )
