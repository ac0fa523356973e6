"""The cost model of one training iteration: :func:`simulate`.

How a configuration is charged (see ``docs/simulator.md`` for the derivation):

1. **Chunks.** The runtime's plan (:meth:`Job.plan`, with the code of
   :mod:`autotune.runtime.data.plan`): gradients packed/split into chunks of ``chunk_bytes`` in
   ready order, chunk ``i`` on stream ``i % streams``, under push/pull each chunk given to
   a Summation Service so each one's bytes follow BytePS's shares; a chunk is ready when
   backward has produced its last gradient.
2. **Resources.** Per byte of gradient, every shared resource of the busiest machine
   gets a load: the worker NIC, a server NIC, PCIe links / switch uplinks / NVLinks /
   host memory for the intra-machine strategy (the NIC's traffic also crosses its
   switch's uplink), the CPU of each Summation Service, the codec's encode/decode work.
   The resource with the highest seconds-per-byte is the bottleneck; its cost ``c``
   makes a chunk of b bytes occupy the cluster for ``b*c`` (at least the per-chunk
   software overhead), chunks back to back: this is the steady state of a pipeline.
3. **Network rates.** A machine's NIC moves ``min(flows * per_flow_cap, NIC)`` with
   ``flows = streams x (local endpoints that talk across machines)``, times
   ``1 / (1 + stream_overhead * (streams - 1))``. Ring all-reduce puts
   ``2(E-1)/E`` of the bytes on every NIC (E ring endpoints); all-gather (codecs whose
   payloads cannot be summed) ``E-1``; push/pull follows BytePS's split with k servers:
   a worker machine carries ``(1-a) + (n-1)a`` and a server ``n*a`` where ``a`` is the
   share its Summation Service owns under the plan (whole chunks, so near the optimum).
4. **Latency and streams.** One chunk on its own takes ``alpha + b*d``: ``alpha`` is the
   per-message latency times the messages on its critical path (``2(E-1)`` ring steps,
   or push + pull, plus local steps) and ``d`` its stage times at single-flow rates
   (intra reduce, network, summation, codec, intra broadcast). Under ``allreduce`` each
   stream runs one collective at a time, so ``streams`` chunks overlap their latencies;
   the schedule is a max-plus recurrence over chunks: start = max(ready, stream free);
   finish = max(cluster free after b*c, start + alpha + b*d). Under ``pushpull`` the
   schedule follows the runtime (:func:`_schedule_pushpull`): ``pipeline_depth`` pushes
   per stream on their way out, and every Summation Service store-and-forward per chunk
   (a chunk's pull starts once all its parts are in; at one owner the chunks of a send
   window share its link evenly across streams and in order within a stream, so a pull
   overlaps the next push on its stream), with the same two lower bounds.
5. **Iteration.** Forward, then backward producing gradients (``backward_fraction`` of
   the compute), then the wait for the last chunk, plus what every iteration costs
   whatever it runs: ``step = max(compute, last finish) + iteration_overhead``.

In the regime of the BytePS paper's (OSDI 2020) formulas (no latency or overhead, one stream, no per-flow
cap, free summation, one worker per machine, M much larger than a chunk) the network term
is exactly ``2(n-1)M/(nB)`` for all-reduce and ``2n(n-1)M/((n^2+kn-2k)B)`` for push/pull.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, NamedTuple

from autotune.runtime.config import (DEFAULT_POWERSGD_RANK, DEFAULT_RANDOMK_RATIO,
                                     DEFAULT_TOPK_RATIO, NAMES, ConfigError, RuntimeConfig)

from .cluster import GBIT, ClusterSpec
from .codecs import CodecCost, codec_table
from .job import ChunkPlan, Job

MiB = 1 << 20

#: the parameters the model reads, at the runtime's defaults (RuntimeConfig)
DEFAULT_CONFIG: dict[str, Any] = {
    k: RuntimeConfig()[k] for k in ("streams", "chunk_bytes", "transport", "servers", "intra",
                                    "reduce_root", "compression", "topk_ratio", "randomk_ratio",
                                    "powersgd_rank", "compress_min_bytes")}

#: each codec parameter, and its value in the codec cost table (the runtime's default)
CODEC_PARAMS = {"topk": ("topk_ratio", DEFAULT_TOPK_RATIO),
                "randomk": ("randomk_ratio", DEFAULT_RANDOMK_RATIO),
                "powersgd": ("powersgd_rank", DEFAULT_POWERSGD_RANK)}


def wire_ratio(cfg: Mapping[str, Any], codec: CodecCost, plan: ChunkPlan,
               total: int) -> tuple[float, float]:
    """``(ratio, compressed)``: wire bytes per gradient byte, and the share of the
    gradient bytes a codec encodes. A chunk under ``compress_min_bytes`` travels as it
    is (HiPress's selective rule, as the runtime does); a codec's payload scales with its
    parameter (top-k's and random-k's ratio, PowerSGD's rank) from the table's value at
    the runtime's default."""
    if cfg["compression"] == "none" or not plan.sizes:
        return 1.0, 0.0
    r = codec.ratio
    if cfg["compression"] in CODEC_PARAMS:
        name, default = CODEC_PARAMS[cfg["compression"]]
        r = min(1.0, r * float(cfg[name]) / default)
    least = int(cfg["compress_min_bytes"])
    f = sum(b for b in plan.sizes if b >= least) / max(1, total)
    return f * r + (1.0 - f), f


@dataclass(frozen=True)
class IterationEstimate:
    """One iteration's predicted timing. Times in seconds; ``nic_bytes`` are bytes per
    iteration per direction on the busiest worker NIC (``worker``) and server NIC
    (``server``); ``throughput`` is samples/s over all workers."""

    step_s: float
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    throughput: float
    nic_bytes: dict[str, float]
    bottleneck: str
    chunks: int
    breakdown: dict[str, float] = field(default_factory=dict)
    work: float = 1.0  # what computing this estimate cost (WORK_PER_CHUNK)
    config: dict[str, Any] = field(default_factory=dict)


def _check_config(config: Mapping[str, Any], cluster: ClusterSpec,
                  table: Mapping[str, CodecCost]) -> dict[str, Any]:
    """The runtime's checks and canonical form (RuntimeConfig; unknown keys are ignored),
    then what this cluster allows."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"a configuration is a dict, got {type(config).__name__}")
    rc = RuntimeConfig.of({k: v for k, v in config.items() if k in NAMES})
    if rc.servers > cluster.server_machines:
        raise ConfigError(f"servers={rc.servers}: the cluster has {cluster.server_machines} "
                          "server machine(s)")
    if rc.reduce_root >= cluster.workers_per_machine:
        raise ConfigError(f"reduce_root={rc.reduce_root} is not a local worker "
                          f"0..{cluster.workers_per_machine - 1}")
    if rc.compression not in table:
        raise ConfigError(f"compression {rc.compression!r} is unknown; codecs: {', '.join(table)}")
    return {k: rc[k] for k in DEFAULT_CONFIG}


#: What a prediction costs, in units that do not depend on the machine or its load, so
#: that a budget spent in them (the prior's pool, a calibration fit) ends at the same
#: prediction on every run of a seed (:attr:`IterationEstimate.work`): one unit a
#: configuration, plus these a chunk of its plan by transport (the schedule of push/pull
#: walks each chunk through its owner's links). Measured 2026-12-03 on the 2-core machine
#: over the tuner suites' jobs: about 0.2 ms a configuration, 12 us a push/pull chunk and
#: 2.5 us an all-reduce chunk; a unit came to 0.05-0.18 ms of CPU from job to job.
WORK_PER_CHUNK = {"pushpull": 0.08, "allreduce": 0.02}


def work(estimate: "IterationEstimate | None") -> float:
    """What one :func:`simulate` call cost in work units (:data:`WORK_PER_CHUNK`): one for
    a configuration the model refused (``None``)."""
    return 1.0 if estimate is None else estimate.work


def simulate(job: Job, cluster: ClusterSpec, config: Mapping[str, Any]) -> IterationEstimate:
    """Predict one iteration of ``job`` on ``cluster`` under ``config`` (a Config dict
    of :mod:`autotune.tuning.space`; missing keys take their defaults, unknown keys are ignored)."""
    table = codec_table(cluster.codecs)
    cfg = _check_config(config, cluster, table)
    s = _Setting.of(job, cluster, cfg, table)
    ch = _Charges()
    if s.transport == "allreduce":
        _charge_allreduce(s, ch)
    else:
        _charge_pushpull(s, ch)
    _charge_intra(s, ch)
    _charge_worker_cpu_and_codec(s, ch)
    if s.N == 1:  # nothing to exchange
        ch, s.plan = _Charges(), ChunkPlan([], [], [], [], [])
    estimate = _estimate(job, s, ch)
    return replace(estimate, work=1.0 + WORK_PER_CHUNK[s.transport] * estimate.chunks)


@dataclass
class _Setting:
    """What the charging steps read: the world, the configuration's choices, the chunks
    (the runtime's plan) and the rates (bytes/s; ``R_agg``/``R_one``: a worker machine's NIC rate with every
    stream's flows / with one stream's)."""

    cluster: ClusterSpec
    cfg: dict[str, Any]
    n: int
    w: int
    N: int
    S: int
    transport: str
    k: int
    strategy: str
    codec: CodecCost
    r: float
    f: float
    total: int
    plan: ChunkPlan
    lat: float
    ilat: float
    cpu: float
    B: float
    Bs: float
    cap: float
    eff: float
    flows: int
    bytes_mult: int
    share: float
    R_agg: float
    R_one: float

    @classmethod
    def of(cls, job: Job, cluster: ClusterSpec, cfg: dict[str, Any],
           table: Mapping[str, CodecCost]) -> "_Setting":
        n, w = cluster.machines, cluster.workers_per_machine
        S = cfg["streams"]
        transport = cfg["transport"]
        strategy = cfg["intra"] if w > 1 else "flat"
        cap = cluster.per_flow_gbps * GBIT if cluster.per_flow_gbps else math.inf
        eff = 1.0 / (1.0 + cluster.stream_overhead * (S - 1))
        B = cluster.nic_Bps
        codec = table[cfg["compression"]]
        # endpoints: how many local processes cross the network (flows) / carry full bytes
        if strategy == "scatter":
            flows, bytes_mult, share = w, 1, 1.0 / w
        elif strategy == "root":
            flows, bytes_mult, share = 1, 1, 1.0
        else:  # flat
            flows = w if transport == "pushpull" else 1
            bytes_mult, share = (w if transport == "pushpull" else 1), 1.0
        plan = job.plan(cfg, n)
        r, f = wire_ratio(cfg, codec, plan, job.total_bytes)
        return cls(
            cluster=cluster, cfg=cfg, n=n, w=w, N=n * w, S=S, transport=transport,
            k=cfg["servers"] if transport == "pushpull" else 0, strategy=strategy,
            codec=codec, r=r, f=f, total=job.total_bytes, plan=plan,
            lat=cluster.latency_us * 1e-6, ilat=cluster.intra_latency_us * 1e-6,
            cpu=cluster.cpu_sum_gbps * GBIT if cluster.cpu_sum_gbps else math.inf,
            B=B, Bs=cluster.server_nic_Bps, cap=cap, eff=eff,
            flows=flows, bytes_mult=bytes_mult, share=share,
            R_agg=min(S * flows * cap, B) * eff, R_one=min(flows * cap, B) * eff)


@dataclass
class _Charges:
    """What the steps charge. ``agg``: resource -> seconds per gradient byte, whole
    cluster (in the order the steps charge them: ties name the first); ``nic_factor``/
    ``server_factor``: wire bytes per gradient byte on the busiest worker / server NIC;
    ``alpha``: latency on one chunk's critical path; ``*_one``: seconds per byte of one
    chunk alone in each stage; ``codec_enc``/``codec_dec``/``worker_sum``: per-process
    encode, decode and summation load per gradient byte."""

    agg: dict[str, float] = field(default_factory=dict)
    nic_factor: float = 0.0
    server_factor: float = 0.0
    alpha: float = 0.0
    ring_factor: float = 0.0
    net_one: float = 0.0
    intra_one: float = 0.0
    intra_phases: int = 0
    codec_enc: float = 0.0
    codec_dec: float = 0.0
    codec_one: float = 0.0
    worker_sum: float = 0.0
    sum_one: float = 0.0
    owner_cost: list[float] = field(default_factory=list)
    owner_sum: list[float] = field(default_factory=list)


def _charge_allreduce(s: _Setting, ch: _Charges) -> None:
    """A ring over E endpoints (every worker with ``intra=flat``, else one per machine):
    summable payloads are reduced, others all-gathered and each decoded."""
    n, r, share = s.n, s.r, s.share
    E = s.N if s.strategy == "flat" else n
    f = s.f
    if s.codec.summable or f == 0.0:
        per_edge = r * 2 * (E - 1) / E
        steps = 2 * (E - 1)
        ch.codec_enc, ch.codec_dec = f * share, f * share
        ch.worker_sum = (E - 1) / E * r * share
    else:  # all-gather of the encoded chunks' payloads, each decoded; the rest summed
        plain = (1.0 - f) * 2 * (E - 1) / E
        per_edge = (r - (1.0 - f)) * (E - 1) + plain
        steps = 2 * (E - 1) if f < 1.0 else E - 1
        ch.codec_enc, ch.codec_dec = f * share, E * f * share
        ch.worker_sum = (E - 1) * f * share + (E - 1) / E * (1.0 - f) * share
    ch.ring_factor = per_edge
    ch.nic_factor = per_edge if n > 1 else 0.0
    ch.net_one = ch.nic_factor / s.R_one
    if n > 1:
        ch.alpha += steps * s.lat
    elif s.strategy == "flat":
        ch.alpha += steps * s.ilat
    if ch.nic_factor:
        ch.agg["worker NIC"] = ch.nic_factor / s.R_agg


def _charge_pushpull(s: _Setting, ch: _Charges) -> None:
    """BytePS's split over k servers and the n machines' colocated Summation Services,
    as the plan realises it chunk by chunk: NIC bytes, the Summation Services' CPU, and one
    chunk's push + pull."""
    n, k, r, cpu, codec, bytes_mult = s.n, s.k, s.r, s.cpu, s.codec, s.bytes_mult
    owned = s.plan.owned
    a_srv = max(owned[:k], default=0.0) / s.total
    # store-and-forward at each owner: seconds per chunk byte on its link, each way, and
    # to add one part once the last is in
    srv_rate = min(s.S * n * s.flows * s.cap, s.Bs) * s.eff
    mach_rate = min(s.S * max(n - 1, 1) * s.flows * s.cap, s.B) * s.eff
    ch.owner_cost = ([n * bytes_mult * r / srv_rate] * k
                     + [(n - 1) * bytes_mult * r / mach_rate] * n)
    add = (r if codec.summable else 1.0) / cpu
    ch.owner_sum = [add] * (k + n)
    a_mach = owned[k:]
    a_hi, a_lo = max(a_mach) / s.total, min(a_mach) / s.total
    a_m = a_hi if n >= 2 else a_lo
    ch.nic_factor = bytes_mult * r * ((1 - a_m) + (n - 1) * a_m) if (n > 1 or k) else 0.0
    ch.server_factor = n * bytes_mult * r * a_srv
    if ch.nic_factor:
        ch.agg["worker NIC"] = ch.nic_factor / s.R_agg
    if ch.server_factor:
        ch.agg["server NIC"] = ch.server_factor / (min(s.S * n * s.flows * s.cap, s.Bs) * s.eff)
    if a_srv:
        ch.agg["server CPU"] = _summation_cost(s, a_srv)
    if a_hi:
        ch.agg["summation CPU"] = _summation_cost(s, a_hi)
    # one chunk alone: every endpoint pushes it to one owner, then pulls the sum
    if n > 1 or k:
        owner_B = s.Bs if k else s.B
        push = max(bytes_mult * r / s.R_one, n * bytes_mult * r / owner_B,
                   n * bytes_mult * (r if codec.summable else 1.0) / cpu)
        ch.net_one = 2 * push
        ch.alpha += 2 * s.lat
    else:
        ch.net_one = 0.0
        ch.alpha += 2 * s.ilat
    ch.codec_enc, ch.codec_dec = s.f * s.share, s.f * s.share


def _summation_cost(s: _Setting, a: float) -> float:
    """Seconds per gradient byte of a Summation Service owning share ``a``: it sums
    n*bytes_mult parts of what it owns (decoding them first when the codec's payloads
    cannot be added)."""
    codec, cpu = s.codec, s.cpu
    parts = s.n * s.bytes_mult * a
    if codec.summable:
        return parts * s.r / cpu
    return parts / cpu + parts * 8 / (codec.decode_gbps * 1e9) + a * 8 / (codec.encode_gbps * 1e9)


def _charge_intra(s: _Setting, ch: _Charges) -> None:
    """The intra-machine part, with the NIC's traffic crossing its switch's uplink."""
    m, strategy = s.cluster.machine, s.strategy
    local = strategy
    if strategy == "flat" and s.transport == "allreduce":
        local = "flat-ring"  # one ring through every worker: its local edges are ring steps
    load = m.intra_load(local, s.cfg["reduce_root"], ch.ring_factor, ch.nic_factor) if s.N > 1 else {}
    if load:
        worst = max(load, key=lambda res: load[res] / m.bw[res])
        ch.intra_one = load[worst] / m.bw[worst]
        ch.agg["intra " + ":".join(str(x) for x in worst)] = ch.intra_one
    if local == "flat-ring":
        ch.net_one = max(ch.net_one, ch.intra_one)  # local ring edges are ring steps
        ch.intra_phases = 0
    else:
        ch.intra_phases = 2 if load else 0
    if strategy == "root":
        ch.alpha += 2 * s.ilat
    elif strategy == "scatter":
        ch.alpha += 2 * (s.w - 1) * s.ilat
    elif strategy == "flat" and s.transport == "pushpull" and m.device == "gpu":
        ch.alpha += 2 * s.ilat


def _charge_worker_cpu_and_codec(s: _Setting, ch: _Charges) -> None:
    """Worker-side summation (gloo on CPU workers; local reductions on CPU) and the
    codec's encode/decode work."""
    w, cpu, codec = s.w, s.cpu, s.codec
    if s.cluster.machine.device == "cpu":
        if s.strategy == "root":
            ch.worker_sum += w - 1
        elif s.strategy == "scatter":
            ch.worker_sum += (w - 1) / w
        if ch.worker_sum and cpu < math.inf:
            ch.agg["worker CPU"] = ch.worker_sum / cpu
    if s.f > 0.0:
        ch.codec_one = (ch.codec_enc * 8 / (codec.encode_gbps * 1e9)
                        + ch.codec_dec * 8 / (codec.decode_gbps * 1e9))
        if ch.codec_one:
            ch.agg["codec"] = ch.codec_one
    else:
        ch.codec_one = 0.0
    ch.sum_one = ch.agg.get("worker CPU", 0.0)


class _CodecCalls(NamedTuple):
    """A codec's cost on a worker beyond its bytes: ``call`` seconds for encoding and
    decoding any chunk of at least ``least`` bytes (smaller ones travel as they are), and
    ``per_byte`` its seconds per gradient byte (so a chunk holds the worker's CPU for
    ``call + bytes * per_byte``)."""

    call: float
    least: int
    per_byte: float


def _schedule(plan: ChunkPlan, fwd: float, bwd: float, c: float, overhead: float,
              alpha: float, d: float, codec: "_CodecCalls") -> tuple[float, float]:
    """All-reduce: the max-plus recurrence over chunks, one collective at a time per
    stream (the plan's): (last finish, first start). ``codec``: what encoding a chunk
    costs the worker beyond its bytes."""
    sizes, ready, on = plan.sizes, plan.ready, plan.streams
    stream_free = [0.0] * (max(on, default=0) + 1)
    busy_until = 0.0
    last = 0.0
    first_start = math.inf
    for j, b in enumerate(sizes):
        t_ready = fwd + bwd * ready[j]
        sidx = on[j]
        start = t_ready if t_ready > stream_free[sidx] else stream_free[sidx]
        call = codec.call if b >= codec.least else 0.0
        occ = max(b * c, overhead + call + b * codec.per_byte)
        busy_until = (start if start > busy_until else busy_until) + occ
        fin = start + alpha + b * d + call + overhead
        if busy_until > fin:
            fin = busy_until
        stream_free[sidx] = fin
        if fin > last:
            last = fin
        if start < first_start:
            first_start = start
    if not sizes:
        first_start = 0.0
    return last, first_start


def _shared_link(jobs: list[tuple[float, int, float]], free: float) -> list[float]:
    """Finish times of ``jobs`` (arrival, stream, seconds at the link's full rate) on one
    link direction of a Summation Service, which it frees at ``free``: the streams with a
    job in share the link evenly (each stream is its own TCP connection) and each stream
    serves its jobs in order (a gloo pair sends and receives in order)."""
    queues: dict[int, list[int]] = {}
    for i, (_, st, _) in enumerate(jobs):
        queues.setdefault(st, []).append(i)
    if len(queues) == 1:  # one stream: a FIFO
        out = []
        for a, _, w in jobs:
            free = (a if a > free else free) + w
            out.append(free)
        return out
    heads = {st: 0 for st in queues}
    left = [w for _, _, w in jobs]
    out = [0.0] * len(jobs)
    t = free
    while heads:
        front = [queues[st][h] for st, h in heads.items()]
        active = [i for i in front if jobs[i][0] <= t]
        if not active:
            t = min(jobs[i][0] for i in front)
            continue
        m = len(active)
        least = min(left[i] for i in active)
        arrival = min((jobs[i][0] for i in front if jobs[i][0] > t), default=math.inf)
        if t + least * m <= arrival:  # the shortest active job completes first
            t += least * m
            for i in active:
                if left[i] == least:
                    left[i] = 0.0
                    out[i] = t
                    st = jobs[i][1]
                    heads[st] += 1
                    if heads[st] == len(queues[st]):
                        del heads[st]
                else:
                    left[i] -= least
        else:  # a job arrives on an idle stream first
            share = (arrival - t) / m
            for i in active:
                left[i] -= share
            t = arrival
    return out


def _schedule_pushpull(plan: ChunkPlan, fwd: float, bwd: float, streams: int, depth: int,
                       c: float, overhead: float, alpha: float, d: float, lat: float,
                       cost: list[float], add: list[float], edge: float,
                       codec: "_CodecCalls") -> tuple[float, float]:
    """Push/pull as the runtime runs it: (last finish, first start).

    A stream (the plan's) sends its chunks in plan order and keeps ``depth`` of them on
    their way out (a chunk enters when the push of the chunk ``depth`` places before it on
    its stream is done) and up to ``8 * depth`` in flight in all. A chunk's Summation
    Service (the plan's owner, ``plan.owners[j]``) is store-and-forward: it can send the
    sum back only once every part is in. Each owner's link takes ``cost[o]`` seconds per
    chunk byte each way (all its remote parts). The chunks sent together (``streams *
    depth`` consecutive chunks, a send window) that go to the same owner share its link
    (:func:`_shared_link`): evenly across streams, in order within a stream, so a chunk's
    pull can overlap the push of the next chunk on its stream; across windows the link is
    a FIFO. The cluster-wide bottleneck (``c``, the fluid steady state) and one chunk
    alone (``alpha + b*d``) are lower bounds on every finish. ``edge``: per chunk byte
    before the push and after the pull (intra-machine stages, codec)."""
    sizes, ready, on, owners = plan.sizes, plan.ready, plan.streams, plan.owners
    n_chunks = len(sizes)
    if not n_chunks:
        return 0.0, 0.0
    window = max(1, streams) * depth
    tail = 8 * depth
    sent: list[list[int]] = [[] for _ in range(max(on) + 1)]  # chunks so far, per stream
    nown = len(cost)
    in_free = [0.0] * nown
    out_free = [0.0] * nown
    push_done = [0.0] * n_chunks
    finish = [0.0] * n_chunks
    start = [0.0] * n_chunks
    busy_until = 0.0
    last = 0.0
    for g0 in range(0, n_chunks, window):
        g1 = min(g0 + window, n_chunks)
        group: dict[int, list[int]] = {}  # owner -> its chunks in this window
        for j in range(g0, g1):
            b = sizes[j]
            t = fwd + bwd * ready[j]
            mine = sent[on[j]]
            pos = len(mine)
            if pos:
                x = start[mine[-1]]
                if x > t:
                    t = x
                if pos >= depth:
                    x = push_done[mine[pos - depth]]
                    if x > t:
                        t = x
                    if pos >= tail:
                        x = finish[mine[pos - tail]]
                        if x > t:
                            t = x
            mine.append(j)
            start[j] = t
            call = codec.call if b >= codec.least else 0.0
            occ = max(b * c, overhead + call + b * codec.per_byte)
            busy_until = (t if t > busy_until else busy_until) + occ
            alone = t + alpha + b * d + call + overhead
            finish[j] = busy_until if busy_until > alone else alone  # the lower bounds
            group.setdefault(owners[j], []).append(j)
        for o, js in group.items():
            w = cost[o]
            if len(js) == 1:  # alone on the owner's link in this window
                j = js[0]
                p = max(start[j] + lat + sizes[j] * edge, in_free[o]) + sizes[j] * w
                q = max(p + sizes[j] * add[o], out_free[o]) + sizes[j] * w
                in_free[o], out_free[o] = p, q
                pushed, pulled = [p], [q]
            else:
                pushed = _shared_link([(start[j] + lat + sizes[j] * edge, on[j], sizes[j] * w)
                                       for j in js], in_free[o])
                in_free[o] = max(pushed)
                pulled = _shared_link([(p + sizes[j] * add[o], on[j], sizes[j] * w)
                                       for j, p in zip(js, pushed)], out_free[o])
                out_free[o] = max(pulled)
            for j, p, q in zip(js, pushed, pulled):
                push_done[j] = p
                fin = q + lat + sizes[j] * edge
                if finish[j] > fin:
                    fin = finish[j]
                finish[j] = fin
                if fin > last:
                    last = fin
    return last, start[0]


def _estimate(job: Job, s: _Setting, ch: _Charges) -> IterationEstimate:
    """Schedule the chunks and sum up the iteration."""
    agg, plan, total = ch.agg, s.plan, s.total
    sizes = plan.sizes
    c = max(agg.values(), default=0.0)
    bottleneck = max(agg, key=agg.get) if agg else "none"
    d = ch.net_one + ch.intra_phases * ch.intra_one + ch.codec_one + ch.sum_one
    overhead = s.cluster.chunk_overhead_us * 1e-6
    codec = _CodecCalls(s.cluster.codec_call_us * 1e-6 if s.f > 0 else 0.0,
                        int(s.cfg["compress_min_bytes"]), agg.get("codec", 0.0))
    bwd = job.compute_s * job.backward_fraction
    fwd = job.compute_s - bwd
    if plan.owners:
        edge = ch.intra_phases / 2 * ch.intra_one + ch.codec_one / 2
        last, first_start = _schedule_pushpull(
            plan, fwd, bwd, s.S, s.cluster.pipeline_depth, c, overhead, ch.alpha, d, s.lat,
            ch.owner_cost, ch.owner_sum, edge, codec)
    else:
        last, first_start = _schedule(plan, fwd, bwd, c, overhead, ch.alpha, d, codec)

    step = max(job.compute_s, last) + s.cluster.iteration_overhead_us * 1e-6
    exposed = step - job.compute_s
    if exposed <= 0:
        bottleneck = "compute"
    elif sizes and len(sizes) * overhead > total * c:
        bottleneck = "chunk overhead"
    breakdown = {
        "forward_s": fwd,
        "backward_s": bwd,
        "network_s": total * max(agg.get("worker NIC", 0.0), agg.get("server NIC", 0.0)),
        "intra_s": total * max((v for kk, v in agg.items() if kk.startswith("intra")), default=0.0),
        "summation_s": total * max(agg.get("summation CPU", 0.0), agg.get("server CPU", 0.0),
                                   agg.get("worker CPU", 0.0)),
        "codec_s": total * agg.get("codec", 0.0),
        "bottleneck_s": total * c,
        "overhead_s": len(sizes) * overhead,
        "latency_per_chunk_s": ch.alpha,
        "chunk_alone_per_byte_s": d,
        "tail_s": (last - (fwd + bwd * plan.ready[-1])) if sizes else 0.0,
    }
    return IterationEstimate(
        step_s=step,
        compute_s=job.compute_s,
        comm_s=last - first_start if sizes else 0.0,
        exposed_comm_s=exposed,
        throughput=job.batch_per_worker * s.N / step if step > 0 else math.inf,
        nic_bytes={"worker": total * ch.nic_factor, "server": total * ch.server_factor},
        bottleneck=bottleneck,
        chunks=len(sizes),
        breakdown=breakdown,
        config=s.cfg,
    )
