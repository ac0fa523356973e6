"""The trial schedule: given what the last training iteration measured, what the next runs.

A torch-free state machine of the tuning leader, shared by every way a job is tuned
while it trains (the native runtime's session, and the DDP comm hook). The caller runs
one iteration under the configuration it was given, measures it (the slowest worker's
seconds, ``inf`` when a worker failed), and asks :meth:`TrialSchedule.next` what to run
next. The phases:

``warmup``
    The first ``warmup`` iterations run the default and are not trials: they pay for
    first allocations and connections, which would otherwise count against whichever
    configuration is tried first. Their times give the physics prior its network rate.
    Across machines (``probe=True``) the last of two or more runs the default with
    :data:`PROBE_STREAMS` streams (:func:`flow_probe`: with chunks small enough for
    each stream to carry one of the job's ``gradient_bytes``), so that a per-flow cap
    (one TCP flow held far below the NIC rate, as on cloud NICs) shows; if ``capped()``
    then says so, the seed configurations with that many streams (and chunks no larger
    than the probe's) are the first trials (AIACC-Training's remedy).
``trial``
    A trial lasts ``trial.iterations`` iterations. The first after a switch is not scored
    (it pays for the switch; a trial of the configuration that ran just before, as the
    default after the warm-up or a confirm trial after its own, has no switch and scores
    it); the median of the others is the trial's time, and the
    score is throughput (``samples_per_step`` samples per iteration, 1 by default). A
    trial whose first scored iteration reaches less than ``cut_short`` of the best score
    so far ends there and gives its remaining iterations back to the budget; one clearly
    slow already on its switch iteration (under ``cut_short`` of the best even after
    :data:`SWITCH_MARGIN` for the switch's cost) ends after that one. A failed iteration
    fails its trial. The default (the Tuner's ``reference``) is measured long enough for
    a speed-up over it (:data:`REFERENCE_ITERATIONS`): its first trial ends once it has
    :data:`~autotune.speedup.MIN_ITERATIONS` scored iterations (``Tuner.enough``).
``locked``
    The budget is spent: the best configuration is kept, and its first
    :data:`SETTLED_SAMPLES` iterations (not the first after a switch) are scored iterations
    of it too, so the mean reported as "best" rests on training and not only on the
    trials that picked it (the listener hears ``locked`` at once and ``kept_measured``
    once that figure is final; a configuration kept without tuning, with ``budget`` 0 or
    after a restart, is measured the same way after ``warmup`` unscored iterations). With
    a drift watch (:class:`Drift`),
    the first ``window`` iterations under it are its baseline; after that, when the median
    communication time of a ``window`` (the part of the iteration the configuration can
    change; the iteration time when the caller does not measure it) moves more than
    ``threshold`` of the baseline iteration time away from the baseline's, slower or faster,
    a short re-tune (``budget`` iterations) starts, measuring the old best again first
    (every configuration's scored iterations start afresh: they describe the job before
    the change). A slower compute step leaves the communication time alone, so it starts
    no re-tune.

Two more events come from outside: a configuration the runtime refused to apply
(:meth:`rejected`: its trial fails, the next is proposed) and lost servers
(:meth:`servers_lost`: the space shrinks, and at the next iteration the tuning starts
over on what is left, or keeps the kept configuration if it can still run).

**Goodput** (``goodput=True``: lossy codecs allowed and scored by goodput, issue 39).
The caller passes each iteration's statistical efficiency (:mod:`autotune.tuning.efficiency`;
1 for a lossless configuration). A lossy trial's score is then its throughput times its
mean efficiency, and its iterations are scored likewise; three guards:

* the warm-up lasts at least :data:`~autotune.tuning.efficiency.LOSSY_WARMUP` iterations
  (lossless), so that the noise scale is stable before any codec is judged; a lossy trial
  whose efficiency is still unknown fails, saying so;
* a lossy trial whose mean efficiency falls below
  :data:`~autotune.tuning.efficiency.COLLAPSED` fails at once, with the efficiency in
  its error (and so in the store);
* after tuning, a kept codec whose efficiency (mean of a window of iterations) falls below
  :data:`~autotune.tuning.efficiency.DROPPED` of what its trials measured, or below
  ``COLLAPSED``, starts a re-tune whose first trial is the best lossless configuration
  (a critical regime, or a learning-rate change: Accordion, MLSys 2021).

What a person sees goes through a :class:`Listener` (a progress bar, or nothing).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from autotune.errors import ArgumentError
from autotune.speedup import MIN_ITERATIONS, Side
from autotune.tuning.efficiency import COLLAPSED, DROPPED, LOSSY_WARMUP
from autotune.tuning.space import Config, ConfigError, SearchSpace
from autotune.tuning.trials import TrialDriver
from autotune.tuning.tuner import CONFIRM, SEED, Trial, TrialRecord, Tuner

__all__ = ["TrialSchedule", "Drift", "Listener", "PROBE_STREAMS", "REFERENCE_ITERATIONS",
           "SWITCH_MARGIN", "trial_seconds"]

#: How much slower than the configuration's steady iterations its first one (the switch:
#: new buffers, first use of stream groups) may be. A trial whose switch iteration is
#: under ``cut_short`` of the best even when divided by this stops there. Measured on 22
#: trials of a loopback session (2 workers + 1 server, docs/tuner.md): the switch
#: iteration took 0.77-1.43x a steady one (median 1.07, 90th percentile 1.30).
SWITCH_MARGIN = 2.0

#: Streams of the last warm-up iteration (when there are two or more, across machines):
#: enough flows to fill a NIC whose single flow is capped at a quarter of it or more.
PROBE_STREAMS = 4

WARMUP, TRIAL, LOCKED = "warmup", "trial", "locked"
# how many iterations after tuning count as scored iterations of the kept configuration
SETTLED_SAMPLES = 20

UNKNOWN_EFFICIENCY = ("its statistical efficiency is unknown: the gradient noise scale is not "
                      "stable yet, so a lossy codec cannot be judged")

#: Iterations of a kept codec's efficiency averaged before it is judged (without a drift
#: watch; with one, its ``window``).
EFFICIENCY_WINDOW = 20

#: The length of the default's first trial (the Tuner's ``reference_iterations``): one
#: switch iteration and :data:`~autotune.speedup.MIN_ITERATIONS` scored ones, the fewest a
#: speed-up over the default needs. When it did not switch (the default ran just before,
#: in the warm-up) it ends after MIN_ITERATIONS and gives the last back to the budget.
REFERENCE_ITERATIONS = MIN_ITERATIONS + 1


def flow_probe(space: SearchSpace, gradient_bytes: int | None = None) -> Config | None:
    """The flow-cap probe of a job: the default with :data:`PROBE_STREAMS` streams and,
    when ``gradient_bytes`` (all gradients of an iteration) would fill fewer than that
    many default chunks, chunks small enough for every stream to carry one (else the
    extra streams carry nothing and the probe cannot see a cap: measured, a 1.9 MiB model
    in one 4 MiB chunk ran as fast with 4 streams as with one under a 4x cap).
    ``None`` when the space has no more streams than the default."""
    if "streams" not in space.names:
        return None
    default = space.default()
    streams = space["streams"].nearest(PROBE_STREAMS)
    if streams <= default["streams"]:
        return None
    probe = {**default, "streams": streams}
    if gradient_bytes and "chunk_bytes" in space.names:
        fits = [v for v in space["chunk_bytes"].values if v * streams <= gradient_bytes]
        if fits and max(fits) < default["chunk_bytes"]:
            probe["chunk_bytes"] = max(fits)
        elif not fits:
            probe["chunk_bytes"] = min(space["chunk_bytes"].values)
    return space.project(probe)


def trial_seconds(scored: list[float], switch_s: float, cut: bool) -> float:
    """The time per iteration a trial is scored with: the median of its ``scored``
    iterations; with none, its switch iteration ``switch_s``, divided by
    :data:`SWITCH_MARGIN` if the trial was ``cut`` there as clearly slow (at best that much
    faster: it stays slow), as it is if the trial had no other iteration (the end of the
    budget: counted with the switch's cost rather than credited with an optimistic bound)."""
    if scored:
        return statistics.median(scored)
    return switch_s / SWITCH_MARGIN if cut else switch_s


@dataclass(frozen=True)
class Drift:
    """Re-tune for ``budget`` iterations when the median communication time of ``window``
    iterations under the kept configuration moves, up or down, by more than ``threshold``
    (a fraction) of the baseline's iteration time (the first ``window`` after locking)."""

    threshold: float
    window: int
    budget: int


class Listener:
    """What the schedule tells a person; the default says nothing."""

    def tuning(self, budget: int) -> None:
        """Trials start (or start again) with ``budget`` iterations."""

    def trial_started(self, index: int, trial: Trial) -> None:
        """Trial number ``index`` (counted across re-tunes) starts."""

    def advanced(self, iterations: int) -> None:
        """``iterations`` of the tuning budget went by."""

    def trial_finished(self, record: TrialRecord) -> None:
        """A trial ended (``record.error`` set when it failed)."""

    def measured_by(self, measured: Callable[[Config | None], Side | None]) -> None:
        """Once, at the start: ``measured(config)`` gives a configuration's figure, the
        ``(mean, spread, scored iterations)`` the store and the session's table show."""

    def locked(self, kept: Config | None) -> None:
        """The budget is spent; ``kept`` runs from now on. Its figure grows over its
        first :data:`SETTLED_SAMPLES` training iterations (:meth:`kept_measured`)."""

    def kept_measured(self, kept: Config | None) -> None:
        """``kept``'s figure is final: its first :data:`SETTLED_SAMPLES` training
        iterations are scored (or a re-tune starts before they are)."""

    def say(self, text: str) -> None:
        """Something worth a line (rich markup)."""


class TrialSchedule:
    """The leader's schedule of one job (module docstring).

    ``driver`` measures, tells and records trials; ``new_tuner(budget, seed, warm)``
    makes the Tuner for a (re-)tune; ``capped()`` says whether the warm-up showed a
    per-flow cap (read :attr:`warmup_times` and :attr:`probe_times`).
    """

    def __init__(
        self,
        space: SearchSpace,
        driver: TrialDriver,
        new_tuner: Callable[[int, int, list[Config]], Tuner],
        *,
        budget: int,
        warmup: int = 3,
        cut_short: float | None = 0.5,
        samples_per_step: int | None = None,
        drift: Drift | None = None,
        seed: int = 0,
        probe: bool = False,
        capped: Callable[[], bool] | None = None,
        listener: Listener | None = None,
        gradient_bytes: int | None = None,
        goodput: bool = False,
    ) -> None:
        if budget < 0:
            raise ArgumentError(f"budget must be >= 0, got {budget}")
        if warmup < 0:
            raise ArgumentError(f"warmup must be >= 0, got {warmup}")
        if cut_short is not None and not 0 < cut_short < 1:
            raise ArgumentError(f"cut_short is a fraction in (0, 1) or None, got {cut_short}")
        self.space = space
        self.driver = driver
        self._new_tuner = new_tuner
        self.budget = budget
        self.cut_short = cut_short
        self.samples_per_step = samples_per_step
        self.drift = drift
        self.seed = seed
        self._capped = capped
        self.listener = listener or Listener()
        self.listener.measured_by(driver.measured)
        self.phase = WARMUP
        self.iteration = 0          # iterations measured (next() calls)
        self.tuning_iterations = 0  # iterations spent inside trials
        self.goodput = goodput
        # scored by goodput: the noise scale needs lossless iterations before any codec
        self.warmup_left = max(warmup, LOSSY_WARMUP) if goodput and budget > 0 else warmup
        self.warmup_times: list[float] = []  # the default's warm-up times (the prior's rate)
        self.probe_times: list[float] = []   # the several-stream probe's
        self.probe = (flow_probe(space, gradient_bytes)
                      if probe and self.warmup_left >= 2 else None)
        self.tuner: Tuner | None = None
        self.trial: Trial | None = None
        self.trial_index = -1
        self._trial_left = 0
        self._trial_times: list[float] = []
        self._switch_s: float | None = None
        self._trial_start = 0.0
        self.best: tuple[Config, float] | None = None  # (config, the Tuner's mean score)
        self.last_good: Config | None = None
        self._window: list[tuple[float, float]] = []  # (iteration s, communication s)
        # the kept configuration's median (iteration s, communication s), once measured
        self.baseline: tuple[float, float] | None = None
        self.retunes: list[int] = []  # iterations at which drift started a re-tune
        self._replan = False
        self._ran: Config | None = None  # the configuration of the previous iteration
        self._settled_left = 0  # settled iterations still to score (_settled)
        self._keeping: Config | None = None  # the configuration they are scored for
        self._efficiencies: list[float] = []  # the trial's (scored by goodput, lossy)
        self._first_gain: float | None = None  # its switch iteration's
        self.trial_efficiency: dict[tuple, float] = {}  # the mean of each lossy trial's
        self._kept_efficiency: list[float] = []  # a window of the kept codec's

    # ---------------------------------------------------------------- start
    def start(self, warm: Sequence[Config], keep: Config | None = None) -> Config:
        """The first configuration. ``warm``: warm-start configurations (the first is kept
        as it is when ``budget`` is 0); ``keep``: a configuration to keep without tuning
        (a restarted job's stored best)."""
        if keep is not None or self.budget == 0:
            self.phase = LOCKED
            kept = keep if keep is not None else (warm[0] if warm else self.space.default())
            self._settled_left, self._keeping = SETTLED_SAMPLES, dict(kept)
            return kept
        self._tune(self.budget, self.seed, list(warm))
        if self.warmup_left:
            return self.space.default()
        self.phase = TRIAL
        return self._next_trial()

    # ------------------------------------------------------------ each iteration
    def next(self, config: Config, seconds: float, failed: str | None = None,
             comm_s: float | None = None, efficiency: float | None = None) -> Config:
        """``config`` ran one iteration in ``seconds`` (the slowest worker's; ``inf``, or
        ``failed`` with the reason, when it failed): the configuration to run next.
        ``comm_s``: its communication time, what the drift watch judges (the least any
        worker waited for the averaged gradients: a straggler's compute is not in it).
        ``efficiency``: its statistical efficiency, when scored by goodput (module
        docstring; None: unknown)."""
        self.iteration += 1
        gain = self._gain(config, efficiency)
        switched, self._ran = config != self._ran, dict(config)
        if seconds != float("inf") and failed is None:
            self.last_good = dict(config)
        if self._replan:
            return self._start_over(failed, config)
        if self.phase == LOCKED:
            if self.warmup_left > 0:  # kept untuned from the start: a warm-up, unscored
                self.warmup_left -= 1
            elif not switched and failed is None and seconds != float("inf"):
                self._settled(config, seconds, gain)
            dropped = self._watch_efficiency(config, efficiency)
            return dropped or self._watch_drift(seconds, config, comm_s)
        if self.phase == WARMUP:
            return self._warmed(config, seconds)
        return self._measured(seconds, failed, switched, gain)

    def rejected(self, config: Config, error: str, retrying: bool = False) -> Config:
        """The runtime could not apply ``config`` (identically on every rank): outside a
        trial (or ``retrying`` a failed iteration) the fallback, else the trial fails and
        the next one is proposed."""
        if retrying or self.phase != TRIAL or self.trial is None:
            fallback = self.fallback()
            return fallback if config != fallback else self.space.default()
        self._finish(None, f"could not apply the configuration: {error}")
        return self._next_trial()

    def servers_lost(self, space: SearchSpace, servers: Sequence[int], error: str,
                     config: Config | None) -> None:
        """Servers stopped and ``space`` is what is left: reported and recorded now; the
        tuning starts over at the next iteration."""
        self.space = space
        self._replan = True
        self.listener.say(f"[red]lost server(s)[/] {list(servers)}: {error}. Training goes "
                          "on with all-reduce among the workers.")
        self.driver.space = space
        self.driver.record(TrialRecord(self.trial_index + 1, "fault", dict(config or {}), 0,
                                       None, f"lost server(s) {list(servers)}: {error}"))

    def fallback(self) -> Config:
        """The last configuration that ran, if it is still allowed, else the default."""
        good = self.last_good
        return good if good is not None and self.allowed(good) else self.space.default()

    def allowed(self, config: Config) -> bool:
        try:
            self.space.validate(config)
        except ConfigError:
            return False
        return True

    # ------------------------------------------------------------------ state
    @property
    def tuning(self) -> bool:
        """Whether trials (or the warm-up before them) are still running."""
        return self.phase != LOCKED

    @property
    def kept(self) -> Config | None:
        """The best configuration so far (after the budget: the one kept)."""
        return dict(self.best[0]) if self.best is not None else None

    def throughput(self, seconds: float) -> float:
        return (self.samples_per_step or 1) / max(seconds, 1e-9)

    def lossy(self, config: Config) -> bool:
        """Whether ``config`` is judged by its efficiency: a codec, scored by goodput."""
        return self.goodput and config.get("compression", "none") != "none"

    def _gain(self, config: Config, efficiency: float | None) -> float | None:
        """What a score of ``config``'s iteration is multiplied by: 1 unless it is
        :meth:`lossy`; then its efficiency (None while unknown)."""
        if not self.lossy(config):
            return 1.0
        return efficiency

    @property
    def unit(self) -> str:
        """What :meth:`throughput` counts (the session's unit): ``samples/s`` with
        ``samples_per_step``, else ``it/s``."""
        return "samples/s" if self.samples_per_step else "it/s"

    # --------------------------------------------------------------- phases
    def _warmed(self, config: Config, seconds: float) -> Config:
        """A warm-up iteration ran: trains, but is not a trial."""
        self.warmup_left -= 1
        if seconds != float("inf"):
            probing = self.probe is not None and config == self.probe
            (self.probe_times if probing else self.warmup_times).append(seconds)
        if self.warmup_left == 0:
            self._seed_streams()
            self.phase = TRIAL
            return self._next_trial()
        if self.warmup_left == 1 and self.probe is not None and self.allowed(self.probe):
            return self.probe
        return config

    def _seed_streams(self) -> None:
        """If the warm-up showed a per-flow cap, the seed configurations (the default,
        push/pull through every server) with the probe's streams are tried first."""
        if (self.probe is None or not self.probe_times or self.tuner is None
                or self._capped is None or not self._capped()):
            return
        seeds = []
        for c in self.space.seeds():  # the probe's streams, chunks no larger than its
            seed = {**c, "streams": self.probe["streams"]}
            if "chunk_bytes" in c:
                seed["chunk_bytes"] = min(c["chunk_bytes"], self.probe["chunk_bytes"])
            seeds.append(seed)
        self.tuner.try_first(seeds, technique=SEED)

    def _measured(self, seconds: float, failed: str | None, switched: bool = True,
                  gain: float | None = 1.0) -> Config:
        """An iteration of the trial under way ran (``switched``: under another
        configuration than the iteration before; ``gain``: :meth:`_gain`)."""
        trial = self.trial
        assert trial is not None
        self.tuning_iterations += 1
        self._trial_left -= 1
        # the first iteration of a trial pays for the switch, if there was one
        first = self._trial_left == trial.iterations - 1 and switched
        if failed is None and seconds != float("inf") and self.lossy(trial.config):
            failed = self._judged(gain, first)
        if failed is not None or seconds == float("inf"):
            self._finish(None, failed or "a worker failed under this configuration")
            return self._next_trial()
        mean = self._trial_gain()  # the trial's so far (this iteration's judged above)
        if first:
            self._switch_s = seconds
        else:
            self._trial_times.append(seconds)
            self.driver.sample(trial.config, self.throughput(seconds) * (mean or 1.0))
        self.listener.advanced(1)
        if (self._trial_left > 0 and not self._clearly_slow(seconds, first, mean or 1.0)
                and not self.tuner.enough(trial, len(self._trial_times))):
            return trial.config
        if mean is None:  # only its switch iteration was seen, with no efficiency
            self._finish(None, UNKNOWN_EFFICIENCY)
            return self._next_trial()
        speed = self.throughput(trial_seconds(self._trial_times, seconds,
                                              cut=self._trial_left > 0))
        self._finish(speed * mean, None, speed if self.lossy(trial.config) else None)
        return self._next_trial()

    def _judged(self, gain: float | None, first: bool) -> str | None:
        """Scored by goodput, an iteration of a lossy trial: why the trial fails (its
        efficiency unknown, or collapsed), or None. The ``first`` iteration after a switch
        also delivers what the previous codec's error feedback held back, which is not
        this codec's error: it only scores a trial that ends before another is seen (cut
        short for its speed), and never fails one."""
        if first:
            self._first_gain = gain
            return None
        if gain is None:
            return UNKNOWN_EFFICIENCY
        self._efficiencies.append(gain)
        return self._collapsed(self._trial_gain())

    @staticmethod
    def _collapsed(mean: float | None) -> str | None:
        if mean is None or mean >= COLLAPSED:
            return None
        return (f"statistical efficiency {mean:.2f} < {COLLAPSED}: the codec's error on the "
                f"averaged gradient would cost more steps to the same loss than its speed "
                f"saves (goodput, docs/compression.md)")

    def _trial_gain(self) -> float | None:
        """The trial's mean efficiency so far: 1 unless lossy; the switch iteration's when
        no other was seen; None when unknown."""
        if not self.lossy(self.trial.config):
            return 1.0
        if self._efficiencies:
            return statistics.fmean(self._efficiencies)
        return self._first_gain

    def _clearly_slow(self, seconds: float, first: bool, gain: float = 1.0) -> bool:
        """Its unscored switch iteration, even allowing :data:`SWITCH_MARGIN`, or its first
        scored iteration reached less than ``cut_short`` of the best score so far. A
        confirm trial is never cut short: it is there to be measured."""
        best = self.tuner.best if self.tuner is not None else None
        if self.cut_short is None or best is None or self.trial.technique == CONFIRM:
            return False
        if first:
            return self.throughput(seconds) * gain * SWITCH_MARGIN < self.cut_short * best[1]
        return (len(self._trial_times) == 1
                and self.throughput(seconds) * gain < self.cut_short * best[1])

    def _tune(self, budget: int, seed: int, warm: list[Config]) -> None:
        self.tuner = self._new_tuner(budget, seed, warm)
        self.driver.space, self.driver.tuner = self.space, self.tuner
        if budget > 0:
            self.listener.tuning(budget)

    def _next_trial(self) -> Config:
        trial = self.tuner.ask() if self.tuner is not None and not self.tuner.done else None
        if trial is None:
            return self._lock()
        self.trial = trial
        self.trial_index += 1
        self._trial_left = trial.iterations
        self._trial_times = []
        self._efficiencies = []
        self._first_gain = None
        self._switch_s = None
        self._trial_start = time.perf_counter()
        self.listener.trial_started(self.trial_index, trial)
        return trial.config

    def _finish(self, score: float | None, error: str | None,
                throughput: float | None = None) -> None:
        """The trial under way ends: ``score`` (None: failed, ``error`` says why); a lossy
        trial scored by goodput also has its ``throughput`` and efficiency recorded."""
        trial = self.trial
        assert trial is not None and self.tuner is not None
        # A failed trial still used its iterations so far (the Tuner counts them all);
        # one cut short gives the rest back to the budget.
        used = trial.iterations - self._trial_left
        if score is None:
            self.listener.advanced(self._trial_left)
        efficiency = self._trial_gain() if self.lossy(trial.config) else None
        if efficiency is not None and score is not None:
            self.trial_efficiency[self.space.key(trial.config)] = efficiency
        rec = self.driver.finish(trial, score, iterations=used,
                                 measured=len(self._trial_times), error=error,
                                 wall_time=time.perf_counter() - self._trial_start,
                                 index=self.trial_index, throughput=throughput,
                                 efficiency=efficiency)
        rec.switch_s = self._switch_s
        if error is not None:
            self.listener.say(f"[yellow]trial {rec.index} failed[/] ({trial.technique}, "
                              f"{rec.config}): {error}")
        best = self.tuner.best
        self.best = (dict(best[0]), best[1]) if best else self.best
        self._trial_left = 0
        self.listener.trial_finished(rec)

    def _lock(self) -> Config:
        """The budget is spent: keep the best configuration from now on."""
        self.phase = LOCKED
        self._window, self.baseline = [], None
        self._kept_efficiency = []
        kept = self.best[0] if self.best else self.fallback()
        self._settled_left, self._keeping = SETTLED_SAMPLES, dict(kept)
        if self.tuner is not None and self.tuner.separated and self.tuner.remaining > 0:
            self.listener.say(f"tuning: the kept configuration is separated from the runner-up "
                              f"by more than the noise; {self.tuner.remaining} iterations of "
                              f"the budget are not needed")
        self.listener.locked(self.kept)
        return kept

    def _settled(self, config: Config, seconds: float, gain: float | None = 1.0) -> None:
        """The first :data:`SETTLED_SAMPLES` settled iterations of the kept configuration
        (not the first after a switch) are scored iterations of it too: its mean, the one
        "best" number, then rests on training and not only on the trials that picked it,
        whose highest means were picked for being high (the winner's curse). Only the
        first ones, taken soon after the trials: the default's mean, which the speed-up
        divides by, was measured during them, and later iterations may meet a slower
        compute step (no re-tune) that the default never met."""
        if (self._keeping is not None and self._settled_left > 0
                and self.space.key(config) == self.space.key(self._keeping)):
            if gain is None:  # a kept codec's efficiency unknown: not scored
                return
            self._settled_left -= 1
            self.driver.sample(config, self.throughput(seconds) * gain)
            if self._settled_left == 0:
                self.listener.kept_measured(dict(self._keeping))

    def _end_settling(self) -> None:
        """A re-tune starts while the kept configuration's settled iterations are still
        being scored: its figure is final as it is."""
        if self._settled_left > 0 and self._keeping is not None:
            self._settled_left = 0
            self.listener.kept_measured(dict(self._keeping))

    def _watch_drift(self, seconds: float, config: Config, comm_s: float | None) -> Config:
        kept = self.best[0] if self.best else config
        if self.drift is None or self.best is None or seconds == float("inf"):
            return kept
        self._window.append((seconds, seconds if comm_s is None else comm_s))
        if len(self._window) < self.drift.window:
            return kept
        now = (statistics.median(w[0] for w in self._window),
               statistics.median(w[1] for w in self._window))
        self._window = []
        if self.baseline is None:
            self.baseline = now
            return kept
        (base_s, base_comm), (now_s, now_comm) = self.baseline, now
        if abs(now_comm - base_comm) <= self.drift.threshold * base_s:
            return kept
        from autotune.units import fmt_score, fmt_seconds

        what = "iteration" if comm_s is None else "communication"
        self.listener.say(f"[yellow]{what} time drifted[/] from {fmt_seconds(base_comm)} to "
                          f"{fmt_seconds(now_comm)} ({fmt_score(self.throughput(base_s), self.unit)}"
                          f" to {fmt_score(self.throughput(now_s), self.unit)}): "
                          f"re-tuning for {self.drift.budget} iterations")
        # The old best is stale: measure it again first, alongside its neighbours.
        return self._retune(self.drift.budget, self.best[0])

    def _retune(self, budget: int, first: Config) -> Config:
        """A re-tune of ``budget`` iterations whose first trial is ``first``. What was
        measured describes the job before the change: the means start afresh."""
        self.retunes.append(self.iteration)
        self._end_settling()
        self.driver.forget()
        self.best = None
        self.phase = TRIAL
        self._tune(budget, self.seed + self.iteration, [first])
        return self._next_trial()

    def _watch_efficiency(self, config: Config, efficiency: float | None) -> Config | None:
        """Scored by goodput, after tuning: a kept codec whose efficiency dropped (module
        docstring) starts a re-tune from the best lossless configuration; else None."""
        if not self.lossy(config) or efficiency is None or self.best is None:
            return None
        self._kept_efficiency.append(efficiency)
        window = self.drift.window if self.drift is not None else EFFICIENCY_WINDOW
        if len(self._kept_efficiency) < window:
            return None
        now = statistics.fmean(self._kept_efficiency)
        self._kept_efficiency = []
        measured = self.trial_efficiency.get(self.space.key(config), 1.0)
        if now >= max(COLLAPSED, DROPPED * measured):
            return None
        lossless = self._best_lossless()
        self.listener.say(f"[yellow]statistical efficiency of the kept codec dropped[/] from "
                          f"{measured:.2f} to {now:.2f}: back to lossless "
                          f"({lossless.get('compression', 'none')}) and re-tuning")
        budget = self.drift.budget if self.drift is not None else max(10, self.budget // 5)
        return self._retune(budget, lossless)

    def _best_lossless(self) -> Config:
        """The best-scored lossless configuration of the trials so far, else the default."""
        scored = [r for r in self.driver.history
                  if r.score is not None and r.config.get("compression", "none") == "none"]
        if not scored:
            return self.space.default()
        return dict(max(scored, key=lambda r: r.score).config)

    def _start_over(self, failed: str | None, config: Config) -> Config:
        """After a server loss. Settled: keep the configuration if it can still run, else
        re-tune briefly (with ``budget`` 0: the fallback). Tuning: the trial under way
        failed, and a new Tuner over the smaller space gets the budget left, warm-started
        from the best so far if that can still run."""
        self._replan = False
        best = self.best[0] if self.best and self.allowed(self.best[0]) else None
        if self.phase == LOCKED:
            kept = self.best[0] if self.best else config
            if self.allowed(kept):
                return kept
            if self.budget == 0:
                return self.fallback()
            budget = max(10, self.budget // 5)
        else:
            if self.phase == TRIAL and self.trial is not None and self._trial_left > 0:
                self._finish(None, failed or "servers lost")
            budget = self.tuner.remaining if self.tuner is not None else 0
        self.best = ((best, self.tuner.score_of(best) or 0.0)
                     if best and self.tuner is not None else None)
        self._end_settling()
        if budget <= 0:
            return self._lock()
        self._tune(budget, self.seed + self.iteration, [best] if best else [])
        if self.warmup_left > 0:
            self.phase = WARMUP
            return self.fallback()
        self.phase = TRIAL
        return self._next_trial()
