"""How a session's gradients are averaged: DDP, with the runtime behind its comm hook.

``autotune.session(ddp_model)`` keeps the user's ``DistributedDataParallel``;
``autotune.session(model)`` applies DDP to the module in place
(:class:`~autotune.sessions.ddp.InPlaceDDP`); from then on both are one
:class:`HookedDDP`. DDP owns what it owns (the start, buffers, ``no_sync``, unused
parameters, buckets and their overlap with backward, checkpoints); autotune's comm hook
(:class:`~autotune.runtime.ddp.ddp_hook.CommHookState`) averages each bucket under the
configuration in force, the untuned default being DDP's own all-reduce. The
:class:`~autotune.runtime.core.Runtime` joins the world (servers included) and puts a
configuration in force on every rank (``Runtime.sync``: the configuration as int64s,
nothing pickled).

This module knows nothing of tuning: the session (:mod:`autotune.sessions.session`) says
which configuration to put in force and what to do about a failure this reports.

**Servers.** DDP's process group holds only the workers: a Summation Service runs no
forward or backward. The in-place DDP is built on the workers' group; a user's DDP on
:func:`~autotune.sessions.ddp.workers_group` (``DDP(model,
process_group=autotune.workers_group())``). A server rank that runs the user's script
serves until the job stops, then leaves the process (:meth:`HookedDDP.join`).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any, Iterator, Mapping

import torch
import torch.distributed as dist

from autotune.errors import AutotuneError, install_excepthook
from autotune.options import SessionOptions
from autotune.runtime.control.bootstrap import rendezvous_store
from autotune.runtime.control.faults import Liveness
from autotune.runtime.errors import UsageError
from autotune.sessions.ddp import InPlaceDDP, group_for, unfinished_error
from autotune.sessions.world import init_world
from autotune.tuning.space import Config

DDP = torch.nn.parallel.DistributedDataParallel

# how a collective's failure reads when gloo or NCCL raises it as a plain RuntimeError
_BACKEND_WORDS = ("gloo", "NCCL", "Connection reset", "Connection closed", "Timed out",
                  "timed out", "Broken pipe")


class HookedDDP:
    """DDP (the user's, or applied in place to ``model``) with the runtime behind its comm
    hook: join the world (:meth:`join`), start (:meth:`start`), then each iteration
    :meth:`await_average` and :meth:`put_in_force`; :meth:`release` at the end."""

    def __init__(self, model: torch.nn.Module, options: SessionOptions) -> None:
        self.model = model
        self.options = options
        self.rt: Any = None
        self._user_ddp: DDP | None = model if isinstance(model, DDP) else None
        self.in_place: InPlaceDDP | None = None  # for a plain module
        self.hook: Any = None  # the comm hook's state (runtime.ddp.ddp_hook.CommHookState)
        self._liveness: Liveness | None = None  # reads the failure a peer posted
        self._accumulating = False  # inside session.no_sync()
        # the hook's counts at the last step: buckets, backwards, forwards inside
        # no_sync(), synchronising forwards
        self._seen = (0, 0, 0, 0)

    @property
    def ddp(self) -> DDP | None:
        """The DDP that averages the gradients: the user's, or the one applied in place
        (None once that one is let go)."""
        return self.in_place.ddp if self.in_place is not None else self._user_ddp

    @property
    def params(self) -> list[torch.nn.Parameter]:
        """The parameters whose gradients are averaged."""
        return [p for p in self.ddp.module.parameters() if p.requires_grad]

    @property
    def backend(self) -> str:
        return dist.get_backend(self.ddp.process_group)

    # ------------------------------------------------------------------ set-up
    def join(self) -> None:
        """Join the ``torch.distributed`` world (made from the environment where the user
        has not) and bootstrap the runtime; a server rank serves, then leaves the process
        (``SystemExit(0)``)."""
        from autotune.runtime import Runtime

        alone = init_world(self.options.timeout)
        if alone is not None and self.options.verbose:
            from autotune.progress import message

            message(alone)
        install_excepthook()  # a peer's failure, uncaught, is one line
        # the runtime writes the averages into DDP's bucket buffers
        self.rt = Runtime.bootstrap(timeout=self.options.timeout, grad_views=False)
        if self.rt.info.role == "server":
            # A server rank that ran the user's script: serve, then leave the process.
            from autotune.server import serve_to_the_end

            serve_to_the_end(self.rt)
            raise SystemExit(0)

    def start(self) -> None:
        """Workers: DDP applied in place (a plain module) or DDP's group checked, and the
        comm hook installed."""
        from autotune.runtime.ddp.ddp_hook import CommHookState

        info = self.rt.info
        if self.ddp is None:
            self.in_place = InPlaceDDP(self.model, self.rt, group_for(self.rt),
                                       broadcast_buffers=self.options.broadcast_buffers)
            self.in_place.rebuilt = self._follow
        else:
            ranks = list(dist.get_process_group_ranks(self.ddp.process_group))
            if ranks != list(info.workers):
                raise UsageError(
                    f"DDP's process group holds ranks {ranks}, the job's workers are "
                    f"{list(info.workers)}"
                    + (f" (ranks {list(info.servers)} are Summation Service servers): build "
                       "DDP with process_group=autotune.workers_group()" if info.servers else
                       ": autotune inside DDP averages among every worker of the world"))
        self._liveness = Liveness(rendezvous_store(), info.rank)
        self.hook = CommHookState.install(self.ddp, self.rt, called=self.model)

    def _follow(self, ddp: DDP) -> None:
        """The in-place DDP was built anew (to find unused parameters): the comm hook
        goes with it."""
        self.hook.move_to(ddp)

    # ------------------------------------------------------------ the hot path
    def await_average(self) -> tuple[Exception | None, float | None] | None:
        """DDP has averaged the gradients when backward returns: ``(failure, waited)``,
        the runtime's failure the hook averaged the iteration again after (DDP's
        all-reduce; None if none) and the seconds this rank waited for the last bucket
        (None after a failure). None for a micro-step of gradient accumulation: a step
        whose backward sent no bucket and whose forward ran inside ``no_sync()`` (as
        Accelerate's ``accumulate()`` runs). Misuse raises :class:`UsageError`."""
        t = self.hook
        if self.in_place is not None:
            self.in_place.check()  # a parameter replaced would get no bucket
        if self._accumulating:  # (inside DDP's own no_sync(), as Accelerate's
            # accumulate() calls step(), a micro-step is no mistake)
            raise UsageError("session.step() inside session.no_sync(): leave the block for the "
                             "last micro-batch's backward, then call step()")
        now = (t.averaged, t.backwards, *t.buckets.forwards)
        seen, self._seen = self._seen, now
        buckets, backwards, micro, synced = (a - b for a, b in zip(now, seen))
        if not buckets:
            if micro and not synced:  # its forwards ran inside no_sync()
                return None
            if synced and any(p.grad is not None for p in self.ddp.module.parameters()):
                raise unfinished_error(self.ddp.module)  # a bucket never filled
            raise UsageError("session.step() with no backward since the last step: call it "
                             "once per iteration, after loss.backward()")
        if not backwards:  # buckets left, the last never: DDP could not finish
            raise unfinished_error(self.ddp.module)
        if backwards > 1:
            raise UsageError(
                f"{backwards} backward passes since the last step, each averaged over the "
                "wire: for gradient accumulation run all but the last inside "
                "session.no_sync() (then call session.step() once per iteration)")
        # the exposed communication: from the last bucket's hook call to backward's end
        waited = time.perf_counter() - t.last_bucket_at
        failure = t.buckets.take_failure()
        return (None, waited) if failure is None else (failure, None)

    def worker_sum(self, t: torch.Tensor) -> None:
        """All-reduce (SUM) ``t`` in place over the workers, the wait bounded."""
        self.rt.worker_sum(t)

    def put_in_force(self, config: Config | None, background: bool = False) -> Mapping[str, Any]:
        """Collective: ``config`` (the leader's; None elsewhere or to keep the active one)
        in force on every rank, the runtime's world and the hook alike; the active
        configuration. Raises :class:`~autotune.runtime.config.ConfigError` alike on every
        rank when it cannot run. ``background``: keep the active configuration, the
        servers' next round announced without waiting (``Runtime.sync``)."""
        return self.hook.sync(config, background)

    @property
    def needs_sync(self) -> bool:
        """Whether every iteration needs :meth:`put_in_force` (push/pull: the Summation
        Services serve a round a sync)."""
        return self.rt.needs_sync

    @contextlib.contextmanager
    def accumulate(self) -> Iterator[None]:
        """DDP's own ``no_sync`` (``ddp_model.no_sync()`` is the same)."""
        with self.ddp.no_sync():
            self._accumulating = True
            try:
                yield
            finally:
                self._accumulating = False

    def settle(self) -> None:
        """Settled on DDP's own all-reduce with the comm hook registered (the trials
        needed it): the in-place DDP is built anew without it, so that the rest of the
        job runs DDP's built-in all-reduce, with no Python per bucket. A user's DDP keeps
        the hook: DDP cannot take one back (docs/ddp.md)."""
        t = self.hook
        if (self.in_place is not None and t.hooked and t.buckets.ddp_allreduce
                and t.sample is None):
            t.unhook(self.in_place.plain())

    # ------------------------------------------------------------------ closing
    def peer_failure(self, exc: BaseException | None) -> Exception | None:
        """What ended the block, as the failure that caused it where that was a peer's:
        DDP's own all-reduce broke in backward (torch's error, which names no rank), so
        the failure another rank posted, else the fault the hook blamed on a peer, else
        the runtime's blame of the collective; None where ``exc`` names its own cause
        (autotune's errors, a misuse)."""
        if not isinstance(exc, Exception) or isinstance(exc, (AutotuneError, TypeError)):
            return None
        info = self.rt.info if self.rt is not None else None
        peer = None
        if self._liveness is not None:
            peer = self._liveness.failure(info.workers, lambda r: f"rank {r}")
        if peer is None and self.hook is not None:
            peer = self.hook.buckets.fatal
        if peer is None and self._ddp_broke(exc):
            peer = self.rt.blame(f"DDP's built-in all-reduce on rank {info.rank}",
                                 list(info.workers), exc)
        return peer

    def _ddp_broke(self, exc: Exception) -> bool:
        """Whether ``exc`` is DDP's built-in all-reduce failing (no comm hook registered:
        torch's error from backward, which names no rank): a ``torch.distributed``
        error, or a runtime error the backend wrote."""
        if self.hook is None or self.hook.hooked or self.rt is None:
            return False
        return isinstance(exc, dist.DistError) or (
            isinstance(exc, RuntimeError) and any(m in str(exc) for m in _BACKEND_WORDS))

    def stop(self, config: Config | None, leader: bool) -> None:
        """The clean end, collective: the leader sends the stop with the configuration
        kept (the others take it at their last sync)."""
        with warnings.catch_warnings():
            # The sync after the last step() opened an iteration nobody runs; the
            # runtime closes it (and says so): expected here.
            warnings.simplefilter("ignore", RuntimeWarning)
            if leader:
                self.rt.sync(config, stop=True)
            else:
                self.rt.sync()

    def shutdown(self, failed: BaseException | None = None) -> None:
        """Release the runtime (after ``failed``: without joining a collective)."""
        self.rt.shutdown(failed=failed)

    def release(self, clean: bool) -> None:
        """The model as it was: a user's DDP is plain DDP again (ready for another
        session), a plain module is plain again (DDP removed; ``clean``: the session
        ended without an error)."""
        try:
            if self.hook is not None:
                self.hook.detach()
        finally:
            if self.in_place is not None:
                self.in_place.remove(clean=clean)
