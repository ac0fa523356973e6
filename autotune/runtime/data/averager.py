"""One rank's gradient averaging: gradients in, chunks out, averages back into ``.grad``.

:class:`Averager` runs the averaging rounds of one rank (one per iteration), each with its
:class:`~autotune.runtime.data.engine.RoundState`, under the active configuration
(:class:`~autotune.runtime.control.reconfigure.Active`):

* workers: the gradient hooks (:meth:`Averager.hook`; they send only while the caller's
  gate says so: inside DDP's ``no_sync`` they leave ``.grad`` alone) feed the rounds. The first hook of a round *arms* it (one Communication
  Service job per stream, and a Summation Service job per stream this rank sums for); each
  hook copies its gradient into the flat input buffer and marks it ready, so chunks leave
  while backward runs; :meth:`Averager.complete` packs what did not arrive, waits, and writes the
  averages back into ``.grad`` only once every chunk completed;
* the copies between ``.grad`` and the flat buffers are ``Averager.copies``, a
  :class:`~autotune.runtime.data.copies.GradientCopies`. CUDA gradients (and CPU ones with
  ``copy_cpu``, for tests) cross through :class:`~autotune.runtime.data.staging.HostStaging`:
  the hook only starts the copy into the (pinned) flat buffer on the side stream and hands
  its ``Staged`` to the round, whose stream threads wait for it before the chunk leaves;
  the averages go back non-blocking (see :meth:`GradientCopies.write_back` for the
  ordering), and a round's first hook waits for them first
  (:meth:`GradientCopies.drain`). CPU gradients are copied with no staging at all;
* servers: :meth:`Averager.serve` runs the Summation Service jobs of one round.

Waits are bounded: a stretch of ``timeout`` without progress, or a peer another rank posted
as lost, ends the round. Failures are returned as raw errors (the
:class:`~autotune.runtime.data.engine.OpError` of the failed operation); the Runtime turns them
into :class:`~autotune.runtime.errors.RuntimeFault` naming the rank to blame.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import torch

from autotune import signals

from autotune.runtime.control.faults import FaultInjector, Liveness
from autotune.runtime.control.groups import GroupCache
from autotune.runtime.control.reconfigure import Active
from autotune.runtime.control.world import WorldInfo
from autotune.runtime.data.communication import CommunicationStream
from autotune.runtime.data.copies import GradientCopies
from autotune.runtime.data.engine import Aborted, Mailbox, OpError, RoundState, StreamPool
from autotune.runtime.data.layout import Layout
from autotune.runtime.data.summation import SummationStream
from autotune.runtime.errors import RuntimeFault, UsageError


class Averager:
    """One rank's averaging rounds (see the module docstring)."""

    def __init__(self, info: WorldInfo, active: Active, layout: Layout, groups: GroupCache,
                 faults: FaultInjector, liveness: Liveness, timeout: float,
                 describe: Callable[[int], str], copy_cpu: bool = False,
                 grad_views: bool | None = None):
        self.active = active
        self.layout = layout
        self.groups = groups
        self.faults = faults
        self.liveness = liveness
        self.timeout = timeout
        self.describe = describe
        self.info = info
        self.pool = StreamPool(f"autotune-r{info.rank}")
        self._lock = threading.RLock()
        self.current: RoundState | None = None
        self.round = 0                        # averaging rounds started (codecs' iteration)
        self.served = True                    # the round of the last sync has run
        self._hooks: list[Any] = []           # gradient hooks (workers)
        self._had_grad: list[bool] = []
        self.copies = GradientCopies(active, layout, info.rank, timeout, copy_cpu, grad_views)

    def reset(self) -> None:
        """Forget the open round (after the servers were dropped: it is averaged again)."""
        self.current = None
        self.served = True

    def close(self, timeout: float) -> None:
        """Remove the gradient hooks, abort the open round and stop the stream threads
        (waiting up to ``timeout``)."""
        self.unhook()
        if self.current is not None:
            self.current.abort()
        self.pool.shutdown(timeout=timeout)

    # ------------------------------------------------------------------ workers
    def hook(self, params: Sequence[torch.Tensor], live: Callable[[], bool]) -> None:
        """Replace the gradient hooks by one per parameter of ``params`` (registration
        order): each hands its gradient to :meth:`on_grad` while ``live()`` and a layout is
        active and up to date (else :meth:`complete` packs it, or ``wait()`` says why not)."""
        self.unhook()
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook_for(i, live))
                       for i, p in enumerate(params)]

    def unhook(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _hook_for(self, index: int, live: Callable[[], bool]) -> Callable[[torch.Tensor], None]:
        def hook(param: torch.Tensor) -> None:
            if self.active.setup is None or self.layout.dirty or not live():
                return
            with signals.deferred(raise_at_end=False):  # a stop waits for step()
                self.on_grad(index, param)
        return hook

    def arm(self) -> RoundState:
        """The open round, started under the active configuration if there is none."""
        with self._lock:
            if self.current is not None:
                return self.current
            a = self.active
            setup = a.setup
            if setup is None:
                raise UsageError("call rt.sync() on all ranks before the first iteration")
            drained = self.copies.drain()
            it = RoundState(setup.plan, setup.tensor_chunks, setup.streams,
                           refused=self.faults.refuses(a.config))
            it.round = self.round
            # a residual left from a lossy configuration is folded into what is pushed
            it.lend = not a.residuals.dirty
            self.round += 1
            self._had_grad = [True] * len(setup.sizes)
            self.current = it
            if it.refused:
                return it
            if drained is not None:
                it.error = drained
                it.done.set()
                return it
            if setup.pushpull and self.served:
                it.error = UsageError("transport=pushpull needs rt.sync() on all ranks (servers "
                                      "too) before every iteration")
                it.done.set()
                return it
            jobs = []
            for s in range(setup.streams):
                if setup.stream_chunks[s]:
                    jobs.append(CommunicationStream(setup, it, a.inp, a.out, self.groups, s,
                                                    self.timeout, a.residuals).run)
                if setup.units[s]:
                    jobs.append(SummationStream(setup, it, it.mailbox, self.groups, s,
                                                self.timeout, a.pools[s], a.residuals).run)
            self._submit(it, jobs)
            return it

    def on_grad(self, index: int, param: torch.Tensor) -> None:
        """A registered parameter's gradient is ready (its post-accumulate hook)."""
        it = self.current or self.arm()
        pos = self.layout.pos.get(index)
        if pos is None:  # registered after the active layout: ignored until the next sync
            return
        staged = lent = None
        if not it.refused and not it.fired[pos]:
            staged, lent = self._pack(it, pos, param.grad)
        it.mark_ready(pos, staged, lent)

    def _pack(self, it: RoundState, pos: int, grad: torch.Tensor | None) -> tuple[Any, Any]:
        """(staged copy, lent gradient) of gradient ``pos`` for round ``it``: lent where
        its chunks may be pushed from it (:meth:`GradientCopies.lend`), else packed."""
        lent = self.copies.lend(pos, grad) if it.lend else None
        return (None if lent is not None else self.copies.pack(pos, grad)), lent

    def complete(self, write: bool = True) -> None:
        """Pack what did not arrive, wait for the round and, with ``write``, put the
        averages into ``.grad`` and, where backward handed gradients to the round, let the
        layout learn their ready order (:meth:`Layout.learn`). After a fault (the round
        reset) nothing has arrived: every gradient is packed as it stands in ``.grad``, so
        a second ``wait()`` averages the same iteration again. Raises the round's error."""
        it = self.current or self.arm()
        params = self.layout.params
        from_backward = any(it.fired)
        for pos, reg in enumerate(self.layout.order):
            if not it.fired[pos]:
                staged = lent = None
                if write:  # (a discarded round sends whatever the buffers hold)
                    g = params[reg].grad
                    if not it.refused:
                        staged, lent = self._pack(it, pos, g)
                    self._had_grad[pos] = g is not None
                it.mark_ready(pos, staged, lent)
        if it.refused:
            self.reset()
            raise RuntimeFault(
                f"injected fault for configuration {self.active.config} (AUTOTUNE_FAULT); the "
                "gradients are intact: sync() and wait() again", recoverable=True)
        self._await(it)
        self.reset()
        if it.error is None and it.started:
            # every chunk either folded its residual or encoded and kept a new one
            self.active.residuals.dirty = it.stored
        if it.error is not None:
            raise it.error
        if it.twice:
            reg = self.layout.order[it.twice[0]]
            p = self.layout.params[reg]
            raise UsageError(
                f"registered parameter {reg} ({tuple(p.shape)}) got a gradient from two "
                "backward passes in one iteration, and the first was already sent. For "
                "gradient accumulation run every backward but the last inside "
                "`with session.no_sync():`, as with DDP")
        changed = it.changed_lent()
        if changed:
            reg = self.layout.order[changed[0]]
            p = self.layout.params[reg]
            raise UsageError(
                f"registered parameter {reg} ({tuple(p.shape)}): its .grad was changed in "
                "place between backward() and wait() (e.g. gradient clipping or a "
                "GradScaler's unscale_) while it was being sent, so this round's averages "
                "are not defined. Change gradients after wait() (session.step()), as after "
                "DDP's backward()")
        if write:
            self.copies.write_back(self._had_grad)
            leader = self.info.rank == self.info.leader
            self.layout.learn(list(it.order), leader and from_backward)

    def progress(self) -> tuple[int, int]:
        """(chunks completed, chunks) of the round under way; (0, 0) if none."""
        it, setup = self.current, self.active.setup
        if it is None or setup is None:
            return (0, 0)
        return (it.chunks_done, len(setup.plan))

    def open(self) -> bool:
        """Whether a round was started (or a push/pull round announced) and not completed."""
        setup = self.active.setup
        return self.current is not None or not (self.served or setup is None
                                                or not setup.pushpull)

    # ------------------------------------------------------------------ servers
    def serve(self) -> None:
        """Servers: sum this round's owned chunks. Raises the round's error."""
        a = self.active
        setup = a.setup
        if setup is None or self.faults.refuses(a.config) or not setup.owns_units:
            return
        it = RoundState((), (), setup.streams)
        it.round = self.round
        self.round += 1
        jobs = [SummationStream(setup, it, Mailbox(), self.groups, s, self.timeout,
                                a.pools[s], a.residuals).run
                for s in range(setup.streams) if setup.units[s]]
        self._submit(it, jobs)
        self._await(it)
        if it.error is not None:
            raise it.error

    # ------------------------------------------------------------------ both
    def _submit(self, it: RoundState, jobs: list) -> None:
        config = self.active.config
        stall, delay = self.faults.stalls(config), self.faults.delay(config)
        it.add_jobs(len(jobs))
        for fn in jobs:
            self.pool.submit(self._wrap(it, fn, stall, delay))

    def _wrap(self, it: RoundState, fn: Any, stall: bool, delay: float) -> Any:
        def run() -> None:
            err: BaseException | None = None
            try:
                if delay:  # injected slowness (AUTOTUNE_FAULT)
                    time.sleep(delay)
                if stall:  # injected: go silent past the timeout
                    deadline = time.monotonic() + self.timeout + 5
                    while time.monotonic() < deadline and not it.aborted:
                        time.sleep(0.2)
                    raise OpError("injected stall (AUTOTUNE_FAULT)", (), "this rank stalled")
                fn()
            except BaseException as e:  # reported through the iteration
                err = e
            it.job_done(err)
            if err is not None and not isinstance(err, Aborted):
                it.abort()
        return run

    def lost_peers(self) -> list[int]:
        """Servers another rank posted as lost that this rank has not dropped yet."""
        if not self.info.servers:
            return []
        return sorted(set(self.liveness.lost()) - set(self.active.lost_servers))

    def _await(self, it: RoundState) -> None:
        """Wait for the round's jobs; a stretch of ``timeout`` without progress fails."""
        last, since = -1, time.monotonic()
        while not it.done.wait(0.5):
            if signals.pending():  # Ctrl-C or SIGTERM: stop here, with no lock held
                it.abort()
                signals.check()
            gone = self.lost_peers()
            if gone:  # another rank gave up a peer this round depends on
                it.abort()
                it.error = OpError("this round", gone, "given up as lost by another rank")
                return
            if it.progress != last:
                last, since = it.progress, time.monotonic()
            elif time.monotonic() - since > self.timeout + 10:
                it.abort()
                others = [r for r in range(self.info.world_size) if r != self.info.rank]
                dead = self.liveness.dead(others) or []
                who = ", ".join(self.describe(r) for r in dead) or "none"
                it.error = OpError(f"no progress for {self.timeout:.0f}s (ranks without heartbeat: "
                                   f"{who})", dead, "timeout")
                return
