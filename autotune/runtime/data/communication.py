"""The Communication Service: a worker's side of averaging, one job per stream.

A stream walks its chunks in plan order. A chunk leaves as soon as all its gradients are
in (overlap with backward; a CUDA gradient is in once its staged copy to the host buffer
has completed, :meth:`RoundState.wait_copies`); the stream keeps ``Setup.send_depth`` chunks on their way out
and ``Setup.tail_depth`` in flight in all (see :class:`Tail`), each a short pipeline of
stages:

============ ========================================= ===========================================
intra        allreduce                                 pushpull
============ ========================================= ===========================================
flat         all-reduce among all workers              push to the owner, pull the sum
root         reduce to the root; roots all-reduce      reduce to the root; the root pushes and
             across machines; broadcast from the root  pulls; broadcast from the root
scatter      reduce-scatter in the machine; local      reduce-scatter; local worker j pushes and
             worker j all-reduces shard j across       pulls shard j; all-gather in the machine
             machines; all-gather in the machine
============ ========================================= ===========================================

The flat buffers: ``inp`` holds the packed local gradients; results end in ``inp`` under
``allreduce`` and in ``out`` under ``pushpull``. Under ``scatter``, shard ``j`` of a chunk
is its ``j``-th near-equal piece (:func:`~autotune.runtime.data.plan.shard_bounds`) and belongs
to local worker ``j``; the reduce-scatter is one reduce per shard (to the worker that owns
it) and the all-gather one broadcast per shard: gloo runs these faster than its
``reduce_scatter`` (about 2x with two local workers here) and they take uneven shards.
Every result is divided by the number of workers here, as soon as its chunk completes.

Compression (a lossy ``compression`` and a chunk of at least ``compress_min_bytes``)
applies to the cross-machine step only: the all-reduce among workers (``flat``) or roots
(``root``) or of shard ``j`` (``scatter``), and the push/pull. The rank that sends a
(partial) sum encodes it with error feedback (its residual of those elements is added
first and what the codec dropped is kept, :class:`~autotune.runtime.codecs.ErrorFeedback`);
summable codecs (fp16, bf16, random-k, PowerSGD) are all-reduced as packed payloads and
decoded once, the others (top-k, one-bit) all-gathered and each payload decoded and
summed; a push sends the packed payload and the pull brings the Summation Service's
packed sum (summable) or re-encoded sum, which is decoded. ``codec.after_sum`` sees every
aggregated payload (PowerSGD's basis). Every rank that does not encode a chunk itself
first folds any residual it still holds for it into the gradient it sends (after a switch
of configuration), so nothing is dropped. Under ``compression=none`` with no residual
left, a chunk takes exactly the uncompressed path.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator

import torch
import torch.distributed as dist

from autotune.runtime.codecs import Context, averaged_payloads, decode_aggregate, whole
from autotune.runtime.compat import all_gather
from autotune.runtime.config import Intra
from autotune.runtime.control.groups import GroupCache
from autotune.runtime.control.prepared import Setup
from autotune.runtime.data.compression import Residuals
from autotune.runtime.data.engine import RoundState, issue
from autotune.runtime.data.plan import Chunk, shard_bounds


class Tail(list):
    """A stage that waits for a chunk's result once it has left (the pull of ``pushpull``,
    or, on a worker that does not push, nothing: the wait for its machine's push).
    Chunks in their tail no longer count against ``Setup.send_depth``, only against
    ``Setup.tail_depth``, so a stream keeps pushing while earlier chunks are summed and
    pulled. Every worker of a machine yields exactly one Tail per chunk (intra ``root`` and
    ``scatter``), so they issue their machine's collectives in the same order."""


def _peers(ranks: Any, me: int) -> tuple[int, ...]:
    return tuple(r for r in ranks if r != me)


