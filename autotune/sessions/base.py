"""What every step of a session does: the iteration, the leader's tuning, its results.

``autotune.session(model, ...)`` returns a :class:`~autotune.sessions.session.Session`
(a plain module or a DDP model alike: DDP averages the gradients through autotune's comm
hook). :class:`TuningSession`, its base, holds what does not depend on how the gradients
are averaged: it measures each iteration, and on the leader the trial schedule
(:mod:`autotune.tuning.schedule`) says what the next one runs; it records to the store,
shows the progress and ends with the table.
"""

from __future__ import annotations

import abc
import contextlib
import math
import signal
import time
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import torch

from autotune.runtime.config import ConfigError
from autotune.runtime.errors import RuntimeFault, UsageError
from autotune.errors import shown_by_rank_0
from autotune.sessions.calibrate import measure_link
from autotune.sessions.display import SessionDisplay, report
from autotune.sessions.efficiency_probe import EfficiencyProbe
from autotune.sessions.options import SessionOptions
from autotune.sessions.record import SessionRun
from autotune.sessions.results import SessionResults
from autotune.sessions.tuners import JobTuners
from autotune.signals import TerminateAsInterrupt, check, deferred, shielded, status_of
from autotune.tuning.schedule import Drift, TrialSchedule
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trials import TrialDriver
from autotune.tuning.tuner import GP_LIBRARIES

if TYPE_CHECKING:
    from typing_extensions import Self

DDP = torch.nn.parallel.DistributedDataParallel

#: Configurations tried in a row before putting one in force is given up as broken.
MAX_APPLY_TRIES = 1000


