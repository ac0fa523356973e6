"""One-bit quantisation: the sign of every element and one scale per chunk.

Encode sends ``scale = mean(|x|)`` (float32, the L1 norm over n as in BytePS's onebit)
and one bit per element (1 for ``x >= 0``), packed eight to a byte, most significant bit
first. Decode gives ``scale * sign``. Wire ratio ~ 1/32 (+4 bytes). Not summable: each
worker has its own scale, so payloads are all-gathered, decoded and summed.
"""

from __future__ import annotations

import torch

from autotune.runtime.codecs.base import Codec, Context, FieldSpec, Payload, _as_chunk

_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)


class OneBitCodec(Codec):
    """Sign + per-chunk scale; see the module docstring."""

    name = "onebit"
    fields = ("scale", "bits")
    summable = False

    def layout(self, n: int) -> tuple[FieldSpec, ...]:
        return ((torch.float32, 1), (torch.uint8, (n + 7) // 8))

    def encode(self, x: torch.Tensor, ctx: Context = Context()) -> Payload:
        x = _as_chunk(x).to(torch.float32)
        n = x.numel()
        scale = x.abs().mean().reshape(1)
        positive = torch.zeros((n + 7) // 8 * 8, dtype=torch.uint8, device=x.device)
        positive[:n] = x >= 0
        weights = torch.tensor(_WEIGHTS, dtype=torch.uint8, device=x.device)
        bits = (positive.view(-1, 8) * weights).sum(dim=1, dtype=torch.uint8)
        return (scale, bits)

    def decode(self, payload: Payload, n: int, ctx: Context = Context()) -> torch.Tensor:
        scale, bits = payload
        return self.signs(bits, n).to(torch.float32) * scale.to(torch.float32)

    @staticmethod
    def signs(bits: torch.Tensor, n: int) -> torch.Tensor:
        """The +1/-1 int8 signs of ``n`` elements packed in ``bits``."""
        shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=bits.device)
        one = (bits.view(-1, 1) >> shifts) & 1
        return (one.reshape(-1)[:n].to(torch.int8) * 2 - 1)
