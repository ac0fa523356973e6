"""Top-k sparsification: keep the k elements of largest magnitude (DGC-style).

Payload: ``values`` (k float32) and ``indices`` (k int32), so the wire ratio is
``2 * ratio`` of the float32 chunk. Workers keep different indices, so payloads are not
summable: they are all-gathered (or pushed to a Summation Service), decoded and summed.
"""

from __future__ import annotations

import math

import torch

from autotune.runtime.codecs.base import Codec, Context, FieldSpec, Payload, _as_chunk, _check_n


def kept(n: int, ratio: float) -> int:
    """Elements kept out of ``n`` at ``ratio``: ceil(ratio * n), at least 1, at most n."""
    _check_n(n)
    return min(n, max(1, math.ceil(ratio * n - 1e-9)))


class SparseCodec(Codec):
    """Shared parts of top-k and random-k: a ratio and a scatter-back decode."""

    def __init__(self, ratio: float = 0.01, *, world_size: int = 1, seed: int = 0) -> None:
        super().__init__(world_size=world_size, seed=seed)
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"{self.name}: ratio must be in (0, 1], got {ratio}")
        self.ratio_kept = float(ratio)

    def k(self, n: int) -> int:
        return kept(n, self.ratio_kept)

    def params(self) -> dict:
        return {"ratio": self.ratio_kept}

    @staticmethod
    def _scatter(values: torch.Tensor, indices: torch.Tensor, n: int) -> torch.Tensor:
        out = torch.zeros(n, dtype=torch.float32, device=values.device)
        out[indices.long()] = values.to(torch.float32)
        return out


class TopKCodec(SparseCodec):
    """Keep the ``ratio`` fraction of elements with the largest magnitude."""

    name = "topk"
    fields = ("values", "indices")
    summable = False

    def layout(self, n: int) -> tuple[FieldSpec, ...]:
        k = self.k(n)
        return ((torch.float32, k), (torch.int32, k))

    def encode(self, x: torch.Tensor, ctx: Context = Context()) -> Payload:
        x = _as_chunk(x).to(torch.float32)
        k = self.k(x.numel())
        _, idx = torch.topk(x.abs(), k, sorted=False)
        idx, _ = torch.sort(idx)
        return (x[idx], idx.to(torch.int32))

    def decode(self, payload: Payload, n: int, ctx: Context = Context()) -> torch.Tensor:
        values, indices = payload
        return self._scatter(values, indices, n)
