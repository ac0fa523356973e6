"""The ledger of a job's trials: ask -> apply -> measure -> tell -> record, one home for
both loops.

A training session (:mod:`autotune.sessions`) applies a trial's configuration through the
runtime and measures real iterations; offline tuning (:mod:`autotune.offline.simulated`)
asks the simulator. Both go through :class:`Ledger`, which owns what they share:

* the :class:`~autotune.tuning.tuner.Tuner` (``ask``/``tell``);
* the job's one history: every :class:`~autotune.tuning.trial.Trial` once ended (the same
  objects as the Tuner's, across the Tuners of re-tunes), and the faults that were not
  trials;
* every scored iteration of every configuration, so that "best" is one number everywhere
  (progress bar, table, store, report, ``--json``): the kept configuration's **mean over
  its scored iterations**, with their standard deviation; the default's likewise (the
  Tuner measures it as long as the kept one, see ``Tuner(reference=...)``);
* recording, its one writer: every trial to the results store (a store failure warns, it
  never stops training), the run's result at the end, in the run's unit, with the kept
  configuration's provenance when it came from the store (:attr:`Ledger.origins`,
  :mod:`autotune.store.origin`).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

from autotune.speedup import measure
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trial import Trial
from autotune.tuning.tuner import Tuner


class Ledger:
    """A job's trials, told and recorded (module docstring).
    ``store``/``run_id``: where trials go (``None``: nowhere); ``elsewhere``: where they
    go when the store's server is lost mid-run (:meth:`SessionRun.elsewhere
    <autotune.leader.record.SessionRun.elsewhere>`)."""

    def __init__(self, space: SearchSpace, tuner: Tuner | None, store: Any = None,
                 run_id: int | None = None,
                 elsewhere: Callable[[BaseException], tuple[Any, int] | None] | None = None):
        self.space = space
        self.tuner = tuner
        self.store = store
        self.run_id = run_id
        #: where the run goes on when its store's server is lost mid-run: a local store
        #: and a run there that continues this one (``None``: not recorded from then on)
        self.elsewhere = elsewhere
        self.history: list[Trial] = []   # the job's trials, ended, and faults
        self.failures: list[Trial] = []
        self.samples: dict[tuple, list[float]] = {}  # per configuration: scored iterations
        # per configuration: the stored run it came from (a warm start, budget 0, restart)
        self.origins: dict[tuple, dict[str, Any]] = {}
        self._kept: Config | None = None

    # ------------------------------------------------------------------ the loop
    def ask(self) -> Trial | None:
        """The next trial, or ``None`` once the Tuner is done."""
        if self.tuner is None or self.tuner.done:
            return None
        return self.tuner.ask()

    def sample(self, config: Config, score: float) -> None:
        """One scored iteration of ``config`` (its throughput)."""
        self.samples.setdefault(self.space.key(config), []).append(float(score))

    def best_lossless(self, space: SearchSpace, untested: tuple[str, ...] = ()) -> Config:
        """The best lossless configuration of the trials so far (or one whose compression
        is in ``untested``: kept without a loss test), else the default of ``space``.
        Best by the Tuner's lower confidence bound (:meth:`Tuner.bounds`), as the kept
        configuration is chosen, so that one lucky iteration does not beat a configuration
        measured many times (issue 62: after a codec was rejected, a one-iteration score
        chose the lossless configuration kept); a configuration the current Tuner has no
        bound for (an earlier Tuner's, before a re-tune) by the mean of its trials."""
        scored: dict[tuple, list[Trial]] = {}
        for r in self.history:
            if r.score is not None and r.config.get("compression", "none") in ("none", *untested):
                scored.setdefault(tuple(sorted(r.config.items())), []).append(r)
        if not scored:
            return space.default()

        def lower(trials: list[Trial]) -> float:
            config = trials[0].config
            bounds = (self.tuner.bounds(config) if self.tuner is not None
                      and self.tuner.space.contains(config) else None)
            return bounds[0] if bounds is not None else sum(r.score for r in trials) / len(trials)

        return dict(max(scored.values(), key=lower)[0].config)

    def forget(self) -> None:
        """Drop every scored iteration (they describe the job before a change)."""
        self.samples.clear()

    def finish(self, trial: Trial, score: float | None, *, iterations: int | None = None,
               measured: int | None = None, error: str | None = None, wall_time: float = 0.0,
               index: int | None = None, throughput: float | None = None,
               efficiency: float | None = None) -> Trial:
        """Tell the Tuner ``trial``'s score (``None``: failed, with ``error``) and record
        it: the same object ends in the Tuner's history and this one. ``iterations``: how
        many of its iterations ran (cut short: the rest go back to the budget; a failed
        trial's all count against the budget, and the record says how many ran); default
        all. ``measured``: how many of them were scored (the score's weight; default all).
        ``index``: the trial's number in the run (default the Tuner's; a session that
        re-tunes numbers on across Tuners). ``throughput``, ``efficiency``: a lossy trial
        scored by goodput (``score`` is their product)."""
        used = trial.iterations if iterations is None else int(iterations)
        assert self.tuner is not None
        self.tuner.tell(trial, score, iterations=None if score is None else used,
                        measured=None if score is None else measured)
        trial.iterations = used
        if index is not None:
            trial.index = index
        trial.error, trial.wall_time = error, wall_time
        trial.throughput, trial.efficiency = throughput, efficiency
        self.history.append(trial)
        if error is not None:
            self.failures.append(trial)
        self.record(trial)
        best = self.tuner.best
        if best is not None:
            self._kept = dict(best[0])
        return trial

    def record(self, rec: Trial) -> None:
        """Store one trial (also a fault that is not a trial of the Tuner's)."""
        self._store("add_trial", self.run_id, number=rec.index, technique=rec.technique,
                    config=rec.config, iterations=rec.iterations, score=rec.score,
                    error=rec.error, wall_time=rec.wall_time, throughput=rec.throughput,
                    efficiency=rec.efficiency, trust=rec.trust)

    def keep(self, config: Config | None) -> None:
        """Name the kept configuration (default: the Tuner's best)."""
        self._kept = None if config is None else dict(config)

    # ------------------------------------------------------------------ results
    @property
    def kept(self) -> Config | None:
        return None if self._kept is None else dict(self._kept)

    def came_from(self, config: Config, origin: dict[str, Any]) -> None:
        """``config`` came from the store: ``origin`` (:mod:`autotune.store.origin`) says
        from which run; the first origin given for a configuration stays."""
        self.origins.setdefault(self.space.key(config), dict(origin))

    def origin(self, config: Config | None) -> dict[str, Any] | None:
        """Where ``config`` came from, if from the store."""
        return self.origins.get(self.space.key(config)) if config else None

    def measured(self, config: Config | None) -> tuple[float, float, int] | None:
        """``(mean, standard deviation, iterations)`` of ``config``'s scored iterations."""
        xs = self.samples.get(self.space.key(config)) if config else None
        return measure(xs) if xs else None

    def results(self) -> dict[str, Any]:
        """The run's result as the store's ``finish_run`` takes it."""
        best = self.measured(self._kept)
        default = self.measured(self.space.default())
        return {"best_config": self.kept, "best_score": best[0] if best else None,
                "best_spread": best[1] if best else None,
                "default_score": default[0] if default else None,
                "default_spread": default[1] if default else None,
                "best_iterations": best[2] if best else None,
                "default_iterations": default[2] if default else None,
                "kept_from": self.origin(self._kept)}

    def close(self, status: str = "finished", kept: Config | None = None,
              cost: dict[str, Any] | None = None) -> None:
        """Record how the run ended (``kept``: the configuration kept, if not the Tuner's
        best) with its measured numbers and what tuning ``cost`` the job."""
        if kept is not None:
            self.keep(kept)
        self._store("finish_run", self.run_id, status=status, tuning_cost=cost,
                    **self.results())

    def _store(self, name: str, run_id: int | None, **kwargs: Any) -> None:
        if self.store is None:
            return
        try:
            getattr(self.store, name)(run_id, **kwargs)
        except Exception as exc:  # the store must never stop training
            from autotune.store import StoreUnreachable

            if not isinstance(exc, StoreUnreachable):
                warnings.warn(f"could not record to the results store: {exc}")
                return
            # once: each try would wait on the network
            lost = self.store.name
            moved = self.elsewhere(exc) if self.elsewhere is not None else None
            if moved is None:
                warnings.warn(f"could not record to the results store: {exc}; the rest of "
                              "this run is not recorded (its results are in the report)")
                self.store = None
                return
            self.store, self.run_id = moved
            warnings.warn(
                f"could not record to the results store: {exc}; this run goes on in "
                f"{self.store.name} as run {self.run_id}, its trials so far included "
                f"(`autotune db import {self.store.name} --db {lost}` brings it back)")
            for rec in self.history:  # what the lost store had, then what failed
                self.record(rec)
            if name != "add_trial":
                self._store(name, self.run_id, **kwargs)
