"""The partition plan: which gradient bytes travel together, on which stream, to which
Summation Service.

A pure, deterministic function of (gradient sizes in ready order, configuration, roles):
every rank computes the same plan, so only the configuration crosses the wire. It is also
the simulator's plan (:mod:`autotune.sim.job`): the chunks it predicts are these.

* **Flat layout.** The gradients of one dtype lie back to back, in ready order, in one flat
  buffer per dtype (:func:`flat_layout`). A chunk is a contiguous range of one such buffer.
* **Packing and splitting** (AIACC-Training §V-B, PHub §3.2.3; :func:`cut`). Walking the
  gradients in ready order, small ones are packed into a chunk until it holds
  ``chunk_bytes``; a large one fills the current chunk and continues in the next ones. A
  dtype change closes the chunk. So every chunk :func:`cut` gives but the last of each
  dtype holds exactly ``chunk_bytes`` (before coalescing).
* **Coalescing** (:func:`coalesce`, under a lossless flat all-reduce: :func:`coalesces`).
  The whole chunks of one gradient become ready at the same moment, so sending them one
  message each buys no overlap; it only costs a gloo all-reduce's fixed price (its sends,
  receives and wake-ups: 76-104 system calls per chunk and rank, measured) per
  ``chunk_bytes``. They go as at most ``streams`` messages instead, one contiguous run of
  whole chunks per stream. So
  ``chunk_bytes`` keeps its meaning where it buys overlap (packing small gradients, the
  piece of a large one that shares a chunk with the next) and stops costing where it
  does not. Not under ``pushpull`` or intra ``root``/``scatter``: there a chunk's stages
  (push, sum, pull; reduce, all-reduce, broadcast) pipeline chunk by chunk, which one
  large message would undo; nor under any ``compression`` but ``none``, whose codecs
  encode chunk by chunk. A message may so exceed ``chunk_bytes``, but never
  ``MAX_CHUNK_BYTES`` (64 MiB, the largest chunk a configuration may ask for), so no
  single operation, and no wait bounded by the runtime's ``timeout``, grows beyond what a
  configuration could already ask for.
* **Pushed from the gradient** (:func:`pushes_from_grad`, :func:`shared_parts`). Under a
  lossless push/pull among all workers, a chunk that holds one gradient alone is pushed
  straight from that gradient: a worker only reads what it pushes and pulls the sum into
  a second buffer, so nothing writes into ``.grad`` before the round completes. Only the
  parts of gradients that share a chunk are copied into the flat buffer.
* **Streams** (:func:`stream_of`). Chunk ``i`` goes to stream ``i % streams``.
* **Summation Service owners** (``transport=pushpull``; BytePS §4.1; :func:`owner_weights`,
  :func:`assign_owners`). With ``n`` worker machines and ``k`` servers, each server sums
  ``2(n-1)/(n^2+kn-2k)`` of the bytes and each worker machine's colocated Summation
  Service ``(n-k)/(n^2+kn-2k)``. Outside ``1 <= k < n`` it falls back as the paper says:
  ``k = 0`` all-reduce-like (machines share equally), ``k >= n`` non-colocated PS (servers
  share equally). Chunks are given, in order, to the owner that would finish its share
  soonest (least ``(load + bytes) / weight``), so the bytes per owner follow the weights,
  not the chunk counts.

Nothing here imports torch.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence

from autotune.runtime.config import MAX_CHUNK_BYTES, Intra, Transport

DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1,
}

Size = tuple[int, str]


@dataclass(frozen=True)
class Chunk:
    """One unit of communication: elements ``[offset, offset + numel)`` of the flat buffer
    of ``dtype``; ``tensors`` are the (ready-order) indices of the gradients it touches;
    ``owner`` is the rank of its Summation Service (``None`` under ``allreduce``)."""

    index: int
    dtype: str
    offset: int
    numel: int
    tensors: tuple[int, ...]
    stream: int
    owner: int | None = None

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


def normalize_sizes(sizes: Sequence[int | Size]) -> list[Size]:
    """``sizes`` as ``(numel, dtype)`` pairs; a bare int means float32."""
    out: list[Size] = []
    for i, s in enumerate(sizes):
        numel, dtype = (s, "float32") if isinstance(s, int) else (int(s[0]), str(s[1]))
        if numel < 0:
            raise ValueError(f"gradient {i} has negative size {numel}")
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"gradient {i} has unsupported dtype {dtype!r}")
        out.append((numel, dtype))
    return out


def flat_layout(sizes: Sequence[int | Size]) -> tuple[list[int], dict[str, int]]:
    """Offset of each gradient in the flat buffer of its dtype, and each buffer's length."""
    totals: dict[str, int] = {}
    offsets: list[int] = []
    for numel, dtype in normalize_sizes(sizes):
        offsets.append(totals.get(dtype, 0))
        totals[dtype] = totals.get(dtype, 0) + numel
    return offsets, totals


