"""What every tuning session shares: its arguments, the leader's tuning, its results.

``autotune.session(model, ...)`` makes a :class:`TuningSession`, of the kind the model asks
for: a plain module gets the native runtime (:class:`~autotune.session.core.Session`,
which does DDP's work itself); a ``DistributedDataParallel`` model keeps DDP, whose
communication is tuned through a comm hook (:class:`~autotune.session.ddp.DDPSession`).
Both measure each iteration, and on the leader the same trial schedule
(:mod:`autotune.tuning.schedule`) says what the next one runs; both record to the store,
show the same progress and end with the same table.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import torch

from autotune.errors import ArgumentError
from autotune.session.display import SessionDisplay, report
from autotune.session.facts import JobTuners
from autotune.session.record import SessionRun
from autotune.signals import TerminateAsInterrupt, shielded, status_of
from autotune.tuning.schedule import Drift, TrialSchedule
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trials import TrialDriver
from autotune.tuning.tuner import DEFAULT_TECHNIQUES, TrialRecord, Tuner

DDP = torch.nn.parallel.DistributedDataParallel


class TuningSession:
    """``autotune.session(model, ...)``: use it as a context manager around the loop, and
    call :meth:`step` after each ``loss.backward()``. ``model`` is a module (the native
    runtime averages its gradients) or a ``DistributedDataParallel`` model (DDP keeps
    averaging them, through autotune's comm hook). Arguments (all by keyword):

    ``budget``: training iterations spent on trials (0: no tuning: the best stored
    configuration of a similar job, or the default). ``db``: the results store (default
    ``./autotune.db``); ``store=False``: none. ``allow_lossy``: let codecs in.
    ``samples_per_step``: the score is samples/s (else it/s). ``techniques``, ``seed``,
    ``prior``: the Tuner's. ``retune_on_drift``: re-tune when the communication time
    (median over ``drift_window`` iterations) moves, up or down, by more than this fraction
    of the kept configuration's iteration time (docs/tuner.md, "Drift"). ``timeout``: seconds any wait may take.
    ``trial_iterations``, ``warmup``, ``cut_short``: the trial schedule's
    (:mod:`autotune.tuning.schedule`). ``job``: its name in the store.
    ``broadcast_buffers``: as DDP's (native runtime; a DDP model has its own).
    ``fixed``: knobs to pin, ``{"chunk_bytes": 4 << 20}``, or to narrow,
    ``{"streams": [1, 2, 4]}``; one the runtime cannot run is a
    :class:`~autotune.tuning.space.ConfigError` at the start. ``verbose``: the progress
    bar and the final table.
    """

    def __new__(cls, model: Any, **options: Any) -> "TuningSession":
        if cls is TuningSession:  # autotune.session(...): the kind the model asks for
            from autotune.session.core import Session
            from autotune.session.ddp import DDPSession

            cls = DDPSession if isinstance(model, DDP) else Session
        return super().__new__(cls)

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        budget: int = 100,
        db: str | os.PathLike | None = None,
        allow_lossy: bool = False,
        samples_per_step: int | None = None,
        techniques: Sequence[str] = DEFAULT_TECHNIQUES,
        seed: int = 0,
        verbose: bool = True,
        retune_on_drift: float | None = None,
        drift_window: int = 50,
        timeout: float = 300.0,
        trial_iterations: int | None = None,
        warmup: int = 3,
        cut_short: float | None = 0.5,
        job: str | None = None,
        store: bool = True,
        broadcast_buffers: bool = True,
        prior: bool = True,
        fixed: Mapping[str, Any] | None = None,
    ) -> None:
        _check_arguments(model, budget, samples_per_step, retune_on_drift, warmup, cut_short,
                         fixed)
        self.model = model
        self.budget = budget
        self.allow_lossy = allow_lossy
        self.samples_per_step = samples_per_step
        self.techniques = tuple(techniques)
        self.seed = seed
        self.verbose = verbose
        self.timeout = timeout
        self.trial_iterations = trial_iterations
        self.warmup = warmup
        self.cut_short = cut_short
        self.use_store = store
        self.use_prior = prior
        self.broadcast_buffers = broadcast_buffers
        self.fixed = dict(fixed or {})
        self._drift = (Drift(retune_on_drift, drift_window, max(10, budget // 5))
                       if retune_on_drift else None)
        self._run = SessionRun(db, job)
        self.display = SessionDisplay(verbose, self.unit, lambda: self.best_score)
        self.info: Any = None                       # the world (runtime.world.WorldInfo)
        self.space: SearchSpace | None = None
        self.trials: TrialDriver | None = None      # the leader's
        self.schedule: TrialSchedule | None = None  # the leader's
        self.config: Config | None = None
        self.iteration = 0  # iterations completed (step() calls)

    # ------------------------------------------------------------------ the leader
    def _lead(self, params: Sequence[torch.nn.Parameter], backend: str) -> Config:
        """On the leader: open the run, make the schedule and its Tuners; the first
        configuration to run. From here until :meth:`_finish`, SIGTERM raises (as
        KeyboardInterrupt does), so that the run is closed as ``aborted``."""
        self._signals = TerminateAsInterrupt(on_signal=self._close_now).install()
        if self.use_store:  # fingerprinted as the module, with or without DDP around it
            module = self.model.module if isinstance(self.model, DDP) else self.model
            self._run.open(module, self.info, backend, self.space, self.unit)
        self.trials = TrialDriver(self.space, None, self._run.store, self._run.run_id)
        tuners = JobTuners(self.info, params, techniques=self.techniques,
                           trial_iterations=self.trial_iterations,
                           samples_per_step=self.samples_per_step, prior=self.use_prior)
        self.schedule = tuners.schedule = TrialSchedule(
            self.space, self.trials, tuners, budget=self.budget, warmup=self.warmup,
            cut_short=self.cut_short, samples_per_step=self.samples_per_step,
            drift=self._drift, seed=self.seed, probe=self.info.n_machines > 1,
            capped=tuners.capped, listener=self.display, gradient_bytes=sum(tuners.sizes))
        warm = self._run.warm_start(self.space)
        restarted = self._run.restarted_best(self.space)
        if restarted is not None:
            # torchrun --max-restarts brought the job back: no tuning again
            self.display.say(f"restart {os.environ['TORCHELASTIC_RESTART_COUNT']}: keeping "
                             f"the stored best configuration of job {self._run.job!r}")
        return self.schedule.start(warm, keep=restarted)

    def _finish(self, exc: BaseException | None) -> None:
        """On the leader, when the session ends (``exc``: the exception that ended it):
        stop the display, close the run (``finished``; ``aborted`` for Ctrl-C or SIGTERM,
        with the trials so far and the best of them; ``failed`` otherwise: nothing then
        says ``done`` or ``kept``), put SIGTERM's handler back and, when it went well,
        print the table."""
        status = status_of(exc)
        ok = status == "finished"
        try:
            with shielded(status == "aborted"):
                self.display.settled(self.best if ok else None, status)
                if self.trials is not None:
                    self.trials.close(status, kept=self.best)
        finally:
            self._restore_signals()
        if ok and self.verbose and self.trials is not None:
            report(self)

    def _close_now(self, signum: int) -> None:
        """SIGINT or SIGTERM arrived (called from the signal watcher's thread, at once,
        even while this rank waits in a collective that a stopped peer never joins): close
        the run as ``aborted`` now; :meth:`_finish` closes it again when the main thread
        gets there (with the truth, if it carries on)."""
        if self.trials is not None:
            self.trials.close("aborted", kept=self.best)

    def _restore_signals(self) -> None:
        signals = getattr(self, "_signals", None)
        if signals is not None:
            signals.restore()

    # --------------------------------------------------------------- results
    @property
    def tuner(self) -> Tuner | None:
        """The leader's current Tuner (a new one after a re-tune)."""
        return self.schedule.tuner if self.schedule is not None else None

    @property
    def best(self) -> Config | None:
        """The configuration the session settled on (on rank 0: the best measured so far)."""
        kept = self.schedule.kept if self.schedule is not None else None
        if kept is not None:
            return kept
        return dict(self.config) if self.config is not None else None

    @property
    def history(self) -> list[TrialRecord]:
        """Every trial so far (leader)."""
        return self.trials.history if self.trials is not None else []

    @property
    def failures(self) -> list[TrialRecord]:
        return self.trials.failures if self.trials is not None else []

    def _numbers(self, config: Config | None) -> tuple[float | None, float | None]:
        """``config``'s mean and spread over its scored iterations (leader)."""
        m = self.trials.measured(config) if self.trials is not None and config else None
        return (m[0], m[1]) if m else (None, None)

    @property
    def best_score(self) -> float | None:
        """The kept (best) configuration's mean throughput over its scored iterations:
        the one "best" number of the progress bar, the table, the store and the report."""
        best = self.schedule.best if self.schedule is not None else None
        mean = self._numbers(best[0] if best else None)[0]
        return mean if mean is not None else (best[1] if best else None)

    @property
    def best_spread(self) -> float | None:
        """Standard deviation of the kept configuration's scored iterations."""
        best = self.schedule.best if self.schedule is not None else None
        return self._numbers(best[0] if best else None)[1]

    @property
    def default_score(self) -> float | None:
        """The default's mean throughput over its scored iterations (the Tuner measures it
        as long as the kept one); ``default_spread``: their standard deviation."""
        return self._numbers(self.space.default() if self.space else None)[0]

    @property
    def default_spread(self) -> float | None:
        return self._numbers(self.space.default() if self.space else None)[1]

    @property
    def unit(self) -> str:
        """What the scores count: ``samples/s`` with ``samples_per_step``, else ``it/s``."""
        return "samples/s" if self.samples_per_step else "it/s"

    @property
    def tuning(self) -> bool:
        """True while trials are running (rank 0 only knows)."""
        return self.schedule.tuning if self.schedule is not None else False

    @property
    def tuning_iterations(self) -> int:
        """Iterations spent inside trials (leader)."""
        return self.schedule.tuning_iterations if self.schedule is not None else 0


def _check_arguments(model: Any, budget: int, samples_per_step: int | None,
                     retune_on_drift: float | None, warmup: int, cut_short: float | None,
                     fixed: Any) -> None:
    """Bad arguments of a session, each an error that says what to pass instead."""
    if isinstance(model, torch.nn.DataParallel):
        raise TypeError(
            "session() got a model wrapped in DataParallel (one process, several GPUs), "
            "which autotune cannot tune: use DistributedDataParallel "
            "(autotune.session(DistributedDataParallel(model), ...)) or pass the module")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"session() needs an nn.Module, got {type(model).__name__}")
    _check(budget >= 0, f"budget must be >= 0 iterations (0: no tuning), got {budget}")
    _check(samples_per_step is None or samples_per_step > 0,
           f"samples_per_step must be a positive batch size, got {samples_per_step}")
    _check(retune_on_drift is None or 0 < retune_on_drift < 1,
           f"retune_on_drift is a fraction in (0, 1), e.g. 0.2, got {retune_on_drift}")
    _check(warmup >= 0, f"warmup must be >= 0 iterations, got {warmup}")
    _check(cut_short is None or 0 < cut_short < 1,
           f"cut_short is a fraction in (0, 1), or None to never cut, got {cut_short}")
    _check(fixed is None or isinstance(fixed, Mapping),
           f"fixed is a dict of knob: value, got {type(fixed).__name__}")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ArgumentError(message)
