"""The session: what ``autotune.session(model, ...)`` returns, whichever model the user passes.

``autotune.session(ddp_model)`` keeps the user's ``DistributedDataParallel``;
``autotune.session(model)`` applies DDP to the module in place; from then on both are one
session: DDP with autotune's runtime behind its comm hook
(:class:`~autotune.sessions.hooked.HookedDDP`, which knows nothing of tuning). The
:class:`Session` measures each iteration, and on the leader the trial schedule
(:mod:`autotune.schedule.schedule`) says what the next one runs; it puts that in force on
every rank (the apply-and-retry loop, :class:`~autotune.sessions.in_force.InForce`, the
one holder of the configuration in force), records to the store, shows the progress and ends
with the table; its results (``best``, ``history``, the scores) are
:class:`~autotune.leader.results.SessionResults`'.

``step()`` counts the iteration (the gradients are averaged when backward returns),
measures it and puts in force what the leader's trial schedule runs next.

**Faults.** A configuration that fails is scored as failed; the hook has averaged the
iteration's buckets again with DDP's all-reduce, and the last good configuration is put
in force; lost servers shrink the space. A rank whose own code fails posts its exception
in the rendezvous store as it leaves; a rank whose session then ends by an error (DDP's
own all-reduce broken in backward) raises the :class:`~autotune.runtime.errors.PeerFailed`
that names the failed rank and its cause instead.
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
from typing import TYPE_CHECKING, Any, Iterator

import torch

from autotune.errors import shown_by_rank_0
from autotune.leader.display import SessionDisplay, report
from autotune.leader.leader import Leader
from autotune.leader.record import SessionRun
from autotune.leader.results import SessionResults
from autotune.options import SessionOptions
from autotune.runtime.errors import ServerLost, UsageError
from autotune.schedule.ledger import Ledger
from autotune.schedule.schedule import Drift, TrialSchedule
from autotune.sessions.hooked import DDP, HookedDDP
from autotune.sessions.in_force import InForce
from autotune.sessions.iteration import IterationMeter
from autotune.signals import TerminateAsInterrupt, check, deferred, shielded, status_of
from autotune.tuning.space import Config, SearchSpace

if TYPE_CHECKING:
    from typing_extensions import Self


class Session(SessionResults):
    """What :func:`autotune.session` returns, for a plain module (DDP applied in place) or
    a ``DistributedDataParallel`` model (kept): use it as a context manager around the
    training loop and call :meth:`step` after each iteration's backward (the settings:
    :class:`~autotune.options.SessionOptions`; the module docstring says the
    rest)."""

    def __init__(self, model: torch.nn.Module, options: SessionOptions | None = None) -> None:
        _check_model(model)
        options = options if options is not None else SessionOptions()
        self.model = model
        self.options = options
        self._drift = (Drift(options.retune_on_drift, options.drift_window,
                             max(10, options.budget // 5))
                       if options.retune_on_drift else None)
        self._run = SessionRun(options.db, options.job,
                               model.module if isinstance(model, DDP) else model)
        self.display = SessionDisplay(options.verbose, self.unit, lambda: self.best_score,
                                      lambda: self.tuning_cost)
        self.hooked = HookedDDP(model, options)  # how the gradients are averaged
        self.leader: Leader | None = None  # the leader's tuning
        self.info: Any = None                       # the world (runtime.control.world.WorldInfo)
        self.in_force = InForce(self.hooked, options)  # the configuration in force
        self.iteration = 0  # iterations completed (step() calls that synchronised)
        self._state = "new"  # new -> open (inside ``with``) -> closed
        self._signals: TerminateAsInterrupt | None = None  # installed by __enter__
        self._made_s = 0.0  # how long autotune.session() took to make it (its imports)
        self._start_s: float | None = None  # that, and how long entering it took
        self._t_last = 0.0
        # step() measures no iteration up to this one (the schedule's quiet_for(); inf:
        # settled, nothing more), those after this one, from this time (a finite stretch)
        self._quiet_until: float = 0
        self._quiet_start = 0
        self._quiet_from: float | None = None
        self.meter = IterationMeter(self.hooked)  # what each iteration measures

    @property
    def is_leader(self) -> bool:
        """Whether this rank is the session's leader: the first *worker*, whichever ranks
        are servers. It tunes, records to the store, shows progress and sends the stop."""
        return self.rt is not None and self.rt.info.rank == self.rt.info.leader

    @property
    def rt(self) -> Any:
        """The runtime (:class:`~autotune.runtime.core.Runtime`)."""
        return self.hooked.rt

    @property
    def ddp(self) -> DDP | None:
        """The DDP that averages the gradients: the user's, or the one applied in place."""
        return self.hooked.ddp

    @property
    def space(self) -> SearchSpace | None:  # type: ignore[override]
        """The job's space (smaller once servers are lost)."""
        return self.in_force.space

    @property
    def config(self) -> Config | None:  # type: ignore[override]
        """The configuration in force on every rank."""
        return self.in_force.config

    @property
    def ledger(self) -> Ledger | None:  # type: ignore[override]
        """The leader's trials (None on the other ranks)."""
        return self.leader.ledger if self.leader is not None else None

    @property
    def schedule(self) -> TrialSchedule | None:  # type: ignore[override]
        """The leader's trial schedule (None on the other ranks)."""
        return self.leader.schedule if self.leader is not None else None

    def __enter__(self) -> Self:
        if self._state != "new":
            raise UsageError("this session was already entered: make a new one with "
                             "autotune.session(model, ...) for another `with` block")
        # Ctrl-C and SIGTERM, until __exit__: recorded inside the library and raised at a
        # safe point, so the run closes as ``aborted`` (autotune.signals)
        self._signals = TerminateAsInterrupt((signal.SIGINT, signal.SIGTERM),
                                             on_signal=self._close_now)
        opened = False
        try:
            with deferred():  # (installed inside: a signal meanwhile is only recorded)
                self._signals.install()
                started = time.perf_counter()
                self._open()  # releases what it made if it fails itself
                self._start_s = self._made_s + time.perf_counter() - started
                opened = True
        except BaseException as exc:  # (a stop that arrived while it ran, raised after it)
            self._state = "closed"
            try:
                if opened:
                    with shielded():
                        self._close(exc)
            finally:
                self._restore_signals()
            raise
        self._state = "open"
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: Any) -> None:
        self._state = "closed"
        if exc_type is not None and exc is None:
            exc = exc_type()
        try:
            with deferred():
                self._close(exc)
        finally:
            self._restore_signals()

    def step(self, loss: Any = None) -> None:
        """After the iteration's backward: return once every ``.grad`` holds the gradient
        averaged over the workers, measure the iteration and put in force what the leader's
        trial schedule runs next. Collective: every worker calls it once per iteration.
        ``loss``: the iteration's training loss (a number or a one-element tensor), which
        ``allow_lossy`` needs: a codec is kept only where the loss falls sooner
        (docs/compression.md, "The loss test"); it is read only while measured.
        A micro-step whose backward ran inside ``no_sync()`` (gradient accumulation, as
        Accelerate's ``accumulate()`` does) is not an iteration: it returns at once."""
        self._require_open("step()")
        check()  # a stop recorded during backward (in a gradient hook) ends the loop here
        with deferred():
            try:
                averaged = self._await_average()
            except UsageError as e:  # the same loop on every worker: the same mistake
                raise shown_by_rank_0(e)
            if averaged is None:
                return
            failed, waited = averaged
            self.iteration += 1
            if self.iteration <= self._quiet_until and failed is None:
                if self.hooked.needs_sync:  # no collective of its own, but a sync where
                    self._apply(None, background=True)  # push/pull or servers need one
                self._t_last = time.perf_counter()
                return
            if self._quiet_from is not None:  # a quiet stretch ended (a failure cuts it)
                if self.is_leader:
                    self.schedule.skipped(self.iteration - 1 - self._quiet_start,
                                          self._t_last - self._quiet_from)
            measuring = time.perf_counter()
            elapsed = measuring - self._t_last
            slowest, comm_s, efficiency, quiet, mean_loss = self.meter.reduce(
                float("inf") if failed else elapsed, waited,
                float(self.schedule.quiet_for()) if self.is_leader else 0.0,
                self.in_force.lossy, _number(loss))
            # the measuring's own collective: its time beyond the wait for the slowest
            # worker (which ``slowest`` holds) is on every rank's clock, as the schedule's
            measure_s = time.perf_counter() - measuring - (slowest - elapsed)
            nxt = (self.schedule.next(self.config, slowest, failed, comm_s=comm_s,
                                      efficiency=efficiency, loss=mean_loss,
                                      measure_s=measure_s if math.isfinite(slowest) else 0.0)
                   if self.is_leader else None)
            applying = time.perf_counter()
            self._apply(nxt)
            if self.is_leader:  # the switch is on the job's clock (the search's, tuning)
                self.schedule.applied(time.perf_counter() - applying)
            if failed is not None:
                quiet = 0.0
            elif quiet == math.inf:
                self.hooked.settle()
            self._quiet_start, self._quiet_until = self.iteration, self.iteration + quiet
            self._quiet_from = self._t_last if 0 < quiet < math.inf else None
            self.meter.begin(self.iteration, self.in_force.lossy)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """As DDP's ``no_sync``: backward passes inside only accumulate into ``.grad``
        locally; the next backward outside it communicates the accumulated gradient and
        :meth:`step` returns its average (``docs/ddp.md``)."""
        self._require_open("no_sync()")
        with self.hooked.accumulate():
            yield

    # ------------------------------------------------------------------ set-up
    def _open(self) -> None:
        """Join the world (a server rank serves, then leaves the process); workers start
        DDP with the hook, build the space, and put the first configuration in force
        (the leader's: :class:`~autotune.leader.leader.Leader`)."""
        self.hooked.join()
        try:
            self.info = self.rt.info
            self.hooked.start()
            space = self.in_force.space_of_job()
            params = self.hooked.params
            self.meter.start(self.options, self.info, params)
            probe = self.meter.probe
            self.hooked.hook.sample = probe.sample if probe is not None else None
            first = None
            if self.is_leader:
                self.leader = Leader(self.options, self._run, self.display)
                first = self.leader.start(self.model, self.info, space, params,
                                          self.hooked.backend, self.score_unit,
                                          link=self.meter.link, drift=self._drift,
                                          goodput=probe is not None)
                self.in_force.schedule = self.leader.schedule
            self._apply(first)
        except BaseException as exc:
            # e.g. the workers' models differ: release the runtime, close the run (if the
            # leader opened one), let the error out.
            self._close(exc)
            raise

    # ------------------------------------------------------------ the hot path
    def _await_average(self) -> tuple[str | None, float | None] | None:
        """Wait until ``.grad`` holds the average (:meth:`HookedDDP.await_average`):
        ``(failed, waited)``, the failure the iteration was averaged again after (the
        fallback is then put in force, lost servers dropped) and the seconds this rank
        waited; None for a micro-step that only accumulated."""
        averaged = self.hooked.await_average()
        if averaged is None or averaged[0] is None:
            return averaged  # type: ignore[return-value]
        failure = averaged[0]
        if isinstance(failure, ServerLost):
            self.in_force.lose_servers(failure)
        self._apply(self.schedule.fallback() if self.is_leader else None, retrying=True)
        return str(failure), None

    def _apply(self, config: Config | None, retrying: bool = False,
               background: bool = False) -> None:
        """Put ``config`` in force on every rank (:meth:`InForce.put`; ``background``: the
        configuration kept, its message not waited for); the next iteration's time starts
        after it."""
        self.in_force.put(config, retrying, background)
        self._t_last = time.perf_counter()

    def _require_open(self, call: str) -> None:
        if self._state == "new":
            raise UsageError(
                f"session.{call} outside its `with` block: a session is a context manager; "
                "write `with autotune.session(model, ...) as session:` around the training loop "
                f"and call session.{call} inside it")
        if self._state == "closed":
            raise UsageError(f"session.{call} after the session's `with` block ended: the "
                             "session is closed; open a new one for more training")

    # ------------------------------------------------------------------ closing
    def _close(self, exc: BaseException | None) -> None:
        """Leave: stop the others and close the run (``exc``: what ended the block; DDP's
        own all-reduce broken by a peer is raised as that peer's failure)."""
        peer = self.hooked.peer_failure(exc)
        try:
            self._leave(peer or exc)
        finally:
            self.hooked.release(clean=exc is None)
        if peer is not None:
            raise peer from exc

    def _leave(self, exc: BaseException | None) -> None:
        """Stop the others (the leader's stop at the last sync) and close the run; after
        an error, release without joining a collective."""
        if exc is not None:
            # Another rank may be waiting in a collective: don't join one, just release
            # (this rank's own failure is posted first: the others name it and its cause).
            # Stopped by Ctrl-C/SIGTERM: no further signal cuts the closing short.
            with shielded(isinstance(exc, KeyboardInterrupt)):
                self.display.ended(None, status_of(exc))
                self.hooked.shutdown(failed=exc)
                if self.is_leader:
                    self._finish(exc)
            return
        try:
            self.hooked.stop(self.config, self.is_leader)
        except BaseException as stopped:  # e.g. SIGTERM while stopping: close the run
            with shielded(isinstance(stopped, KeyboardInterrupt)):
                self.hooked.shutdown()
                if self.is_leader:
                    self._finish(stopped)
            raise
        self.hooked.shutdown()
        if self.is_leader:
            self._finish(None)

    def _finish(self, exc: BaseException | None) -> None:
        """On the leader, when the session ends (``exc``: the exception that ended it):
        stop the display, close the run (``finished``; ``aborted`` for Ctrl-C or SIGTERM,
        with the trials so far and the best of them; ``failed`` otherwise: nothing then
        says ``done`` or ``kept``) and, when it went well, print the table."""
        status = status_of(exc)
        ok = status == "finished"
        with shielded(status == "aborted"):
            self.display.ended(self.best if ok else None, status)
            if self.leader is not None:
                self.leader.close(status, kept=self.best, cost=self.tuning_cost)
        if ok and self.options.verbose and self.ledger is not None:
            report(self)

    def _close_now(self, signum: int) -> None:
        """SIGINT or SIGTERM arrived (called from the signal watcher's thread, at once,
        even while this rank waits in a collective that a stopped peer never joins): close
        the run as ``aborted`` now; :meth:`_finish` closes it again when the main thread
        gets there (with the truth, if it carries on)."""
        if self.ledger is not None:
            self.ledger.close("aborted", kept=self.best)

    def _restore_signals(self) -> None:
        if self._signals is not None:
            self._signals.restore()


#: The same class by its former names (the session's base; a DDP model's session),
#: kept for old imports.
TuningSession = DDPSession = Session


def _check_model(model: Any) -> None:
    """A model autotune cannot tune: an error that says what to pass instead."""
    if isinstance(model, torch.nn.DataParallel):
        raise TypeError(
            "session() got a model wrapped in DataParallel (one process, several GPUs), "
            "which autotune cannot tune: use DistributedDataParallel "
            "(autotune.session(DistributedDataParallel(model), ...)) or pass the module")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"session() needs an nn.Module, got {type(model).__name__}")


def _number(loss: Any) -> float | None:
    """``session.step(loss=...)``'s loss as a float (None: not passed)."""
    if loss is None:
        return None
    try:
        return float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
    except (TypeError, ValueError, RuntimeError) as e:
        raise UsageError(f"session.step(loss=...) takes the iteration's loss, a number or a "
                         f"one-element tensor, not {type(loss).__name__}: {e}") from None