def summation_shares(n: int, k: int) -> tuple[float, float]:
    """(share of one server, share of one worker machine's Summation Service) of the bytes,
    for ``n`` worker machines and ``k`` servers (BytePS Eq. 1 and 2 with its fallbacks)."""
    if n < 1 or k < 0:
        raise ValueError(f"need n >= 1 worker machines and k >= 0 servers, got n={n}, k={k}")
    if k == 0:
        return 0.0, 1.0 / n
    if k >= n:
        return 1.0 / k, 0.0
    denom = n * n + k * n - 2 * k
    return 2 * (n - 1) / denom, (n - k) / denom


def owner_weights(n: int, k: int) -> list[float]:
    """The Summation Services' shares of the bytes, in owner order: ``k`` servers, then the
    ``n`` worker machines' colocated services (:func:`summation_shares`; may be 0)."""
    s_share, m_share = summation_shares(n, k)
    return [s_share] * k + [m_share] * n


def summation_owners(config: Mapping[str, Any], info: Any) -> list[tuple[int, float]]:
    """The Summation Services a ``pushpull`` configuration uses, as (rank, share): the
    first ``servers`` server ranks, then each worker machine's host (shares may be 0)."""
    k = int(config.get("servers", 0))
    servers = list(info.servers)
    if k > len(servers):
        raise ValueError(f"config uses {k} servers, the job launched {len(servers)}")
    hosts = list(info.summation_hosts)
    return list(zip(servers[:k] + hosts, owner_weights(len(hosts), k)))


class Span(NamedTuple):
    """A chunk's extent before it has a stream and an owner: elements ``[offset, offset +
    numel)`` of the flat buffer of ``dtype``, touching gradients ``tensors`` (ready order)."""

    dtype: str
    offset: int
    numel: int
    tensors: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


