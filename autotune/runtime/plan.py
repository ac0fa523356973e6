"""The partition plan: which gradient bytes travel together, on which stream, to which
Summation Service.

A pure, deterministic function of (gradient sizes in ready order, configuration, roles):
every rank computes the same plan, so only the configuration crosses the wire.

* **Flat layout.** The gradients of one dtype lie back to back, in ready order, in one flat
  buffer per dtype (:func:`flat_layout`). A chunk is a contiguous range of one such buffer.
* **Packing and splitting** (AIACC-Training §V-B, PHub §3.2.3). Walking the gradients in
  ready order, small ones are packed into a chunk until it holds ``chunk_bytes``; a large
  one fills the current chunk and continues in the next ones. A dtype change closes the
  chunk. So every chunk but the last of each dtype holds exactly ``chunk_bytes``.
* **Streams.** Chunk ``i`` goes to stream ``i % streams``.
* **Summation Service owners** (``transport=pushpull``; BytePS §4.1). With ``n`` worker
  machines and ``k`` servers, each server sums ``2(n-1)/(n^2+kn-2k)`` of the bytes and each
  worker machine's colocated Summation Service ``(n-k)/(n^2+kn-2k)``. Outside
  ``1 <= k < n`` it falls back as the paper says: ``k = 0`` all-reduce-like (machines share
  equally), ``k >= n`` non-colocated PS (servers share equally). Chunks are given, in order,
  to the owner that would finish its share soonest (least ``(load + bytes) / weight``), so
  the bytes per owner follow the weights, not the chunk counts.

Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .config import Intra, Transport

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


def summation_owners(config: Mapping[str, Any], info: Any) -> list[tuple[int, float]]:
    """The Summation Services a ``pushpull`` configuration uses, as (rank, share): the
    first ``servers`` server ranks, then each worker machine's host (shares may be 0)."""
    k = int(config.get("servers", 0))
    servers = list(info.servers)
    if k > len(servers):
        raise ValueError(f"config uses {k} servers, the job launched {len(servers)}")
    hosts = list(info.summation_hosts)
    s_share, m_share = summation_shares(len(hosts), k)
    return [(r, s_share) for r in servers[:k]] + [(r, m_share) for r in hosts]


def make_plan(sizes: Sequence[int | Size], config: Mapping[str, Any], info: Any) -> list[Chunk]:
    """The chunks for gradients of ``sizes`` (ready order) under ``config``.

    ``info`` is a :class:`~autotune.runtime.world.WorldInfo` (only ``servers`` and
    ``summation_hosts`` are read, and only for ``pushpull``)."""
    norm = normalize_sizes(sizes)
    offsets, _ = flat_layout(norm)
    chunk_bytes = int(config["chunk_bytes"])
    streams = int(config["streams"])
    if chunk_bytes < 1 or streams < 1:
        raise ValueError(f"chunk_bytes and streams must be positive: {chunk_bytes}, {streams}")

    spans: list[tuple[str, int, int, list[int]]] = []  # dtype, offset, numel, tensors
    cur: list[Any] | None = None
    for i, (numel, dtype) in enumerate(norm):
        if numel == 0:
            continue
        cap = max(1, chunk_bytes // DTYPE_BYTES[dtype])
        if cur is not None and cur[0] != dtype:
            spans.append(tuple(cur))  # type: ignore[arg-type]
            cur = None
        off, left = offsets[i], numel
        while left:
            if cur is None:
                cur = [dtype, off, 0, []]
            take = min(left, cap - cur[2])
            cur[2] += take
            cur[3].append(i)
            off += take
            left -= take
            if cur[2] == cap:
                spans.append(tuple(cur))  # type: ignore[arg-type]
                cur = None
    if cur is not None:
        spans.append(tuple(cur))  # type: ignore[arg-type]

    owners: list[int | None] = [None] * len(spans)
    if config.get("transport") == Transport.PUSHPULL:
        cands = [(r, w) for r, w in summation_owners(config, info) if w > 0]
        load = [0] * len(cands)
        for c, (dtype, _, numel, _) in enumerate(spans):
            nbytes = numel * DTYPE_BYTES[dtype]
            best = min(range(len(cands)), key=lambda j: ((load[j] + nbytes) / cands[j][1], j))
            load[best] += nbytes
            owners[c] = cands[best][0]

    return [
        Chunk(index=c, dtype=dtype, offset=off, numel=numel, tensors=tuple(tensors),
              stream=c % streams, owner=owners[c])
        for c, (dtype, off, numel, tensors) in enumerate(spans)
    ]


def bytes_per_owner(plan: Sequence[Chunk]) -> dict[int, int]:
    """Bytes each Summation Service sums under ``plan`` (pushpull plans)."""
    out: dict[int, int] = {}
    for c in plan:
        if c.owner is not None:
            out[c.owner] = out.get(c.owner, 0) + c.nbytes
    return out


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
