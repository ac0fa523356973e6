"""The session of the native runtime: the torch world, the runtime and the trial schedule.

Every iteration boundary is a ``Runtime.sync``: the leader's configuration for the next
iteration crosses the wire as an int64 tensor and every rank, servers included, applies
it. What runs when is the leader's :class:`~autotune.tuning.schedule.TrialSchedule`; this
module measures iterations (the slowest worker's time), applies what the schedule says,
and survives failures: a configuration that fails (an exception or a timeout in the
runtime) is scored as failed, the iteration's gradients are averaged again under the last
good configuration, and training goes on; lost servers shrink the space.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from datetime import timedelta
from typing import Any, Iterator, Mapping, Sequence

import torch
import torch.distributed as dist

from autotune.errors import ArgumentError
from autotune.runtime.errors import ServerLost, UsageError
from autotune.session.display import SessionDisplay, report
from autotune.session.facts import JobTuners, job_space
from autotune.session.parity import DDPParity
from autotune.session.record import SessionRun
from autotune.tuning.schedule import Drift, TrialSchedule
from autotune.tuning.space import Config, ConfigError, SearchSpace
from autotune.tuning.trials import TrialDriver
from autotune.tuning.tuner import DEFAULT_TECHNIQUES, TrialRecord, Tuner


def init_world(timeout: float) -> None:
    """Initialise ``torch.distributed`` from the environment unless the user has."""
    if dist.is_initialized():
        return
    needed = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
    missing = [k for k in needed if k not in os.environ]
    if missing:
        raise UsageError(
            "autotune.session() needs a torch.distributed world: start the script with "
            "`autotune launch --workers N script.py` or `torchrun`, or call "
            f"torch.distributed.init_process_group() first (missing env: {', '.join(missing)})")
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))


def _check_arguments(model: Any, budget: int, samples_per_step: int | None,
                     retune_on_drift: float | None, warmup: int, cut_short: float | None,
                     fixed: Any) -> None:
    """Bad arguments of :class:`Session`, each an error that says what to pass instead."""
    if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
        raise TypeError(
            f"session() got a model wrapped in {type(model).__name__}: the session does "
            "DDP's work itself. Pass the module: autotune.session(model.module, ...), or "
            "build the model without the wrapper")
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


class Session:
    """``autotune.session(model, ...)``: use it as a context manager around the loop, and
    call :meth:`step` after each ``loss.backward()``. Arguments (all but ``model`` by
    keyword):

    ``budget``: training iterations spent on trials (0: no tuning: the best stored
    configuration of a similar job, or the default). ``db``: the results store (default
    ``./autotune.db``); ``store=False``: none. ``allow_lossy``: let codecs in.
    ``samples_per_step``: the score is samples/s (else it/s). ``techniques``, ``seed``,
    ``prior``: the Tuner's. ``retune_on_drift``: re-tune when throughput falls by this
    fraction over ``drift_window`` iterations. ``timeout``: seconds any wait may take.
    ``trial_iterations``, ``warmup``, ``cut_short``: the trial schedule's
    (:mod:`autotune.tuning.schedule`). ``job``: its name in the store.
    ``broadcast_buffers``: as DDP's. ``fixed``: knobs to pin, ``{"chunk_bytes": 4 << 20}``,
    or to narrow, ``{"streams": [1, 2, 4]}``; one the runtime cannot run is a
    :class:`~autotune.tuning.space.ConfigError` at the start. ``verbose``: the progress
    bar and the final table.
    """

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
        self.fixed = dict(fixed or {})
        self._drift = (Drift(retune_on_drift, drift_window, max(10, budget // 5))
                       if retune_on_drift else None)
        self._run = SessionRun(db, job)
        self._broadcast_buffers = broadcast_buffers
        self.display = SessionDisplay(verbose, self.unit, lambda: self.best_score)
        self.rt: Any = None
        self.parity: DDPParity | None = None
        self.space: SearchSpace | None = None
        self.trials: TrialDriver | None = None     # the leader's
        self.schedule: TrialSchedule | None = None  # the leader's
        self.config: Config | None = None
        self.iteration = 0  # iterations completed (step() calls)
        self._t_last = 0.0
        self._servers_dropped = False

    # ------------------------------------------------------------------ set-up
    @property
    def is_leader(self) -> bool:
        """Whether this rank is the runtime's leader: the first *worker*, whichever ranks
        are servers. It tunes, records to the store, shows progress and sends the stop."""
        return self.rt is not None and self.rt.info.rank == self.rt.info.leader

    def __enter__(self) -> "Session":
        from autotune.runtime import Runtime

        init_world(self.timeout)
        self.rt = Runtime.bootstrap(timeout=self.timeout)
        if self.rt.info.role == "server":
            # A server rank that ran the user's script: serve, then leave the process.
            from autotune.server import serve

            serve(self.rt)
            self.rt.shutdown()
            raise SystemExit(0)
        try:
            self._start()
        except BaseException:
            # e.g. the workers' models differ: release the runtime, let the error out.
            self.display.settled(None)
            self.rt.shutdown()
            raise
        return self

    def _start(self) -> None:
        """Workers: register, start like DDP, build the space, apply the first config."""
        self.parity = DDPParity(self.model, self.rt, self._broadcast_buffers)
        self.rt.register(self.parity.params)
        self.parity.start()
        self.space = job_space(self.rt, allow_lossy=self.allow_lossy, fixed=self.fixed)
        if not self.is_leader:
            self._apply(None)
            return
        if self.use_store:
            self._run.open(self.model, self.rt.info, dist.get_backend(), self.space, self.unit)
        self.trials = TrialDriver(self.space, None, self._run.store, self._run.run_id)
        tuners = JobTuners(self.rt, self.parity.params, techniques=self.techniques,
                           trial_iterations=self.trial_iterations,
                           samples_per_step=self.samples_per_step, prior=self.use_prior)
        self.schedule = tuners.schedule = TrialSchedule(
            self.space, self.trials, tuners, budget=self.budget, warmup=self.warmup,
            cut_short=self.cut_short, samples_per_step=self.samples_per_step,
            drift=self._drift, seed=self.seed, probe=self.rt.info.n_machines > 1,
            capped=tuners.capped, listener=self.display)
        warm = self._run.warm_start(self.space)
        restarted = self._run.restarted_best(self.space)
        if restarted is not None:
            # torchrun --max-restarts brought the job back: no tuning again
            self.display.say(f"restart {os.environ['TORCHELASTIC_RESTART_COUNT']}: keeping "
                             f"the stored best configuration of job {self._run.job!r}")
        self._apply(self.schedule.start(warm, keep=restarted))

    # ------------------------------------------------------------ the hot path
    def step(self) -> None:
        """Wait until every ``.grad`` holds the averaged gradient, then move the trial on.

        Collective over all workers: every worker calls it once per iteration.
        """
        from autotune.runtime import RuntimeFault

        if self.rt.accumulating:
            raise UsageError("tuner.step() inside tuner.no_sync(): leave the block for the "
                             "last micro-batch's backward, then call step()")
        failed: str | None = None
        try:
            self.rt.wait()
        except RuntimeFault as exc:
            if not exc.recoverable:
                raise
            if isinstance(exc, ServerLost):
                self._lose_servers(exc)
            # Identical on every rank and nothing moved (or the servers were dropped):
            # average the same gradients again under the last configuration that worked.
            failed = str(exc)
            self._apply(self.schedule.fallback() if self.is_leader else None, retrying=True)
            self.rt.retry()
        self.parity.check()
        elapsed = time.perf_counter() - self._t_last
        # The slowest worker's time; a failure anywhere shows up as infinity.
        slowest = self.rt.worker_max(float("inf") if failed else elapsed)
        self.iteration += 1
        nxt = self.schedule.next(self.config, slowest, failed) if self.is_leader else None
        self._apply(nxt)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """As DDP's ``no_sync``: backward passes inside only accumulate into ``.grad``
        locally; the next backward outside it communicates the accumulated gradient and
        ``step()`` returns its average (``docs/ddp.md``)."""
        with self.rt.no_sync():
            yield

    def _lose_servers(self, exc: ServerLost) -> None:
        """Servers stopped; the runtime already dropped them. Shrink the space to what is
        left; the leader reports, records, and starts the tuning over at the next step."""
        if self._servers_dropped:
            return
        self._servers_dropped = True
        self.space = job_space(self.rt, allow_lossy=self.allow_lossy, fixed=self.fixed)
        if self.is_leader:
            self.schedule.servers_lost(self.space, exc.servers, str(exc), self.config)

    def _apply(self, config: Config | None, retrying: bool = False) -> None:
        """``Runtime.sync`` until a configuration is in force. A configuration that cannot
        be applied fails identically on every rank: the leader's schedule says what
        instead (the trial fails, or the fallback), the others just sync again."""
        from autotune.runtime import RuntimeFault

        for _ in range(1000):
            try:
                active = self.rt.sync(config)
                # the runtime's configuration, as a point of this session's space
                self.config = {k: active[k] for k in self.space.names}
                break
            except (ConfigError, RuntimeFault) as exc:
                if isinstance(exc, RuntimeFault) and not exc.recoverable:
                    raise
                if isinstance(exc, ServerLost):
                    # lost at an iteration boundary: nothing to average again; keep the
                    # configuration if it can still run, the tuner starts over next step
                    self._lose_servers(exc)
                    if self.is_leader and config is not None and not self.schedule.allowed(config):
                        config = self.schedule.fallback()
                    continue
                if self.is_leader:
                    config = self.schedule.rejected(config, str(exc), retrying)
        else:  # pragma: no cover - every config in a row failing to apply
            raise RuntimeFault("no configuration could be applied: 1000 in a row failed")
        self._t_last = time.perf_counter()

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

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.parity is not None:
            self.parity.remove()
        if exc_type is not None:
            # Another rank may be waiting in a collective: don't join one, just release.
            self.display.settled(None)
            self.rt.shutdown()
            if self.is_leader and self.trials is not None:
                self.trials.close("failed", kept=self.best)
            return None
        with warnings.catch_warnings():
            # The sync after the last step() opened an iteration nobody runs; the runtime
            # closes it (and says so): expected here.
            warnings.simplefilter("ignore", RuntimeWarning)
            if self.is_leader:
                self.rt.sync(self.config, stop=True)
            else:
                self.rt.sync()
        self.rt.shutdown()
        if self.is_leader:
            self.display.settled(self.best)
            if self.trials is not None:
                self.trials.close("finished", kept=self.best)
            if self.verbose:
                report(self)
        return None