class TuningSession(SessionResults, abc.ABC):
    """The base of what :func:`autotune.session` returns: use it as a context manager
    around the training loop and call :meth:`step` after each iteration's backward (the
    settings: :class:`~autotune.sessions.options.SessionOptions`). The iteration, the
    apply-and-retry loop, the leader's tuning and the misuse checks are here; how the
    gradients are averaged and a configuration is put in force (:meth:`_await_average`,
    :meth:`_worker_sum`, :meth:`_put_in_force`) is the
    :class:`~autotune.sessions.session.Session`'s; the results (``best``, ``history``, the
    scores) are :class:`SessionResults`'."""

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
        self.info: Any = None                       # the world (runtime.world.WorldInfo)
        self.space: SearchSpace | None = None
        self.driver: TrialDriver | None = None      # the leader's
        self.schedule: TrialSchedule | None = None  # the leader's
        self.config: Config | None = None
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
        # allow_lossy scored by goodput, with several workers: made by the kind's _open
        self._efficiency_probe: EfficiencyProbe | None = None
        self._link: dict[str, float] = {}  # the link as timed at the start (_measures)
        self._tuners: JobTuners | None = None  # the leader's

    # ------------------------------------------------------------ the protocol
    @property
    @abc.abstractmethod
    def is_leader(self) -> bool:
        """Whether this rank is the session's leader (the first worker): it tunes, records
        to the store and shows the progress."""

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

    def step(self) -> None:
        """After the iteration's backward: return once every ``.grad`` holds the gradient
        averaged over the workers, measure the iteration and put in force what the leader's
        trial schedule runs next. Collective: every worker calls it once per iteration.
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
                if self._sync_each_iteration():  # no collective of its own, but a sync
                    self._apply(None)            # where push/pull or servers need one
                self._t_last = time.perf_counter()
                return
            if self._quiet_from is not None:  # a quiet stretch ended (a failure cuts it)
                if self.is_leader:
                    self.schedule.skipped(self.iteration - 1 - self._quiet_start,
                                          self._t_last - self._quiet_from)
            elapsed = time.perf_counter() - self._t_last
            slowest, comm_s, efficiency, quiet = self._reduce(
                float("inf") if failed else elapsed, waited)
            nxt = (self.schedule.next(self.config, slowest, failed, comm_s=comm_s,
                                      efficiency=efficiency)
                   if self.is_leader else None)
            applying = time.perf_counter()
            self._apply(nxt)
            if self.is_leader:  # the switch is on the job's clock (the search's, tuning)
                self.schedule.applied(time.perf_counter() - applying)
            if failed is not None:
                quiet = 0.0
            elif quiet == math.inf:
                self._settled()
            self._quiet_start, self._quiet_until = self.iteration, self.iteration + quiet
            self._quiet_from = self._t_last if 0 < quiet < math.inf else None
            if self._efficiency_probe is not None:  # coordinates only where a codec's error is
                self._efficiency_probe.sample.begin(self.iteration, coordinates=self._lossy())

    def _settled(self) -> None:
        """Every worker, at the same step: the configuration in force stays (nothing
        measured can change it any more)."""

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """As DDP's ``no_sync``: backward passes inside only accumulate into ``.grad``
        locally; the next backward outside it communicates the accumulated gradient and
        :meth:`step` returns its average (``docs/ddp.md``)."""
        self._require_open("no_sync()")
        with self._accumulate():
            yield

    def _reduce(self, elapsed: float, waited: float | None
                ) -> tuple[float, float | None, float | None, float]:
        """Collective over the workers, one all-reduce (SUM) an iteration: the slowest
        worker's time (a failure anywhere is infinity), the least any worker waited for
        the averaged gradients (the communication the configuration leaves exposed;
        None where the kind cannot tell), when scored by goodput the iteration's
        statistical efficiency (:mod:`autotune.sessions.efficiency_probe`; else None), and whether
        how many iterations after this one the leader's schedule needs no measurement of
        (:meth:`TrialSchedule.quiet_for`, before this iteration; ``inf``: settled, from the
        next iteration on :meth:`step` measures nothing). Each
        worker's times go in a slot of its own."""
        n = len(self.info.workers)
        me = self.info.workers.index(self.info.rank)
        probe = self._efficiency_probe
        extra = probe.payload() if probe is not None else torch.zeros(0, dtype=torch.float64)
        t = torch.zeros(2 * n + 1 + len(extra), dtype=torch.float64)
        t[me], t[n + me] = elapsed, waited if waited is not None else math.nan
        t[2 * n] = float(self.schedule.quiet_for()) if self.is_leader else 0.0
        t[2 * n + 1:] = extra
        self._worker_sum(t)
        slowest, least = float(t[:n].max()), float(t[n:2 * n].min())
        efficiency = probe.finish(t[2 * n + 1:], self._lossy()) if probe is not None else None
        return slowest, None if math.isnan(least) else least, efficiency, float(t[2 * n])

    def _lossy(self) -> bool:
        """Whether the active configuration runs a codec (the same on every rank)."""
        return (self.config or {}).get("compression", "none") != "none"

    def _measures(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Called by the kind's :meth:`_open` on every worker, before the leader leads:
        measure efficiency if it is scored; time the link for the leader's prior if it
        will tune with one (:func:`autotune.sessions.calibrate.measure_link`)."""
        o, workers = self.options, len(self.info.workers)
        if o.goodput and workers > 1:
            self._efficiency_probe = EfficiencyProbe(params, workers, self.info.rank)
            self._efficiency_probe.sample.begin(0)
        if o.prior and o.budget and workers > 1 and self.info.n_machines > 1:
            self._link = measure_link(self._worker_sum, workers=workers)

    # ------------------------------------------------------- what each kind does
    @abc.abstractmethod
    def _open(self) -> None:
        """Join the world, start like DDP, build the space, put the first configuration
        in force (the leader: :meth:`_lead`)."""

    @abc.abstractmethod
    def _close(self, exc: BaseException | None) -> None:
        """Leave: stop the others and close the run (``exc``: what ended the block)."""

    @abc.abstractmethod
    def _await_average(self) -> tuple[str | None, float | None] | None:
        """Wait until ``.grad`` holds the average: ``(failed, waited)``, the failure the
        iteration was averaged again after (or None) and the seconds this rank waited
        (None where the kind cannot tell); None for a micro-step that only accumulated."""

    @abc.abstractmethod
    def _worker_sum(self, t: torch.Tensor) -> None:
        """All-reduce (SUM) the float64 tensor ``t`` in place over the workers, the wait
        bounded (:meth:`_reduce`)."""

    @abc.abstractmethod
    def _put_in_force(self, config: Config | None) -> Mapping[str, Any]:
        """Collective: the leader's ``config`` (None: keep the active one) in force on every
        rank; the active configuration. Raises :class:`ConfigError` alike on every rank
        when it cannot run."""

    @abc.abstractmethod
    def _sync_each_iteration(self) -> bool:
        """Whether every iteration needs :meth:`_put_in_force`, even with nothing new."""

    @abc.abstractmethod
    def _accumulate(self) -> contextlib.AbstractContextManager[None]:
        """The kind's ``no_sync``."""

    def _apply_fault(self, exc: RuntimeFault, config: Config | None,
                     retrying: bool) -> Config | None:
        """A :class:`RuntimeFault` while putting ``config`` in force: what to try instead
        (the native runtime survives recoverable ones); raises what it cannot survive."""
        raise exc

    # --------------------------------------------------- apply, and retry if it fails
    def _apply(self, config: Config | None, retrying: bool = False) -> None:
        """Put ``config`` in force on every rank (:meth:`_put_in_force`) until one is. One
        that cannot be applied fails identically on every rank: the leader's schedule says
        what instead (the trial fails, or the fallback), the others just put it again."""
        for _ in range(MAX_APPLY_TRIES):
            try:
                active = self._put_in_force(config)
            except ConfigError as exc:
                config = self._rejected(config, exc, retrying)
                continue
            except RuntimeFault as exc:
                config = self._apply_fault(exc, config, retrying)
                continue
            # the runtime's configuration, as a point of this session's space
            self.config = {k: active[k] for k in self.space.names}
            self._t_last = time.perf_counter()
            return
        raise RuntimeFault(f"no configuration could be applied: {MAX_APPLY_TRIES} in a row "
                           "failed")

    def _rejected(self, config: Config | None, exc: Exception, retrying: bool) -> Config | None:
        """``config`` could not run: the leader's schedule says what instead."""
        return self.schedule.rejected(config, str(exc), retrying) if self.is_leader else config

    def _require_open(self, call: str) -> None:
        if self._state == "new":
            raise UsageError(
                f"tuner.{call} outside its `with` block: a session is a context manager; "
                "write `with autotune.session(model, ...) as tuner:` around the training loop "
                f"and call tuner.{call} inside it")
        if self._state == "closed":
            raise UsageError(f"tuner.{call} after the session's `with` block ended: the "
                             "session is closed; open a new one for more training")

    # ------------------------------------------------------------------ the leader
    def _lead(self, params: Sequence[torch.nn.Parameter], backend: str) -> Config:
        """On the leader: open the run, make the schedule and its Tuners; the first
        configuration to run."""
        if self.options.store:  # fingerprinted as the module, with or without DDP around it
            module = self.model.module if isinstance(self.model, DDP) else self.model
            self._run.open(module, self.info, backend, self.space, self.score_unit)
        self.driver = TrialDriver(self.space, None, self._run.store, self._run.run_id,
                                  elsewhere=self._run.elsewhere)
        tuners = self._tuners = JobTuners(
            self.info, params, techniques=self.options.techniques,
            trial_iterations=self.options.trial_iterations,
            samples_per_step=self.options.samples_per_step, prior=self.options.prior,
            link=self._link, stored=self._run.stored_calibration())
        o, budget = self.options, self.options.budget
        if len(self.info.workers) == 1 and budget:
            self.display.say("one worker: no gradient crosses the wire, so tuning has nothing "
                             "to gain; keeping the default (or the stored best) untuned")
            budget = 0
        self.schedule = TrialSchedule(
            self.space, self.driver, tuners, budget=budget, warmup=o.warmup,
            cut_short=o.cut_short, samples_per_step=o.samples_per_step, drift=self._drift,
            seed=o.seed, probe=self.info.n_machines > 1, capped=tuners.capped,
            listener=self.display, gradient_bytes=sum(tuners.sizes),
            goodput=self._efficiency_probe is not None, total_steps=o.total_steps,
            spend=o.spend, costs=self._run.search_costs(list(GP_LIBRARIES)))
        warm = self._run.warm_start(self.space)
        # torchrun --max-restarts brought the job back: no tuning again
        restarted = self._run.restarted_best(self.space)
        # what came from the store says which run, in the table and in the store: at once
        # where it is kept untuned, else once the schedule uses it (a search starts, or a
        # job that affords none tries a stored best that had beaten its default)
        if restarted is not None or budget == 0:
            stored, said = self._run.provenance(warm, restarted, budget)
            for config, origin in stored:
                self.driver.came_from(config, origin)
            first = self.schedule.start(warm, keep=restarted)
            if said is not None:  # through the tuning display, once it is there
                self.display.say(said)
            return first
        return self.schedule.start(warm, stored=self._run.stored_start(warm, budget))

    def _finish(self, exc: BaseException | None) -> None:
        """On the leader, when the session ends (``exc``: the exception that ended it):
        stop the display, close the run (``finished``; ``aborted`` for Ctrl-C or SIGTERM,
        with the trials so far and the best of them; ``failed`` otherwise: nothing then
        says ``done`` or ``kept``) and, when it went well, print the table."""
        status = status_of(exc)
        ok = status == "finished"
        with shielded(status == "aborted"):
            self.display.settled(self.best if ok else None, status)
            if self.driver is not None:
                self.driver.close(status, kept=self.best, cost=self.tuning_cost)
            if self._tuners is not None and self._tuners.model is not None:
                self._run.save_calibration(self._tuners.model)
        if ok and self.options.verbose and self.driver is not None:
            report(self)

    def _close_now(self, signum: int) -> None:
        """SIGINT or SIGTERM arrived (called from the signal watcher's thread, at once,
        even while this rank waits in a collective that a stopped peer never joins): close
        the run as ``aborted`` now; :meth:`_finish` closes it again when the main thread
        gets there (with the truth, if it carries on)."""
        if self.driver is not None:
            self.driver.close("aborted", kept=self.best)

    def _restore_signals(self) -> None:
        if self._signals is not None:
            self._signals.restore()


def _check_model(model: Any) -> None:
    """A model autotune cannot tune: an error that says what to pass instead."""
    if isinstance(model, torch.nn.DataParallel):
        raise TypeError(
            "session() got a model wrapped in DataParallel (one process, several GPUs), "
            "which autotune cannot tune: use DistributedDataParallel "
            "(autotune.session(DistributedDataParallel(model), ...)) or pass the module")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"session() needs an nn.Module, got {type(model).__name__}")
