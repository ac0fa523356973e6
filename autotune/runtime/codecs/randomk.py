"""Random-k sparsification with indices shared by every rank.

The k indices of a chunk are drawn (without replacement) from a generator seeded by
``(seed, iteration, chunk_id)``, on the CPU with numpy's PCG64, so every rank (CPU
server or CUDA worker) draws the same ones without communication. The payload is only
the k float32 ``values`` (wire ratio = ``ratio``), and because all workers use the same
indices the payloads are summable: all-reduce them and decode the sum once.
Decode needs the same :class:`Context` as encode.
"""

from __future__ import annotations

import numpy as np
import torch

from .base import Context, FieldSpec, Payload, _as_chunk
from .topk import SparseCodec


class RandomKCodec(SparseCodec):
    """Keep a shared random ``ratio`` fraction of the elements; see the module docstring."""

    name = "randomk"
    fields = ("values",)
    summable = True

    def layout(self, n: int) -> tuple[FieldSpec, ...]:
        return ((torch.float32, self.k(n)),)

    def indices(self, n: int, ctx: Context, device: torch.device | str = "cpu") -> torch.Tensor:
        """The sorted int64 indices chunk ``ctx.chunk_id`` keeps at ``ctx.iteration``."""
        if ctx is None:
            raise ValueError("randomk needs the chunk's Context (iteration, chunk_id)")
        seq = np.random.SeedSequence([self.seed & (2**63 - 1), ctx.iteration, ctx.chunk_id, n])
        rng = np.random.Generator(np.random.PCG64(seq))
        k = self.k(n)
        idx = np.arange(n) if k == n else np.sort(rng.choice(n, size=k, replace=False))
        return torch.from_numpy(idx.astype(np.int64)).to(device)

    def encode(self, x: torch.Tensor, ctx: Context = Context()) -> Payload:
        x = _as_chunk(x).to(torch.float32)
        return (x[self.indices(x.numel(), ctx, x.device)],)

    def decode(self, payload: Payload, n: int, ctx: Context = Context()) -> torch.Tensor:
        (values,) = payload
        return self._scatter(values, self.indices(n, ctx, values.device), n)
