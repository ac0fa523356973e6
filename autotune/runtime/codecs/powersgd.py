"""PowerSGD (Vogels et al., 2019), in a one-message-per-iteration form.

A chunk of n elements is viewed as a square ``m x m`` matrix M (``m = ceil(sqrt(n))``,
zero padded). Every worker holds the same orthonormal basis B (``m x r``) for the chunk and
sends one ``m x r`` float32 matrix per iteration, alternating sides:

- right step (B = Q): send ``M Q``; the chunk decodes as ``(M Q) Q^T``;
- left step (B = P): send ``M^T P``; the chunk decodes as ``P (M^T P)^T``.

Both are orthogonal projections of M, linear in M, so the payloads are *summable*: the
all-reduced sum decodes to the projection of the summed gradient. After aggregation,
:meth:`after_sum` (called on every worker with the identical summed payload) makes the
next basis by orthogonalising that sum (one step of power iteration, warm-started from
the previous iteration) and switches side. All workers therefore keep the same basis
without extra communication. What the projection drops is the encoding error that error
feedback carries over, as in the paper. The initial basis is drawn from
``(seed, chunk_id)`` on the CPU. Wire ratio ~ ``r / sqrt(n)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from autotune.runtime.codecs.base import Codec, Context, FieldSpec, Payload, _as_chunk, _check_n


@dataclass
class _Basis:
    side: str  # "right": basis is Q (send M Q); "left": basis is P (send M^T P)
    matrix: torch.Tensor  # m x r, orthonormal columns


class PowerSGDCodec(Codec):
    """Rank-``rank`` PowerSGD with a warm-started shared basis; see the module docstring."""

    name = "powersgd"
    fields = ("factor",)
    summable = True

    def __init__(self, rank: int = 4, *, world_size: int = 1, seed: int = 0) -> None:
        super().__init__(world_size=world_size, seed=seed)
        if rank < 1:
            raise ValueError(f"powersgd: rank must be >= 1, got {rank}")
        self.rank = int(rank)
        self._state: dict[int, _Basis] = {}

    def params(self) -> dict:
        return {"rank": self.rank}

    @staticmethod
    def side_length(n: int) -> int:
        _check_n(n)
        return math.isqrt(n - 1) + 1

    def _r(self, n: int) -> int:
        return min(self.rank, self.side_length(n))

    def layout(self, n: int) -> tuple[FieldSpec, ...]:
        return ((torch.float32, self.side_length(n) * self._r(n)),)

    def reset(self) -> None:
        self._state.clear()

    def basis(self, n: int, ctx: Context, device: torch.device | str = "cpu") -> _Basis:
        """The current basis of chunk ``ctx.chunk_id`` (created on first use)."""
        m, r = self.side_length(n), self._r(n)
        state = self._state.get(ctx.chunk_id)
        if state is None or state.matrix.shape != (m, r):
            entropy = [self.seed & (2**63 - 1), ctx.chunk_id, m]
            g = torch.Generator().manual_seed(int(np.random.SeedSequence(entropy).generate_state(1)[0]))
            state = _Basis("right", _orthonormal(torch.randn(m, r, generator=g)))
            self._state[ctx.chunk_id] = state
        if state.matrix.device != torch.device(device):
            state.matrix = state.matrix.to(device)
        return state

    def encode(self, x: torch.Tensor, ctx: Context = Context()) -> Payload:
        x = _as_chunk(x).to(torch.float32)
        n = x.numel()
        b = self.basis(n, ctx, x.device)
        mat = _square(x, self.side_length(n))
        factor = mat @ b.matrix if b.side == "right" else mat.T @ b.matrix
        return (factor.reshape(-1),)

    def decode(self, payload: Payload, n: int, ctx: Context = Context()) -> torch.Tensor:
        (factor,) = payload
        m, r = self.side_length(n), self._r(n)
        b = self.basis(n, ctx, factor.device)
        f = factor.to(torch.float32).reshape(m, r)
        mat = f @ b.matrix.T if b.side == "right" else b.matrix @ f.T
        return mat.reshape(-1)[:n]

    def after_sum(self, payload: Payload, n: int, ctx: Context = Context()) -> None:
        (factor,) = payload
        m, r = self.side_length(n), self._r(n)
        b = self.basis(n, ctx, factor.device)
        b.matrix = _orthonormal(factor.to(torch.float32).reshape(m, r))
        b.side = "left" if b.side == "right" else "right"


def _square(x: torch.Tensor, m: int) -> torch.Tensor:
    if x.numel() == m * m:
        return x.view(m, m)
    out = torch.zeros(m * m, dtype=x.dtype, device=x.device)
    out[: x.numel()] = x
    return out.view(m, m)


def _orthonormal(a: torch.Tensor) -> torch.Tensor:
    q, _ = torch.linalg.qr(a, mode="reduced")
    if not bool(torch.isfinite(q).all()):
        raise FloatingPointError("powersgd: non-finite basis (non-finite gradient?)")
    return q.contiguous()
