"""The session: one runtime behind DDP's comm hook, whichever model the user passes.

``autotune.session(ddp_model)`` keeps the user's ``DistributedDataParallel``;
``autotune.session(model)`` applies DDP to the module in place
(:class:`~autotune.sessions.ddp.InPlaceDDP`) and is from then on the same session. DDP
owns what it owns (the start, buffers, ``no_sync``, unused parameters, buckets and their
overlap with backward, checkpoints); autotune's comm hook
(:class:`~autotune.runtime.ddp_hook.BucketTransport`) averages each bucket under the
configuration in force, the untuned default being DDP's own all-reduce. The
:class:`~autotune.runtime.core.Runtime` joins the world (servers included), puts the
leader's configuration in force at every ``step()`` (``Runtime.sync``: the configuration
as int64s, nothing pickled) and runs everything else: push/pull through the Summation
Services, the intra-machine modes, several streams, codecs
(:mod:`autotune.runtime.ddp_buckets`). ``step()`` counts the iteration (the gradients are
averaged when backward returns), measures it and puts in force what the leader's trial
schedule runs next.

**Faults.** A configuration that fails is scored as failed; the hook has averaged the
iteration's buckets again with DDP's all-reduce, and the last good configuration is put
in force; lost servers shrink the space. A rank whose own code fails posts its exception
in the rendezvous store as it leaves; a rank whose session then ends by an error (DDP's
own all-reduce broken in backward) raises the :class:`~autotune.runtime.errors.PeerFailed`
that names the failed rank and its cause instead.

**Servers.** DDP's process group holds only the workers: a Summation Service runs no
forward or backward. The in-place DDP is built on the workers' group; a user's DDP on
:func:`~autotune.sessions.ddp.workers_group` (``DDP(model,
process_group=autotune.workers_group())``). A server rank that runs the user's script
serves until the job stops, then leaves the process.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any, Iterator, Mapping

import torch
import torch.distributed as dist

from autotune.errors import AutotuneError, install_excepthook
from autotune.runtime.bootstrap import rendezvous_store
from autotune.runtime.errors import RuntimeFault, ServerLost, UsageError
from autotune.runtime.faults import Liveness
from autotune.sessions.base import DDP, TuningSession
from autotune.sessions.ddp import InPlaceDDP, group_for, unfinished_error
from autotune.sessions.options import SessionOptions
from autotune.sessions.tuners import job_space
from autotune.sessions.world import init_world
from autotune.signals import shielded, status_of
from autotune.tuning.space import Config


# how a collective's failure reads when gloo or NCCL raises it as a plain RuntimeError
_BACKEND_WORDS = ("gloo", "NCCL", "Connection reset", "Connection closed", "Timed out",
                  "timed out", "Broken pipe")


class Session(TuningSession):
    """What ``autotune.session(model, ...)`` returns, for a plain module (DDP applied in
    place) or a ``DistributedDataParallel`` model (kept); see the module docstring."""

    def __init__(self, model: torch.nn.Module, options: SessionOptions | None = None) -> None:
        super().__init__(model, options)
        self.rt: Any = None
        self._user_ddp: DDP | None = model if isinstance(model, DDP) else None
        self.in_place: InPlaceDDP | None = None  # for a plain module
        self.transport: Any = None
        self._liveness: Liveness | None = None  # reads the failure a peer posted
        self._servers_dropped = False
        self._accumulating = False  # inside tuner.no_sync()
        # the hook's counts at the last step: buckets, backwards, forwards inside
        # no_sync(), synchronising forwards
        self._seen = (0, 0, 0, 0)

    @property
    def ddp(self) -> DDP | None:
        """The DDP that averages the gradients: the user's, or the one applied in place
        (None once that one is let go)."""
        return self.in_place.ddp if self.in_place is not None else self._user_ddp

    @property
    def is_leader(self) -> bool:
        """Whether this rank is the runtime's leader: the first *worker*, whichever ranks
        are servers. It tunes, records to the store, shows progress and sends the stop."""
        return self.rt is not None and self.rt.info.rank == self.rt.info.leader

    # ------------------------------------------------------------------ set-up
    def _open(self) -> None:
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
        try:
            self._start()
        except BaseException as exc:
            # e.g. the workers' models differ: release the runtime, close the run (if the
            # leader opened one), let the error out.
            self._close(exc)
            raise

    def _start(self) -> None:
        """Workers: DDP applied in place (a plain module) or DDP's group checked, the hook
        installed, the space built, the first configuration in force."""
        from autotune.runtime.ddp_hook import BucketTransport

        self.info = info = self.rt.info
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
        self.transport = BucketTransport.install(self.ddp, self.rt, called=self.model)
        self.space = job_space(self.rt, allow_lossy=self.options.allow_lossy,
                               fixed=self.options.fixed)
        params = [p for p in self.ddp.module.parameters() if p.requires_grad]
        self._measures(params)
        probe = self._efficiency_probe
        self.transport.sample = probe.sample if probe is not None else None
        self._apply(self._lead(params, dist.get_backend(self.ddp.process_group))
                    if self.is_leader else None)

    def _settled(self) -> None:
        """Settled on DDP's own all-reduce with the comm hook registered (the trials
        needed it): the in-place DDP is built anew without it, so that the rest of the
        job runs DDP's built-in all-reduce, with no Python per bucket. A user's DDP keeps
        the hook: DDP cannot take one back (docs/ddp.md)."""
        t = self.transport
        if (self.in_place is not None and t.hooked and t.buckets.ddp_allreduce
                and t.sample is None):
            t.unhook(self.in_place.plain())

    def _follow(self, ddp: DDP) -> None:
        """The in-place DDP was built anew (to find unused parameters): the comm hook
        goes with it."""
        self.transport.move_to(ddp)

    # ------------------------------------------------------------ the hot path
    def _await_average(self) -> tuple[str | None, float | None] | None:
        """DDP has averaged the gradients when backward returns (a round the runtime
        failed was averaged again by the hook: the fallback is put in force, lost servers
        dropped). A step whose backward sent no bucket and whose forward ran inside
        ``no_sync()`` is a micro-step of gradient accumulation (as Accelerate's
        ``accumulate()`` runs): not an iteration."""
        t = self.transport
        if self.in_place is not None:
            self.in_place.check()  # a parameter replaced would get no bucket
        if self._accumulating:  # (inside DDP's own no_sync(), as Accelerate's
            # accumulate() calls step(), a micro-step is no mistake)
            raise UsageError("tuner.step() inside tuner.no_sync(): leave the block for the "
                             "last micro-batch's backward, then call step()")
        now = (t.averaged, t.backwards, *t.buckets.forwards)
        seen, self._seen = self._seen, now
        buckets, backwards, micro, synced = (a - b for a, b in zip(now, seen))
        if not buckets:
            if micro and not synced:  # its forwards ran inside no_sync()
                return None
            if synced and any(p.grad is not None for p in self.ddp.module.parameters()):
                raise unfinished_error(self.ddp.module)  # a bucket never filled
            raise UsageError("tuner.step() with no backward since the last step: call it "
                             "once per iteration, after loss.backward()")
        if not backwards:  # buckets left, the last never: DDP could not finish
            raise unfinished_error(self.ddp.module)
        if backwards > 1:
            raise UsageError(
                f"{backwards} backward passes since the last step, each averaged over the "
                "wire: for gradient accumulation run all but the last inside "
                "tuner.no_sync() (then call tuner.step() once per iteration)")
        # the exposed communication: from the last bucket's hook call to backward's end
        waited = time.perf_counter() - t.last_bucket_at
        failure = t.buckets.take_failure()
        if failure is None:
            return None, waited
        if isinstance(failure, ServerLost):
            self._lose_servers(failure)
        self._apply(self.schedule.fallback() if self.is_leader else None, retrying=True)
        return str(failure), None

    def _worker_sum(self, t: torch.Tensor) -> None:
        self.rt.worker_sum(t)

    @contextlib.contextmanager
    def _accumulate(self) -> Iterator[None]:
        with self.ddp.no_sync():  # DDP's own (``ddp_model.no_sync()`` is the same)
            self._accumulating = True
            try:
                yield
            finally:
                self._accumulating = False

    def _lose_servers(self, exc: ServerLost) -> None:
        """Servers stopped; the runtime already dropped them. Shrink the space to what is
        left; the leader reports, records, and starts the tuning over at the next step."""
        if self._servers_dropped:
            return
        self._servers_dropped = True
        self.space = job_space(self.rt, allow_lossy=self.options.allow_lossy,
                               fixed=self.options.fixed)
        if self.is_leader:
            self.schedule.servers_lost(self.space, exc.servers, str(exc), self.config)

    def _put_in_force(self, config: Config | None) -> Mapping[str, Any]:
        return self.transport.sync(config)  # the runtime's world and the hook alike

    def _sync_each_iteration(self) -> bool:
        return self.rt.needs_sync  # push/pull: the Summation Services serve a round a sync

    def _apply_fault(self, exc: RuntimeFault, config: Config | None,
                     retrying: bool) -> Config | None:
        if not exc.recoverable:
            raise exc
        if isinstance(exc, ServerLost):
            # lost at an iteration boundary: nothing to average again; keep the
            # configuration if it can still run, the tuner starts over next step
            self._lose_servers(exc)
            if self.is_leader and config is not None and not self.schedule.allowed(config):
                config = self.schedule.fallback()
            return config
        return self._rejected(config, exc, retrying)

    # ------------------------------------------------------------------ closing
    def _close(self, exc: BaseException | None) -> None:
        # DDP's own all-reduce broke in backward (torch's error, which names no rank):
        # the failure another rank posted, if any; autotune's errors name their cause
        # (the failure another rank posted, else the fault the hook blamed on a peer)
        peer = None
        if isinstance(exc, Exception) and not isinstance(exc, (AutotuneError, TypeError)):
            if self._liveness is not None:
                peer = self._liveness.failure(self.info.workers, lambda r: f"rank {r}")
            if peer is None and self.transport is not None:
                peer = self.transport.buckets.fatal
            if peer is None and self._ddp_broke(exc):
                peer = self.rt.blame(f"DDP's built-in all-reduce on rank {self.info.rank}",
                                     list(self.info.workers), exc)
        try:
            self._leave(peer or exc)
        finally:
            if self.transport is not None:
                self.transport.detach()  # a user's DDP is plain DDP again, ready for another
            if self.in_place is not None:
                self.in_place.remove(clean=exc is None)  # the module is plain again
        if peer is not None:
            raise peer from exc

    def _ddp_broke(self, exc: Exception) -> bool:
        """Whether ``exc`` is DDP's built-in all-reduce failing (no comm hook registered:
        torch's error from backward, which names no rank): a ``torch.distributed``
        error, or a runtime error the backend wrote."""
        if self.transport is None or self.transport.hooked or self.rt is None:
            return False
        return isinstance(exc, dist.DistError) or (
            isinstance(exc, RuntimeError) and any(m in str(exc) for m in _BACKEND_WORDS))

    def _leave(self, exc: BaseException | None) -> None:
        """Stop the others (the leader's stop at the last sync) and close the run; after
        an error, release without joining a collective."""
        if exc is not None:
            # Another rank may be waiting in a collective: don't join one, just release
            # (this rank's own failure is posted first: the others name it and its cause).
            # Stopped by Ctrl-C/SIGTERM: no further signal cuts the closing short.
            with shielded(isinstance(exc, KeyboardInterrupt)):
                self.display.settled(None, status_of(exc))
                self.rt.shutdown(failed=exc)
                if self.is_leader:
                    self._finish(exc)
            return
        try:
            with warnings.catch_warnings():
                # The sync after the last step() opened an iteration nobody runs; the
                # runtime closes it (and says so): expected here.
                warnings.simplefilter("ignore", RuntimeWarning)
                if self.is_leader:
                    self.rt.sync(self.config, stop=True)
                else:
                    self.rt.sync()
        except BaseException as stopped:  # e.g. SIGTERM while stopping: close the run
            with shielded(isinstance(stopped, KeyboardInterrupt)):
                self.rt.shutdown()
                if self.is_leader:
                    self._finish(stopped)
            raise
        self.rt.shutdown()
        if self.is_leader:
            self._finish(None)


#: The same class by its former name (a DDP model's session), kept for old imports.
DDPSession = Session
