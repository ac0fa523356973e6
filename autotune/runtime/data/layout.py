"""The gradient layout: which gradients a worker averages, and in which order they lie in
the flat buffers.

Workers register their parameters (:meth:`Layout.register`). The leader proposes an order
(reversed registration order at first, then the ready order it learns in the first
iteration, :meth:`Layout.learn`) and counts its changes in ``version``. At a ``sync`` the
proposal crosses the wire as rows of (registration index, numel, dtype code)
(:meth:`Layout.rows`), every worker checks them against its own registration
(:meth:`Layout.verify`) and adopts the order (:meth:`Layout.adopt`). :func:`moves` says
where each gradient's elements went between two layouts, for the error-feedback
residuals. Nothing here communicates.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from autotune.runtime.config import ConfigError
from autotune.runtime.control.prepared import Setup
from autotune.runtime.data.plan import DTYPE_BYTES

DTYPES = tuple(DTYPE_BYTES)  # wire codes of gradient dtypes


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


class Layout:
    """A worker's registration and the order in force (see the module docstring)."""

    def __init__(self) -> None:
        self.params: list[torch.nn.Parameter] = []
        self.order: list[int] = []       # registration indices in layout order
        self.pos: dict[int, int] = {}    # registration index -> layout position
        self.proposed: list[int] = []    # leader: the order it proposes at the next sync
        self.version = 0                 # leader: bumped by register / a learnt order
        self.seen = -1                   # the leader's version of the order in force
        self.dirty = False               # registered since the last sync
        self.learning = False            # the next iteration teaches the ready order

    def register(self, params: Iterable[Any]) -> list[torch.nn.Parameter]:
        """Take the parameters with ``requires_grad`` (each once); returns them."""
        seen: set[int] = set()
        plist = []
        for p in params:
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"register() takes tensors/parameters, got {type(p).__name__}")
            if p.requires_grad and id(p) not in seen:
                if dtype_name(p) not in DTYPE_BYTES:
                    raise ConfigError(f"parameter of dtype {p.dtype} cannot be averaged")
                seen.add(id(p))
                plist.append(p)
        self.params = plist
        self.proposed = list(reversed(range(len(plist))))
        self.version += 1
        self.dirty = True
        self.learning = True
        return plist

    def rows(self) -> list[int]:
        """Leader: the proposed order as flat (index, numel, dtype code) rows."""
        out: list[int] = []
        for i in self.proposed:
            p = self.params[i]
            out += [i, p.numel(), DTYPES.index(dtype_name(p))]
        return out

    def verify(self, rows: list[list[int]], rank: int, leader: int) -> list[int]:
        """This worker's registration against the leader's rows; the order to use."""
        mine = self.params
        if len(rows) != len(mine):
            raise ConfigError(f"rank {rank} registered {len(mine)} gradients, the leader "
                              f"(rank {leader}) {len(rows)}")
        order = [int(r[0]) for r in rows]
        if sorted(order) != list(range(len(mine))):
            raise ConfigError("malformed gradient layout from the leader")
        for i, numel, code in rows:
            p = mine[i]
            if p.numel() != numel or dtype_name(p) != DTYPES[code]:
                raise ConfigError(
                    f"rank {rank}: registered parameter {i} is {tuple(p.shape)} "
                    f"{dtype_name(p)}, the leader's is {numel} elements of {DTYPES[code]}")
        return order

    def adopt(self, order: list[int], version: int) -> None:
        self.order = order
        self.pos = {r: pos for pos, r in enumerate(order)}
        self.seen = version
        self.dirty = False

    def learn(self, ready: list[int], leader: bool) -> None:
        """After the first iteration under a new registration: the leader proposes the
        order in which the gradients became ready (``ready``: layout positions)."""
        if self.learning and leader:
            learnt = [self.order[pos] for pos in ready]
            if learnt != self.order:
                self.proposed = learnt
                self.version += 1
        self.learning = False


def moves(old: Setup, old_order: list[int], new: Setup, new_order: list[int]
          ) -> dict[str, tuple[list[int], list[int], list[int], int]]:
    """Per dtype, where each gradient's elements were and are in the flat buffers, for
    :meth:`Residuals.relayout` (a new gradient order, the same registration)."""
    old_pos = {r: p for p, r in enumerate(old_order)}
    out: dict[str, tuple[list[int], list[int], list[int], int]] = {
        d: ([], [], [], n) for d, n in new.totals}
    for pos, r in enumerate(new_order):
        numel, dtype = new.sizes[pos]
        op = old_pos.get(r)
        if op is None or old.sizes[op] != (numel, dtype) or dtype not in out:
            continue
        olds, news, sizes, _ = out[dtype]
        olds.append(old.offsets[op])
        news.append(new.offsets[pos])
        sizes.append(numel)
    return out
