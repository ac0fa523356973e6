"""Random-k sparsification with indices shared by every rank.

The k indices of a chunk are drawn (without replacement) from a generator seeded by
``(seed, iteration, chunk_id)``, on the CPU with numpy's PCG64, so every rank (CPU
server or CUDA worker) draws the same ones without communication. The payload is only
the k float32 ``values`` (wire ratio = ``ratio``), and because all workers use the same
indices the payloads are summable: all-reduce them and decode the sum once.
Decode needs the same :class:`Context` as encode. Drawing the indices is most of the
codec's cost (a chunk's are needed to encode, to compute the error-feedback residual and
to decode the sum), so the latest draws are kept (up to :data:`CACHE_BYTES`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import torch

from autotune.runtime.codecs.base import Context, FieldSpec, Payload, _as_chunk
from autotune.runtime.codecs.topk import SparseCodec


CACHE_BYTES = 64 << 20
"""Bytes of drawn indices a codec keeps for reuse (oldest dropped first)."""


class RandomKCodec(SparseCodec):
    """Keep a shared random ``ratio`` fraction of the elements; see the module docstring."""

    name = "randomk"
    fields = ("values",)
    summable = True

    def __init__(self, ratio: float = 0.01, *, world_size: int = 1, seed: int = 0) -> None:
        super().__init__(ratio, world_size=world_size, seed=seed)
        self._cache: OrderedDict[tuple[int, int, int], torch.Tensor] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._cache.clear()
            self._cached_bytes = 0

    def layout(self, n: int) -> tuple[FieldSpec, ...]:
        return ((torch.float32, self.k(n)),)

    def indices(self, n: int, ctx: Context, device: torch.device | str = "cpu") -> torch.Tensor:
        """The sorted int64 indices chunk ``ctx.chunk_id`` keeps at ``ctx.iteration``."""
        if ctx is None:
            raise ValueError("randomk needs the chunk's Context (iteration, chunk_id)")
        key = (ctx.iteration, ctx.chunk_id, n)
        with self._lock:
            idx = self._cache.get(key)
        if idx is None:
            seq = np.random.SeedSequence([self.seed & (2**63 - 1), ctx.iteration, ctx.chunk_id, n])
            rng = np.random.Generator(np.random.PCG64(seq))
            k = self.k(n)
            drawn = np.arange(n) if k == n else np.sort(rng.choice(n, size=k, replace=False))
            idx = torch.from_numpy(drawn.astype(np.int64))
            with self._lock:
                if key not in self._cache:
                    self._cache[key] = idx
                    self._cached_bytes += idx.numel() * 8
                while self._cached_bytes > CACHE_BYTES and len(self._cache) > 1:
                    _, old = self._cache.popitem(last=False)
                    self._cached_bytes -= old.numel() * 8
        return idx.to(device)

    def encode(self, x: torch.Tensor, ctx: Context = Context()) -> Payload:
        x = _as_chunk(x).to(torch.float32)
        return (x[self.indices(x.numel(), ctx, x.device)],)

    def decode(self, payload: Payload, n: int, ctx: Context = Context()) -> torch.Tensor:
        (values,) = payload
        return self._scatter(values, self.indices(n, ctx, values.device), n)
