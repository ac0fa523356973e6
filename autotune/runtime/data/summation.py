"""The Summation Service: sums the chunks it owns and sends each sum straight back.

It runs in every server process and, for ``pushpull``, in the first worker of each worker
machine (BytePS's SS_CPU and SS_GPU). One job per stream walks the units it owns in plan
order, keeping up to ``Setup.sum_depth`` units posted (receives for all their parts), and
sums a unit as soon as its parts are in, part by part as they arrive (PHub's tall
aggregation), then sends the sum to every pusher at once. A part from a pusher in the same
process comes through the :class:`~autotune.runtime.data.engine.Mailbox` instead of the network.

Receive buffers come from a per-stream :class:`BufferPool` that lives as long as the
configuration, so steady-state iterations allocate nothing.

Compressed units (a lossy codec and a chunk of at least ``compress_min_bytes``) arrive as
packed payloads of a size known from the unit's length, so receives are posted as usual.
Payloads of a summable codec are added as they are (in float32, returned in the wire
dtype) and the packed sum goes back; those of the others (top-k, one-bit) are decoded and
summed, and the sum is re-encoded with the Summation Service's own error feedback
(BytePS's server-side compression), so the pull has the same fixed size as the push.
"""

from __future__ import annotations

from collections import deque

import torch
import torch.distributed as dist

from autotune.runtime.codecs import Context, whole
from autotune.runtime.control.groups import GroupCache
from autotune.runtime.control.prepared import Setup
from autotune.runtime.data.compression import Residuals
from autotune.runtime.data.engine import Mailbox, RoundState, issue
from autotune.runtime.data.plan import Unit


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

    def __init__(self, setup: Setup, it: RoundState | None, mailbox: Mailbox, groups: GroupCache,
                 stream: int, timeout: float, pool: BufferPool, residuals: Residuals):
        self.setup = setup
        self.residuals = residuals
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

    def _wire(self, u: Unit) -> tuple[int, str]:
        """(numel, dtype) of what each pusher sends for ``u``."""
        comp = self.setup.compression
        if comp.compresses(u.chunk):
            codec = comp.codec
            return codec.payload_numel(u.numel), str(codec.wire_dtype).removeprefix("torch.")
        return u.numel, u.chunk.dtype

    def _post(self, u: Unit) -> tuple:
        g = self.groups.get(("pp", self.stream))
        remote = [p for p in u.pushers if p != self.me]
        numel, dtype = self._wire(u)
        bufs = [self.pool.take(numel, dtype) for _ in remote]
        ops = [
            issue(f"stream {self.stream} chunk {u.chunk.index}: receive from rank {p}", (p,),
                  dist.irecv, b, p, group=g, tag=2 * u.id)
            for b, p in zip(bufs, remote)
        ]
        return u, remote, bufs, ops

    def _sum(self, u: Unit, remote: list, bufs: list, ops: list) -> None:
        if self.setup.compression.compresses(u.chunk):
            acc = self._sum_compressed(u, bufs, ops)
            local = None
        else:
            acc, local = self._sum_plain(u, bufs, ops)
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

    def _sum_plain(self, u: Unit, bufs: list, ops: list) -> tuple:
        """The uncompressed sum, part by part as they arrive; the local part's hand-off."""
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
        return acc, local

    def _sum_compressed(self, u: Unit, bufs: list, ops: list) -> torch.Tensor:
        """The packed sum of a compressed unit (summable codecs: the payloads added;
        others: decoded, summed, re-encoded with this Summation Service's error feedback).
        The local part's hand-off is completed here."""
        codec = self.setup.compression.codec
        n = u.numel
        ctx = Context(self.it.round if self.it is not None else 0, u.id)
        total: torch.Tensor | None = None
        local = None

        def add(packed: torch.Tensor) -> None:
            nonlocal total
            part = (packed.to(torch.float32) if codec.summable
                    else codec.decode(codec.unpack(packed, n), n, ctx))
            total = part.clone() if total is None else total.add_(part)

        try:
            if self.me in u.pushers:
                src, dst, done = self.mailbox.take(u.id, self.timeout)
                local = (dst, done)
                add(src)
            for b, op in zip(bufs, ops):
                op.wait(self.timeout)
                add(b)
            assert total is not None
            if codec.summable:
                out = total.to(codec.wire_dtype)
            else:
                ef = self.residuals.summation_ef(u.chunk.dtype)
                segments = whole(u.chunk.offset + u.start, n)
                out = codec.pack(ef.encode(codec, total, segments, ctx))
        except BaseException as e:
            if local is not None:
                local[1].set(e)
            raise
        if local is not None:
            local[0].copy_(out)
            local[1].set()
        return out

    def _reap(self) -> None:
        sends, acc = self._sending.popleft()
        for op in sends:
            op.wait(self.timeout)
        self.pool.give(acc)
