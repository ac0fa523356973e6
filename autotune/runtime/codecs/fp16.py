"""Half-precision codecs (fp16, bf16), scaled so a sum of n workers cannot overflow.

Each worker sends ``x * s`` in half precision with ``s = 2**-ceil(log2(n))`` (a power of
two, so scaling is exact and relative precision is that of the half type), clamped to
``max_half / n``. Any sum of n such values, and every partial sum on the way, is then at
most ``max_half`` in magnitude: an all-reduce in half precision cannot produce inf. What
the clamp removes (only for ``|x| > max_half / (n s)``, i.e. beyond half range anyway) is
part of the encoding error, which error feedback carries to the next iteration.

The payload is one half tensor, summable: all-reduce the packed buffers and decode once.
"""

from __future__ import annotations

import math

import torch

from autotune.runtime.codecs.base import Codec, Context, FieldSpec, Payload, _as_chunk


class HalfCodec(Codec):
    """Scaled half-precision codec; see the module docstring."""

    fields = ("values",)
    summable = True
    half: torch.dtype = torch.float16

    def __init__(self, *, world_size: int = 1, seed: int = 0) -> None:
        super().__init__(world_size=world_size, seed=seed)
        self.scale = 2.0 ** -math.ceil(math.log2(self.world_size)) if self.world_size > 1 else 1.0
        self.bound = _half_floor(torch.finfo(self.half).max / self.world_size, self.half)

    def layout(self, n: int) -> tuple[FieldSpec, ...]:
        return ((self.half, n),)

    def encode(self, x: torch.Tensor, ctx: Context = Context()) -> Payload:
        x = _as_chunk(x).to(torch.float32)
        y = (x * self.scale).clamp_(-self.bound, self.bound)
        return (y.to(self.half),)

    def decode(self, payload: Payload, n: int, ctx: Context = Context()) -> torch.Tensor:
        return payload[0].to(torch.float32) / self.scale


class FP16Codec(HalfCodec):
    name = "fp16"
    half = torch.float16


class BF16Codec(HalfCodec):
    name = "bf16"
    half = torch.bfloat16


def _half_floor(value: float, half: torch.dtype) -> float:
    """The largest value of the (positive, normal) half type ``half`` that is <= value."""
    finfo = torch.finfo(half)
    ulp = 2.0 ** math.floor(math.log2(value)) * finfo.eps
    out = math.floor(value / ulp) * ulp
    assert float(torch.tensor(out, dtype=half)) == out
    return out