class CommunicationStream:
    """One stream's job on a worker for one iteration."""

    def __init__(self, setup: Setup, it: RoundState, inp: dict, out: dict, groups: GroupCache,
                 stream: int, timeout: float, residuals: Residuals):
        self.setup = setup
        self.residuals = residuals
        self.it = it
        self.inp = inp
        self.out = out
        self.groups = groups
        self.stream = stream
        self.timeout = timeout
        self.me = setup.info.rank

    def run(self) -> None:
        sending: deque = deque()  # (stages, ops) of chunks still on their way out
        tail: deque = deque()     # (stages, ops) of chunks waiting for their result
        st = self.setup
        for c in st.stream_chunks[self.stream]:
            self.it.wait_ready(c)
            self.it.wait_copies(c, self.timeout, self.me)  # staged (CUDA) gradients only
            gen = self._stages(c)
            self._place(gen, next(gen, None), tail, sending)
            while len(sending) >= st.send_depth:
                self._send_out(*sending.popleft(), tail)
            while tail and len(sending) + len(tail) >= st.tail_depth:
                self._finish(*tail.popleft())
        while sending:
            self._send_out(*sending.popleft(), tail)
        while tail:
            self._finish(*tail.popleft())

    def _place(self, gen: Iterator, ops: list | None, tail: deque, sending: deque) -> None:
        if ops is None:
            self.it.tick(chunk=True)
        else:
            (tail if isinstance(ops, Tail) else sending).append((gen, ops))

    def _send_out(self, gen: Iterator, ops: list | None, tail: deque) -> None:
        """Run a chunk's stages up to its :class:`Tail` (or its end)."""
        while ops is not None and not isinstance(ops, Tail):
            for op in ops:
                op.wait(self.timeout)
            ops = next(gen, None)
        self._place(gen, ops, tail, tail)

    def _finish(self, gen: Iterator, ops: list | None) -> None:
        while ops is not None:
            for op in ops:
                op.wait(self.timeout)
            ops = next(gen, None)
        self.it.tick(chunk=True)

    # ------------------------------------------------------------------ stages
    def _g(self, *key: Any) -> Any:
        return self.groups.get(key)

    def _stages(self, c: Chunk) -> Iterator[list]:
        st = self.setup
        info, cfg, s, me = st.info, st.config, c.stream, self.me
        tag = f"stream {s} chunk {c.index}"
        inb = self.inp[c.dtype].narrow(0, c.offset, c.numel)
        outb = self.out[c.dtype].narrow(0, c.offset, c.numel) if st.needs_out else None
        intra, pp = cfg.intra, st.pushpull
        lossy = st.compression.compresses(c)
        if self.residuals.dirty and not (lossy and intra == Intra.FLAT):
            # this rank does not encode the chunk as it stands: residual left from an
            # earlier configuration goes out with the gradient
            ef = self.residuals.worker.get(c.dtype)
            if ef is not None:
                ef.fold(inb, whole(c.offset, c.numel))

        if intra == Intra.FLAT:
            if pp:
                lent = self.it.lent.get(c.tensors[0]) if len(c.tensors) == 1 else None
                if lent is not None:  # the chunk holds one gradient alone: push from it
                    inb = lent.narrow(0, c.offset - st.offsets[c.tensors[0]], c.numel)
                yield from self._pushpull(c, 0, 0, inb, outb, lossy)
                res = outb
            else:
                if lossy:
                    yield from self._allreduce_lossy(c, 0, 0, inb, ("ar", s), info.workers)
                else:
                    yield [issue(f"{tag}: all-reduce among workers", _peers(info.workers, me),
                                 dist.all_reduce, inb, group=self._g("ar", s), async_op=True)]
                res = inb
        else:
            m = info.machine_index_of(me)
            local = info.machine_workers(info.worker_machines[m])
            mg = self._g("mach", s, m)
            lpeers = _peers(local, me)
            if intra == Intra.ROOT:
                r = cfg.reduce_root
                root = local[r]
                yield [issue(f"{tag}: reduce to rank {root}", lpeers,
                             dist.reduce, inb, dst=root, group=mg, async_op=True)]
                if pp:
                    if me == root:
                        yield from self._pushpull(c, 0, 0, inb, outb, lossy)
                    else:
                        yield Tail()
                    res = outb
                else:
                    if me == root and info.n_machines > 1:
                        cross = info.machine_workers
                        roots = tuple(cross(mm)[r] for mm in info.worker_machines)
                        if lossy:
                            yield from self._allreduce_lossy(c, 0, 0, inb, ("cross", s, r), roots)
                        else:
                            yield [issue(f"{tag}: all-reduce among roots", _peers(roots, me),
                                         dist.all_reduce, inb, group=self._g("cross", s, r),
                                         async_op=True)]
                    res = inb
                yield [issue(f"{tag}: broadcast from rank {root}", lpeers,
                             dist.broadcast, res, src=root, group=mg, async_op=True)]
            else:  # scatter
                j = info.local_index
                bounds = shard_bounds(c.numel, st.shards)
                s0, n = bounds[j]
                column = tuple(info.machine_workers(mm)[j] for mm in info.worker_machines)
                yield [
                    issue(f"{tag}: reduce of shard {i}", lpeers, dist.reduce,
                          inb.narrow(0, a, k), dst=local[i], group=mg, async_op=True)
                    for i, (a, k) in enumerate(bounds) if k > 0
                ]
                mine = inb.narrow(0, s0, n)
                if pp:
                    if n > 0:
                        yield from self._pushpull(c, j, s0, mine, outb.narrow(0, s0, n), lossy)
                    else:
                        yield Tail()
                    res = outb
                else:
                    if n > 0 and info.n_machines > 1:
                        if lossy:
                            yield from self._allreduce_lossy(c, j, s0, mine, ("cross", s, j),
                                                             column)
                        else:
                            yield [issue(f"{tag}: all-reduce of shard {j}", _peers(column, me),
                                         dist.all_reduce, mine, group=self._g("cross", s, j),
                                         async_op=True)]
                    res = inb
                yield [
                    issue(f"{tag}: broadcast of shard {i}", lpeers, dist.broadcast,
                          res.narrow(0, a, k), src=local[i], group=mg, async_op=True)
                    for i, (a, k) in enumerate(bounds) if k > 0
                ]
        res.div_(len(info.workers))

    # ------------------------------------------------------------- compression
    def _encode(self, c: Chunk, start: int, data: Any, ctx: Context) -> torch.Tensor:
        """The packed payload of ``data`` (elements ``start..`` of chunk ``c``), encoded
        with this rank's error feedback."""
        codec = self.setup.compression.codec
        ef = self.residuals.worker_ef(c.dtype)
        payload = ef.encode(codec, data, whole(c.offset + start, data.numel()), ctx)
        self.it.stored = True
        return codec.pack(payload)

    def _allreduce_lossy(self, c: Chunk, shard: int, start: int, data: Any, key: tuple,
                         members: tuple[int, ...]) -> Iterator[list]:
        """Compressed all-reduce of ``data`` among ``members`` (group ``key``); the decoded
        sum lands in ``data``."""
        codec = self.setup.compression.codec
        n = data.numel()
        ctx = Context(self.it.round, c.index * self.setup.shards + shard)
        buf = self._encode(c, start, data, ctx)
        what = f"stream {c.stream} chunk {c.index}"
        peers = _peers(members, self.me)
        if codec.summable:
            wire = buf
            yield [issue(f"{what}: compressed all-reduce", peers, dist.all_reduce, buf,
                         group=self._g(*key), async_op=True)]
        else:
            wire = torch.empty(len(members) * buf.numel(), dtype=buf.dtype)
            yield [issue(f"{what}: all-gather of payloads", peers, all_gather, wire, buf,
                         group=self._g(*key), async_op=True)]
        data.copy_(averaged_payloads(codec, wire, len(members), n, ctx))

    def _pushpull(self, c: Chunk, shard: int, start: int, src: Any, dst: Any,
                  lossy: bool) -> Iterator[list]:
        """Push ``src`` to the chunk's Summation Service and pull the sum into ``dst``,
        as packed payloads when the chunk is compressed: the push, then the pull as a
        :class:`Tail` (both are posted at once)."""
        if not lossy:
            yield from self._exchange(c, shard, src, dst)
            return
        codec = self.setup.compression.codec
        n = src.numel()
        ctx = Context(self.it.round, c.index * self.setup.shards + shard)
        buf = self._encode(c, start, src, ctx)
        pulled = codec.empty_packed(n)
        yield from self._exchange(c, shard, buf, pulled)
        dst.copy_(decode_aggregate(codec, pulled, n, ctx))

    def _exchange(self, c: Chunk, shard: int, src: Any, dst: Any) -> Iterator[list]:
        """Push ``src`` to the chunk's Summation Service and pull the sum into ``dst``."""
        unit = c.index * self.setup.shards + shard
        owner = c.owner
        what = f"stream {c.stream} chunk {c.index}"
        if owner == self.me:  # the Summation Service lives in this process
            yield Tail([self.it.mailbox.put(unit, src, dst, f"{what}: local summation")])
            return
        g = self._g("pp", c.stream)
        pull = issue(f"{what}: pull from rank {owner}", (owner,), dist.irecv, dst, owner,
                     group=g, tag=2 * unit + 1)
        push = issue(f"{what}: push to rank {owner}", (owner,), dist.isend, src, owner,
                     group=g, tag=2 * unit)
        yield [push]
        yield Tail([pull])