def cut(sizes: Sequence[int | Size], chunk_bytes: int) -> list[Span]:
    """The chunks' extents for gradients of ``sizes`` (ready order), in plan order: small
    gradients packed up to ``chunk_bytes``, large ones split, a dtype change closing the
    chunk; zero-sized gradients are in no chunk. A chunk is ready when its last tensor is."""
    norm = normalize_sizes(sizes)
    offsets, _ = flat_layout(norm)
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive: {chunk_bytes}")
    spans: list[Span] = []
    cur: list[Any] | None = None  # dtype, offset, numel, tensors of the open chunk
    for i, (numel, dtype) in enumerate(norm):
        if numel == 0:
            continue
        cap = max(1, chunk_bytes // DTYPE_BYTES[dtype])
        if cur is not None and cur[0] != dtype:
            spans.append(Span(cur[0], cur[1], cur[2], tuple(cur[3])))
            cur = None
        off, left = offsets[i], numel
        while left:
            if cur is None:
                if left >= cap:  # whole chunks of this gradient alone
                    full, only = left // cap, (i,)
                    spans.extend(Span(dtype, off + q * cap, cap, only) for q in range(full))
                    off += full * cap
                    left -= full * cap
                    continue
                cur = [dtype, off, 0, []]
            take = min(left, cap - cur[2])
            cur[2] += take
            cur[3].append(i)
            off += take
            left -= take
            if cur[2] == cap:
                spans.append(Span(cur[0], cur[1], cur[2], tuple(cur[3])))
                cur = None
    if cur is not None:
        spans.append(Span(cur[0], cur[1], cur[2], tuple(cur[3])))
    return spans


def _lossless_flat(config: Mapping[str, Any], transport: str) -> bool:
    """Whether ``config`` is a lossless ``transport`` among all workers (``intra=flat``,
    ``compression=none``)."""
    return (config.get("transport", Transport.ALLREDUCE) == transport
            and config.get("intra", Intra.FLAT) == Intra.FLAT
            and config.get("compression", "none") == "none")


def coalesces(config: Mapping[str, Any]) -> bool:
    """Whether ``config``'s plan coalesces (see the module docstring): a lossless all-reduce
    among all workers (``transport=allreduce``, ``intra=flat``, ``compression=none``)."""
    return _lossless_flat(config, Transport.ALLREDUCE)


def coalesce(spans: Sequence[Span], streams: int,
             max_bytes: int = MAX_CHUNK_BYTES) -> list[Span]:
    """``spans`` (from :func:`cut`) with each run of chunks that hold one gradient alone
    merged into contiguous messages of near-equal chunk counts (the first ones one chunk
    longer): ``streams`` of them, or, where a message would exceed ``max_bytes``, the least
    multiple of ``streams`` that fits; never more than the run has chunks. Such a run
    becomes ready at once, when its gradient is in; chunks that pack several gradients are
    left as they are."""
    if streams < 1 or max_bytes < 1:
        raise ValueError(f"streams and max_bytes must be positive: {streams}, {max_bytes}")
    out: list[Span] = []
    i = 0
    while i < len(spans):
        j = i + 1
        while (j < len(spans) and len(spans[i].tensors) == 1
               and spans[j].tensors == spans[i].tensors):
            j += 1
        run = spans[i:j]
        per = max(1, max_bytes // max(sp.nbytes for sp in run))  # chunks a message may hold
        parts = streams * -(-len(run) // (per * streams))  # the same number on every stream
        for start, count in shard_bounds(len(run), min(parts, len(run))):
            first, last = spans[i + start], spans[i + start + count - 1]
            out.append(Span(first.dtype, first.offset, last.offset + last.numel - first.offset,
                            first.tensors))
        i = j
    return out


def stream_of(index: int, streams: int) -> int:
    """The stream of chunk ``index`` (round robin)."""
    return index % streams


def assign_owners(nbytes: Sequence[int], weights: Sequence[float]) -> list[int]:
    """For chunks of ``nbytes`` (plan order), the index into ``weights`` of each one's
    Summation Service: the owner that would finish its share soonest, i.e. least
    ``(load + bytes) / weight`` (owners of equal weight: least load), ties to the lowest
    index. Owners of weight 0 own nothing. One heap per distinct weight (there are two:
    servers and machines), so thousands of owners cost no more than two."""
    heaps: dict[float, list[tuple[int, int]]] = {}
    for j, w in enumerate(weights):
        if w > 0:
            heaps.setdefault(float(w), []).append((0, j))
    if not heaps:
        raise ValueError("no Summation Service has a positive share")
    classes = list(heaps.items())
    for _, h in classes:
        heapq.heapify(h)
    out: list[int] = []
    for b in nbytes:
        best_key: tuple[float, int] | None = None
        best_heap: list[tuple[int, int]] = classes[0][1]
        for w, h in classes:
            load, j = h[0]
            key = ((load + b) / w, j)
            if best_key is None or key < best_key:
                best_key, best_heap = key, h
        load, j = best_heap[0]
        heapq.heapreplace(best_heap, (load + b, j))
        out.append(j)
    return out


def make_plan(sizes: Sequence[int | Size], config: Mapping[str, Any], info: Any) -> list[Chunk]:
    """The chunks for gradients of ``sizes`` (ready order) under ``config``: :func:`cut`,
    :func:`coalesce` where :func:`coalesces`, :func:`stream_of` and, under ``pushpull``,
    :func:`assign_owners` over :func:`summation_owners`.

    ``info`` is a :class:`~autotune.runtime.control.world.WorldInfo` (only ``servers`` and
    ``summation_hosts`` are read, and only for ``pushpull``)."""
    chunk_bytes = int(config["chunk_bytes"])
    streams = int(config["streams"])
    if chunk_bytes < 1 or streams < 1:
        raise ValueError(f"chunk_bytes and streams must be positive: {chunk_bytes}, {streams}")
    spans = cut(sizes, chunk_bytes)
    if coalesces(config):
        spans = coalesce(spans, streams)
    owners: list[int | None] = [None] * len(spans)
    if config.get("transport") == Transport.PUSHPULL:
        cands = summation_owners(config, info)
        picks = assign_owners([sp.nbytes for sp in spans], [w for _, w in cands])
        owners = [cands[j][0] for j in picks]
    return [
        Chunk(index=c, dtype=sp.dtype, offset=sp.offset, numel=sp.numel, tensors=sp.tensors,
              stream=stream_of(c, streams), owner=owners[c])
        for c, sp in enumerate(spans)
    ]


def bytes_per_owner(plan: Sequence[Chunk]) -> dict[int, int]:
    """Bytes each Summation Service sums under ``plan`` (pushpull plans)."""
    out: dict[int, int] = {}
    for c in plan:
        if c.owner is not None:
            out[c.owner] = out.get(c.owner, 0) + c.nbytes
    return out


def pushes_from_grad(config: Mapping[str, Any]) -> bool:
    """Whether a chunk that holds one gradient alone is pushed straight from that gradient,
    with no copy into the flat buffer: under a lossless push/pull among all workers
    (``transport=pushpull``, ``intra=flat``, ``compression=none``). There a worker only
    reads what it pushes (the network, or the colocated Summation Service, takes it as it
    is) and the sum is pulled into the second buffer, so ``.grad`` is never written before
    the round completes, and a failed round leaves the gradients intact for a second ``wait()``.
    Not under ``allreduce`` nor intra ``root``/``scatter``, whose collectives reduce in
    place, nor with a codec, which encodes with error feedback."""
    return _lossless_flat(config, Transport.PUSHPULL)


def shared_parts(plan: Sequence[Chunk], sizes: Sequence[int | Size]
                 ) -> list[tuple[tuple[int, int], ...] | None]:
    """Per gradient (ready order), when some chunk of ``plan`` holds it alone: the
    ``(start, numel)`` element ranges of it that lie in chunks shared with other gradients,
    the only parts still copied into the flat buffer when its own chunks are pushed from
    the gradient (:func:`pushes_from_grad`). ``None`` for a gradient with no chunk of its
    own: it is copied whole."""
    norm = normalize_sizes(sizes)
    offsets, _ = flat_layout(norm)
    alone = [False] * len(norm)
    parts: list[list[tuple[int, int]]] = [[] for _ in norm]
    for c in plan:
        if len(c.tensors) == 1:
            alone[c.tensors[0]] = True
            continue
        for t in c.tensors:
            lo = max(c.offset, offsets[t])
            hi = min(c.offset + c.numel, offsets[t] + norm[t][0])
            if hi > lo:
                parts[t].append((lo - offsets[t], hi - lo))
    return [tuple(p) if a else None for a, p in zip(alone, parts)]


def shard_bounds(numel: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` near-equal (start, length) pieces of ``numel`` (for ``intra=scatter``);
    the first ``numel % parts`` pieces are one element longer."""
    base, extra = divmod(numel, parts)
    out, start = [], 0
    for j in range(parts):
        n = base + (1 if j < extra else 0)
        out.append((start, n))
        start += n
    return out


@dataclass(frozen=True)
class Unit:
    """What a Summation Service sums at once: shard ``shard`` of ``chunk`` (elements
    ``[start, start + numel)`` of the chunk), pushed by each rank of ``pushers``."""

    id: int
    chunk: Chunk
    shard: int
    start: int
    numel: int
    pushers: tuple[int, ...]


def shards_per_chunk(config: Mapping[str, Any], info: Any) -> int:
    """How many shards each chunk crosses machines in: the local workers under ``scatter``."""
    return int(info.workers_per_machine) if config["intra"] == Intra.SCATTER else 1


def pushers(config: Mapping[str, Any], info: Any, shard: int) -> tuple[int, ...]:
    """The ranks that push shard ``shard`` of a chunk to its Summation Service: every worker
    (``flat``), each machine's reduce root (``root``), or each machine's local worker
    ``shard`` (``scatter``)."""
    intra = config["intra"]
    if intra == Intra.FLAT:
        return tuple(info.workers)
    j = int(config["reduce_root"]) if intra == Intra.ROOT else shard
    return tuple(info.machine_workers(m)[j] for m in info.worker_machines)


def summation_units(plan: Sequence[Chunk], config: Mapping[str, Any], info: Any,
                    owner: int) -> list[Unit]:
    """The units rank ``owner`` sums under ``plan`` (plan order)."""
    parts = shards_per_chunk(config, info)
    out: list[Unit] = []
    for c in plan:
        if c.owner != owner:
            continue
        for shard, (start, numel) in enumerate(shard_bounds(c.numel, parts)):
            if numel == 0:  # a chunk smaller than the number of shards
                continue
            out.append(Unit(c.index * parts + shard, c, shard, start, numel,
                            pushers(config, info, shard)))
    return out
