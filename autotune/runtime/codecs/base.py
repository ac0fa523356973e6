"""The Codec interface: how a chunk of gradient is encoded into a payload of tensors.

A *payload* is a tuple of tensors (values, indices, scale, ...) and nothing else, so it
can cross the wire through ``torch.distributed``. For a chunk of ``n`` elements its
layout (dtypes and sizes of its tensors) is a pure function of ``n`` and the codec's
parameters, so every rank knows how big a payload is without asking: ``pack`` turns a
payload into ONE flat tensor of ``payload_numel(n)`` elements of ``wire_dtype`` (the
runtime sends, receives, all-gathers or all-reduces that buffer) and ``unpack`` takes it
apart again (the parts are views into the buffer).

``summable`` codecs (fp16, bf16, randomk with shared indices, PowerSGD with a shared
basis) produce packed buffers whose element-wise SUM is the packed encoding of the sum of
the chunks: they go through ``all_reduce`` (or a Summation Service that just adds
buffers). The others (topk, onebit) go through ``all_gather`` of packed buffers, then
every payload is decoded and the results summed; a Summation Service decodes, sums and
re-encodes. :func:`decode_sum` does the right thing for either kind.

Semantics shared by all codecs: ``decode(encode(x)) ~= x`` and, for summable codecs,
``decode(sum of packed payloads) ~= sum of chunks`` (NOT the average: the caller divides
by the number of workers). Decoded chunks are float32 on the payload's device. Codecs work
on CPU and CUDA tensors; anything random is drawn on the CPU from a generator seeded by
(seed, iteration, chunk id) so CPU servers and CUDA workers agree.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

import torch

Payload = tuple[torch.Tensor, ...]
"""The encoded form of one chunk: a codec-specific tuple of tensors (see ``fields``)."""

FieldSpec = tuple[torch.dtype, int]
"""(dtype, numel) of one payload tensor."""


@dataclass(frozen=True)
class Context:
    """Where a chunk is in the run: the same on every rank for the same chunk.

    ``iteration``: the training iteration (randomk draws new indices each one).
    ``chunk_id``: the chunk's index in the partition plan (every rank computes the same
    plan, so ids agree without communication).
    """

    iteration: int = 0
    chunk_id: int = 0


class Codec(ABC):
    """Encode a 1-D float chunk into a payload of tensors and back.

    Subclasses set ``name``, ``fields`` (names of the payload tensors, in payload
    order), ``summable``, ``lossless`` and implement :meth:`layout`, :meth:`encode` and
    :meth:`decode`. ``world_size`` is the number of workers whose payloads are summed;
    ``seed`` is shared by all ranks.
    """

    name: str = "?"
    fields: tuple[str, ...] = ()
    summable: bool = False
    lossless: bool = False

    def __init__(self, *, world_size: int = 1, seed: int = 0) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        self.world_size = int(world_size)
        self.seed = int(seed)

    # ------------------------------------------------------------ to implement
    @abstractmethod
    def layout(self, n: int) -> tuple[FieldSpec, ...]:
        """(dtype, numel) of each payload tensor for a chunk of ``n`` elements."""

    @abstractmethod
    def encode(self, x: torch.Tensor, ctx: Context = Context()) -> Payload:
        """Encode the 1-D float tensor ``x`` (any float dtype; computed in float32)."""

    @abstractmethod
    def decode(self, payload: Payload, n: int, ctx: Context = Context()) -> torch.Tensor:
        """The float32 chunk of ``n`` elements that ``payload`` stands for."""

    def after_sum(self, payload: Payload, n: int, ctx: Context = Context()) -> None:
        """Called on every worker with the SUMMED payload of a chunk, once per
        iteration, after aggregation. Stateful codecs (PowerSGD's warm-started basis)
        update their shared state here; the others ignore it."""

    def reset(self) -> None:
        """Forget any state kept between iterations."""

    def params(self) -> dict:
        """The codec's parameters (for describing it)."""
        return {}

    # ------------------------------------------------------------ wire format
    @property
    def wire_dtype(self) -> torch.dtype:
        """dtype of the packed buffer: the payload's own dtype when every field has the
        same one (so a summable payload can be all-reduced as is), else uint8 bytes."""
        dtypes = {d for d, _ in self.layout(1)}
        return dtypes.pop() if len(dtypes) == 1 else torch.uint8

    def payload_numel(self, n: int) -> int:
        """Number of ``wire_dtype`` elements of the packed payload of an n-element chunk."""
        return self.payload_nbytes(n) // _itemsize(self.wire_dtype)

    def payload_nbytes(self, n: int) -> int:
        """Bytes on the wire for one n-element chunk."""
        _check_n(n)
        return sum(_itemsize(d) * k for d, k in self.layout(n))

    def ratio(self, n: int) -> float:
        """Payload bytes / float32 chunk bytes."""
        return self.payload_nbytes(n) / (4 * n)

    def pack(self, payload: Payload) -> torch.Tensor:
        """One flat ``wire_dtype`` tensor holding every field of ``payload``."""
        wire = self.wire_dtype
        parts = [t.reshape(-1) for t in payload]
        if len(parts) != len(self.fields):
            raise ValueError(f"{self.name}: payload has {len(parts)} tensors, expected {len(self.fields)}")
        if wire != torch.uint8:
            return parts[0] if len(parts) == 1 else torch.cat(parts)
        # Widest fields first, so every field starts at an offset aligned to its itemsize.
        order = _pack_order([(p.dtype, p.numel()) for p in parts])
        return torch.cat([parts[i].contiguous().view(torch.uint8) for i in order])

    def unpack(self, buf: torch.Tensor, n: int) -> Payload:
        """Inverse of :meth:`pack` for an n-element chunk. Parts are views of ``buf``, except
        a field whose start in memory is not aligned to its itemsize (``buf`` a row of
        all-gathered payloads of an odd byte length), which is copied."""
        spec = self.layout(n)
        wire = self.wire_dtype
        if buf.dim() != 1 or buf.dtype != wire or buf.numel() != self.payload_numel(n):
            raise ValueError(
                f"{self.name}: packed payload for n={n} must be a 1-D {wire} tensor of "
                f"{self.payload_numel(n)} elements, got {tuple(buf.shape)} {buf.dtype}"
            )
        out: list[torch.Tensor | None] = [None] * len(spec)
        offset = 0
        if wire != torch.uint8:
            for i, (_, k) in enumerate(spec):
                out[i] = buf[offset:offset + k]
                offset += k
        else:
            for i in _pack_order(spec):
                dtype, k = spec[i]
                nbytes = k * _itemsize(dtype)
                part = buf[offset:offset + nbytes]
                if part.storage_offset() % _itemsize(dtype):
                    part = part.clone()
                out[i] = part.view(dtype)
                offset += nbytes
        return tuple(out)  # type: ignore[arg-type]

    def empty_packed(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """A receive buffer for one packed payload."""
        return torch.empty(self.payload_numel(n), dtype=self.wire_dtype, device=device)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


class IdentityCodec(Codec):
    """``none``: the chunk itself, float32. Lossless and summable."""

    name = "none"
    fields = ("values",)
    summable = True
    lossless = True

    def layout(self, n: int) -> tuple[FieldSpec, ...]:
        return ((torch.float32, n),)

    def encode(self, x: torch.Tensor, ctx: Context = Context()) -> Payload:
        return (_as_chunk(x).to(torch.float32),)

    def decode(self, payload: Payload, n: int, ctx: Context = Context()) -> torch.Tensor:
        return payload[0].to(torch.float32)


# ---------------------------------------------------------------------- helpers
def sum_packed(codec: Codec, buffers: Sequence[torch.Tensor]) -> torch.Tensor:
    """Element-wise sum of packed payloads of a summable codec (accumulated in float32,
    returned in ``wire_dtype``): what an all-reduce or a Summation Service computes."""
    if not codec.summable:
        raise ValueError(f"codec {codec.name!r} is not summable: decode each payload instead")
    if not buffers:
        raise ValueError("no payloads to sum")
    acc = buffers[0].to(torch.float32)
    for b in buffers[1:]:
        acc = acc + b.to(torch.float32)
    return acc.to(codec.wire_dtype)


def decode_aggregate(codec: Codec, packed: torch.Tensor, n: int,
                     ctx: Context = Context()) -> torch.Tensor:
    """The float32 chunk behind one aggregated packed payload (all-reduced by a summable
    codec, or pulled from a Summation Service), decoded; :meth:`Codec.after_sum` sees the
    payload (PowerSGD's basis). The one decoding step of an aggregate, for the runtime's
    Communication Service and DDP's hook alike."""
    payload = codec.unpack(packed, n)
    total = codec.decode(payload, n, ctx)
    codec.after_sum(payload, n, ctx)
    return total


def averaged_payloads(codec: Codec, wire: torch.Tensor, parts: int, n: int,
                      ctx: Context = Context()) -> torch.Tensor:
    """The float32 sum of an n-element chunk from what a lossy collective left in
    ``wire``: a summable codec's all-reduced packed payload (:func:`decode_aggregate`),
    else the ``parts`` payloads all-gathered back to back (:func:`decode_sum`)."""
    if codec.summable:
        return decode_aggregate(codec, wire, n, ctx)
    return decode_sum(codec, list(wire.view(parts, -1)), n, ctx)


def decode_sum(
    codec: Codec, buffers: Sequence[torch.Tensor], n: int, ctx: Context = Context()
) -> torch.Tensor:
    """The float32 sum of the chunks behind ``buffers`` (packed payloads of n-element
    chunks from every worker): summed then decoded for summable codecs, each decoded and
    summed otherwise. Does not call :meth:`Codec.after_sum`."""
    if codec.summable:
        return codec.decode(codec.unpack(sum_packed(codec, buffers), n), n, ctx)
    total = codec.decode(codec.unpack(buffers[0], n), n, ctx).clone()
    for b in buffers[1:]:
        total += codec.decode(codec.unpack(b, n), n, ctx)
    return total


def _as_chunk(x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or not x.is_floating_point():
        what = f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"a chunk is a 1-D float tensor, got {what}")
    if x.numel() == 0:
        raise ValueError("a chunk must not be empty")
    return x


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"chunk length must be a positive int, got {n!r}")


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _pack_order(spec: Sequence[FieldSpec]) -> list[int]:
    return sorted(range(len(spec)), key=lambda i: -_itemsize(spec[i][0]))
