"""A configuration prepared for one rank: :class:`Setup`, everything the configuration
fixes for this rank (plan, per-stream chunks, units it sums, codec, pipelining depths),
computed once when it is applied; and the pipelining depths themselves.

A :class:`Setup` is immutable and built away from the active one (``Runtime.sync`` builds
it, votes, and only then swaps it in), so a configuration that cannot be applied leaves
the previous one untouched. (Its codec object may hold state across iterations, e.g.
PowerSGD's bases; that state starts afresh with every Setup.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from autotune.runtime.config import ConfigError, Intra, RuntimeConfig, Transport

from autotune.runtime.data.compression import Compression
from autotune.runtime.data.plan import (Chunk, Size, Unit, flat_layout, make_plan, pushes_from_grad,
                   shards_per_chunk, shared_parts, summation_units)
from autotune.runtime.control.world import WorldInfo

# Pipelining (AIACC-Training, BytePS): a stream keeps SEND_DEPTH chunks on their way
# out, and up to TAIL_DEPTH chunks in flight in all, counting those whose push is done
# and whose sum is not yet pulled (``pushpull``). A Summation Service sums a unit once
# every part is in, so a chunk's pull cannot start before its push ends; letting later
# pushes go out meanwhile keeps both directions of every NIC busy (benchmarks/notes/2026-11-23.md,
# "Goodput vs the optimum"). A Summation Service stream keeps SUM_DEPTH units posted, within
# SUM_INFLIGHT_BYTES of receive buffers.
SEND_DEPTH = 4
TAIL_DEPTH = 32
SUM_DEPTH = 4
SUM_INFLIGHT_BYTES = 64 * 1024 * 1024


def set_depths(send: int | None = None, tail: int | None = None, sum_: int | None = None,
               inflight_bytes: int | None = None) -> None:
    """Change the pipelining depths of this process (for diagnosis, e.g. the benchmarks'
    ``--depth``); they are read when a configuration is applied. ``None`` keeps a value."""
    global SEND_DEPTH, TAIL_DEPTH, SUM_DEPTH, SUM_INFLIGHT_BYTES
    for name, v in (("send", send), ("tail", tail), ("sum", sum_),
                    ("inflight_bytes", inflight_bytes)):
        if v is not None and v < 1:
            raise ValueError(f"depth {name} must be >= 1, got {v}")
    SEND_DEPTH = SEND_DEPTH if send is None else int(send)
    TAIL_DEPTH = TAIL_DEPTH if tail is None else int(tail)
    SUM_DEPTH = SUM_DEPTH if sum_ is None else int(sum_)
    SUM_INFLIGHT_BYTES = SUM_INFLIGHT_BYTES if inflight_bytes is None else int(inflight_bytes)


@dataclass(frozen=True)
class Setup:
    config: RuntimeConfig
    info: WorldInfo
    sizes: tuple[Size, ...]
    offsets: tuple[int, ...]
    totals: tuple[tuple[str, int], ...]
    plan: tuple[Chunk, ...]
    stream_chunks: tuple[tuple[Chunk, ...], ...]  # per stream, plan order
    tensor_chunks: tuple[tuple[int, ...], ...]   # per gradient (layout position)
    shards: int
    units: tuple[tuple[Unit, ...], ...]          # units this rank sums, per stream
    send_depth: int                              # chunks a stream keeps on their way out
    tail_depth: int                              # chunks a stream keeps in flight in all
    sum_depth: int                               # units a Summation Service stream posts
    compression: Compression                     # the codec (built once per configuration)
    # per gradient, when its own chunks are pushed straight from ``.grad``
    # (:func:`~autotune.runtime.data.plan.pushes_from_grad`): the (start, numel) parts still
    # copied into ``inp``; None: copied whole (always, unless pushed from the gradient)
    from_grad: tuple[tuple[tuple[int, int], ...] | None, ...]

    @property
    def streams(self) -> int:
        return self.config.streams

    @property
    def pushpull(self) -> bool:
        return self.config.transport == Transport.PUSHPULL

    @property
    def needs_out(self) -> bool:
        """Whether results land in a second flat buffer (push/pull: pull into ``out``)."""
        return self.pushpull

    @property
    def owns_units(self) -> bool:
        return any(self.units)


def check_supported(config: RuntimeConfig, info: WorldInfo) -> Compression:
    """Raise :class:`ConfigError` for what this runtime cannot do (same on every rank);
    returns the configuration's :class:`Compression` (its codec, built here)."""
    if config.intra != Intra.FLAT and not info.uniform:
        raise ConfigError(
            f"intra={config.intra.value!r} needs the same number of workers on every machine"
        )
    if config.transport == Transport.PUSHPULL and config.servers > len(info.servers):
        raise ConfigError(f"servers={config.servers} but the job has {len(info.servers)}")
    try:
        return Compression.of(config, info)
    except ValueError as e:
        raise ConfigError(f"compression={config.compression!r}: {e}") from None


def build_setup(config: Mapping[str, Any], sizes: list[Size], info: WorldInfo) -> Setup:
    """The :class:`Setup` of ``config`` (a :class:`RuntimeConfig`, or a mapping made one)
    for gradients of ``sizes`` (ready order)."""
    config = RuntimeConfig.of(config)
    compression = check_supported(config, info)
    offsets, totals = flat_layout(sizes)
    plan = make_plan(sizes, config, info)
    streams = config.streams
    per_stream: list[list[Chunk]] = [[] for _ in range(streams)]
    for c in plan:
        per_stream[c.stream].append(c)
    tensor_chunks: list[list[int]] = [[] for _ in sizes]
    for c in plan:
        for t in dict.fromkeys(c.tensors):
            tensor_chunks[t].append(c.index)
    units: list[list[Unit]] = [[] for _ in range(streams)]
    if config.transport == Transport.PUSHPULL:
        for u in summation_units(plan, config, info, info.rank):
            units[u.chunk.stream].append(u)
    shards = shards_per_chunk(config, info)
    nparts = max(1, info.n_machines if config.intra != Intra.FLAT else len(info.workers))
    unit_bytes = max(1, config.chunk_bytes // shards)
    sum_depth = max(1, min(SUM_DEPTH, SUM_INFLIGHT_BYTES // (unit_bytes * (nparts + 1))))
    return Setup(
        config=config, info=info, sizes=tuple(sizes), offsets=tuple(offsets),
        totals=tuple(sorted(totals.items())), plan=tuple(plan),
        stream_chunks=tuple(tuple(s) for s in per_stream),
        tensor_chunks=tuple(tuple(t) for t in tensor_chunks), shards=shards,
        units=tuple(tuple(u) for u in units), send_depth=SEND_DEPTH,
        tail_depth=TAIL_DEPTH, sum_depth=sum_depth, compression=compression,
        from_grad=(tuple(shared_parts(plan, sizes)) if pushes_from_grad(config)
                   else (None,) * len(sizes)),
    )
