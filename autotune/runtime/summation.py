"""The Summation Service: sums the chunks it owns and sends each sum straight back.

It runs in every server process and, for ``pushpull``, in the first worker of each worker
machine (BytePS's SS_CPU and SS_GPU). One job per stream walks the units it owns in plan
order, keeping up to ``Setup.sum_depth`` units posted (receives for all their parts), and
sums a unit as soon as its parts are in, part by part as they arrive (PHub's tall
aggregation), then sends the sum to every pusher at once. A part from a pusher in the same
process comes through the :class:`~autotune.runtime.engine.Mailbox` instead of the network.

Receive buffers come from a per-stream :class:`BufferPool` that lives as long as the
configuration, so steady-state iterations allocate nothing.

Codec integration point (not wired yet): decode each received part before summing and
encode the sum before sending it back (:meth:`SummationStream._sum`).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch
import torch.distributed as dist

from .engine import Iteration, Mailbox, issue
from .groups import GroupCache
from .plan import Unit
from .setup import Setup


class BufferPool:
    """Reusable CPU tensors by (numel, dtype); one pool per stream (no locking)."""

    def __init__(self) -> None:
        self._free: dict[tuple[int, str], list[torch.Tensor]] = {}

    def take(self, numel: int, dtype: str) -> torch.Tensor:
        free = self._free.get((numel, dtype))
        if free:
            return free.pop()
        return torch.empty(numel, dtype=getattr(torch, dtype))

    def give(self, t: torch.Tensor) -> None:
        self._free.setdefault((t.numel(), str(t.dtype).removeprefix("torch.")), []).append(t)


class SummationStream:
    """One stream's Summation Service job for one iteration."""

    def __init__(self, setup: Setup, it: Iteration | None, mailbox: Mailbox, groups: GroupCache,
                 stream: int, timeout: float, pool: BufferPool):
        self.setup = setup
        self.it = it
        self.mailbox = mailbox
        self.groups = groups
        self.stream = stream
        self.timeout = timeout
        self.pool = pool
        self.me = setup.info.rank
        self._sending: deque = deque()

    def run(self) -> None:
        depth = self.setup.sum_depth
        posted: deque = deque()
        for u in self.setup.units[self.stream]:
            posted.append(self._post(u))
            while len(posted) >= depth:
                self._sum(*posted.popleft())
        while posted:
            self._sum(*posted.popleft())
        while self._sending:
            self._reap()

    def _post(self, u: Unit) -> tuple:
        g = self.groups.get(("pp", self.stream))
        remote = [p for p in u.pushers if p != self.me]
        bufs = [self.pool.take(u.numel, u.chunk.dtype) for _ in remote]
        ops = [
            issue(f"stream {self.stream} chunk {u.chunk.index}: receive from rank {p}", (p,),
                  dist.irecv, b, p, group=g, tag=2 * u.id)
            for b, p in zip(bufs, remote)
        ]
        return u, remote, bufs, ops

    def _sum(self, u: Unit, remote: list, bufs: list, ops: list) -> None:
        acc = self.pool.take(u.numel, u.chunk.dtype)
        local = None
        first = True
        try:
            if self.me in u.pushers:
                src, dst, done = self.mailbox.take(u.id, self.timeout)
                local = (dst, done)
                acc.copy_(src)
                first = False
            for b, op in zip(bufs, ops):
                op.wait(self.timeout)
                if first:
                    acc.copy_(b)
                    first = False
                else:
                    acc.add_(b)
        except BaseException as e:
            if local is not None:
                local[1].set(e)
            raise
        for b in bufs:
            self.pool.give(b)
        g = self.groups.get(("pp", self.stream)) if remote else None
        sends = [
            issue(f"stream {self.stream} chunk {u.chunk.index}: send sum to rank {p}", (p,),
                  dist.isend, acc, p, group=g, tag=2 * u.id + 1)
            for p in remote
        ]
        if local is not None:
            local[0].copy_(acc)
            local[1].set()
        self._sending.append((sends, acc))
        while len(self._sending) > self.setup.sum_depth:
            self._reap()
        if self.it is not None:
            self.it.tick()

    def _reap(self) -> None:
        sends, acc = self._sending.popleft()
        for op in sends:
            op.wait(self.timeout)
        self.pool.give(acc)
