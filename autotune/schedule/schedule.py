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
``waiting``
    A young job of unknown length whose search would cost more than it may yet lose
    (:attr:`~autotune.schedule.stakes.Allowance.start_at`): the default runs, not a trial, until
    the job has run long enough; then the Tuner is made. The session measures none of
    the iterations in between (:meth:`TrialSchedule.quiet_for`).
``baseline``
    A job that affords no search tries a stored best (:class:`StoredStart`): first the
    default runs on, scored, until it has :data:`~autotune.speedup.MIN_ITERATIONS` scored
    iterations (the warm-up's count, but its first), the reference the stored best's
    settled iterations are then confirmed against (``locked``).
``loading``
    While the new Tuner's libraries are imported in the background
    (:mod:`autotune.tuning.preload`, at most :data:`MAX_LOADING_S`), the default runs,
    unscored: a trial timed beside the import, which takes the leader's CPU, would be
    slower than its configuration makes it.
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
``paused``
    A job of unknown length whose trials have lost their share of its elapsed time
    (:mod:`autotune.schedule.stakes`): the best configuration so far runs, unscored and
    uncharged, until the job has run twice as long; then the next trial starts.
``loss test``
    The search ended on a codec judged by goodput: before it is kept, it and the best
    configuration that needs no test run in alternating blocks, and the loss the loop
    passes says whether the job's loss falls faster under the codec
    (:mod:`~autotune.schedule.loss_test`); the verdict's configuration is ``locked``.
``locked``
    The budget is spent (or the job affords no search: then the default is kept, or
    a stored best that beat its own run's default, whose settled iterations below are
    its confirmation against the ``baseline``): the best configuration is kept, and its
    first
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
    no re-tune. Once the kept figure is final and nothing watches it, the schedule is
    :attr:`~TrialSchedule.settled`: nothing measured can change the configuration, and the
    session stops measuring (and so stops paying for its per-iteration collectives).

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

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from autotune.errors import ArgumentError
from autotune.schedule.codec_wait import CodecWait
from autotune.schedule.drift import Drift
from autotune.schedule.kept import KeptPhase, not_the_fastest
from autotune.schedule.ledger import Ledger
from autotune.schedule.listener import SETTLED_SAMPLES, Listener
from autotune.schedule.loss_test import LossTest
from autotune.schedule.stakes import SENSITIVE, SPEND, Allowance, SearchCosts, Stakes
from autotune.schedule.trial_phase import NewTuner, TrialPhase
from autotune.schedule.warmup import PROBE_STREAMS, Capped, WarmUp, flow_probe
from autotune.speedup import MIN_ITERATIONS
from autotune.tuning.efficiency import LOSSY_WARMUP
from autotune.tuning.lossy import SCORED_AS_LOSSLESS, judged_by_goodput, scored_efficiency
from autotune.tuning.preload import loading
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trial import FAILED, SWITCH_MARGIN, Trial, throughput, trial_seconds
from autotune.tuning.tuner import SEED, Tuner

# re-exported: the session, its display and the tests import them from here
__all__ = ["TrialSchedule", "Drift", "Listener", "PROBE_STREAMS", "REFERENCE_ITERATIONS",
           "SETTLED_SAMPLES", "SWITCH_MARGIN", "flow_probe", "trial_seconds"]

WARMUP, WAITING, BASELINE, LOADING, TRIAL, PAUSED, LOSS_TEST, LOCKED = (
    "warmup", "waiting", "baseline", "loading", "trial", "paused", "loss test", "locked")

#: The longest the first trial waits for the Tuner's libraries to be imported
#: (:func:`~autotune.tuning.preload.loading`), in seconds.
MAX_LOADING_S = 30.0

#: The length of the default's first trial (the Tuner's ``reference_iterations``): one
#: switch iteration and :data:`~autotune.speedup.MIN_ITERATIONS` scored ones, the fewest a
#: speed-up over the default needs. When it did not switch (the default ran just before,
#: in the warm-up) it ends after MIN_ITERATIONS and gives the last back to the budget.
REFERENCE_ITERATIONS = MIN_ITERATIONS + 1


@dataclass
class StoredStart:
    """What the store offers a search (the session's provenance, sessions/record.py),
    used only where the schedule uses it: ``warm``, the warm start's stored
    configurations with their origins, and ``line``, what says so, recorded and said when
    the search starts; ``proven``, a stored best that beat its own run's default by more
    than the noise, its origin, and the line that says it is tried: where the job
    affords no search (:attr:`Allowance.stored`), it is kept once the default has enough
    scored iterations (``baseline``), and its settled iterations confirm it against them
    (back to the default if not)."""

    warm: list[tuple[Config, dict[str, Any]]] = field(default_factory=list)
    line: str | None = None
    proven: tuple[Config, dict[str, Any], str] | None = None

    def tried(self, space: SearchSpace, ledger: Ledger, warmup_s: Sequence[float],
              samples_per_step: int | None) -> Config | None:
        """Where the job affords no search: the ``proven`` configuration, if it can run
        in ``space`` and is not the default; its origin is recorded, and the default's
        warm-up iterations (``warmup_s``) but the first (which pays for allocations) are
        scored, the start of the ``baseline``."""
        if self.proven is None:
            return None
        config, origin, _ = self.proven
        default = space.default()
        if not space.contains(config) or space.key(config) == space.key(default):
            return None
        ledger.came_from(config, origin)
        for seconds in warmup_s[1:]:
            ledger.sample(default, throughput(samples_per_step, seconds))
        return config


class TrialSchedule:
    """The leader's schedule of one job (module docstring).

    ``ledger`` measures, tells and records trials; ``new_tuner(budget, seed, warm,
    space, warmup)`` makes the Tuner for a (re-)tune (:data:`~autotune.schedule.trial_phase.
    NewTuner`); ``capped(times, probe_times)`` says whether
    the warm-up's times show a per-flow cap. The phases are parts of their own, each the
    one owner of its state: the warm-up (:attr:`warmup_phase`, :class:`WarmUp`), the
    trials of the current Tuner (:attr:`trial_phase`, :class:`TrialPhase`) and the kept
    configuration after them (:attr:`kept_phase`, :class:`KeptPhase`); they get what they
    need as values and say what follows. This class says which runs when.
    """

    def __init__(
        self,
        space: SearchSpace,
        ledger: Ledger,
        new_tuner: NewTuner,
        *,
        budget: int,
        warmup: int = 3,
        cut_short: float | None = 0.5,
        samples_per_step: int | None = None,
        drift: Drift | None = None,
        seed: int = 0,
        probe: bool = False,
        capped: Capped | None = None,
        listener: Listener | None = None,
        gradient_bytes: int | None = None,
        goodput: bool = False,
        total_steps: int | None = None,
        spend: float | None = SPEND,
        costs: SearchCosts | None = None,
    ) -> None:
        _check(budget, warmup, cut_short)
        self.ledger = ledger
        # what the job can win and what the trials cost it (autotune.schedule.stakes)
        self.stakes = Stakes(total_steps, spend, costs)
        self._allowance = Allowance(budget)  # the search the job affords (at the warm-up's end)
        self._charging = False  # whether the last next() was the search's (applied())
        self._warm_start: list[Config] = []  # the warm start, tried once tuning begins
        self._stored = StoredStart()  # what of it came from the store
        self.codecs = CodecWait(space)  # codecs wait out the sensitive phase
        self.budget = budget
        self.samples_per_step = samples_per_step
        self.seed = seed
        self._capped = capped
        self.listener = listener or Listener()
        self.listener.measured_by(ledger.measured)
        self.phase = WARMUP
        self.iteration = 0          # iterations measured (next() calls)
        self.goodput = goodput
        # scored by goodput: the noise scale needs lossless iterations before any codec
        self.warmup_phase = WarmUp(space, max(warmup, LOSSY_WARMUP) if goodput and budget > 0
                                   else warmup, probe, gradient_bytes)
        # the warm-up's times (the same lists) and its probe, read by the session
        self.warmup_times = self.warmup_phase.times
        self.probe_times = self.warmup_phase.probe_times
        self.last_good: Config | None = None
        self.retunes: list[int] = []  # iterations at which drift started a re-tune
        self._replan = False
        self._ran: Config | None = None  # the configuration of the previous iteration
        self._loading_until = 0.0  # perf_counter: the first trial waits for imports until
        self._ended_at: int | None = None  # the iteration the last trials ended at
        self._loss_test: LossTest | None = None  # a codec's, before it is kept
        # the current Tuner, the trial under way, the best so far
        self.trial_phase = TrialPhase(ledger, self.listener, new_tuner, samples_per_step,
                                      cut_short, space, goodput)
        # after tuning: the kept configuration's settled figure and its watches
        self.kept_phase = KeptPhase(ledger, self.listener, drift, budget, samples_per_step)

    # ---------------------------------------------------------------- start
    def start(self, warm: Sequence[Config], keep: Config | None = None,
              stored: StoredStart | None = None) -> Config:
        """The first configuration. ``warm``: warm-start configurations (the first is kept
        as it is when ``budget`` is 0); ``keep``: a configuration to keep without tuning
        (a restarted job's stored best); ``stored``: what of ``warm`` came from the store,
        said and recorded once it is used (:class:`StoredStart`)."""
        if keep is not None or self.budget == 0:
            self.phase = LOCKED
            kept = keep if keep is not None else (warm[0] if warm else self.space.default())
            self.kept_phase.keep(kept)
            return kept
        self._warm_start = list(warm)
        self._stored = stored or StoredStart()
        if self.warmup_phase.left:
            return self.space.default()
        return self._begin()

    # ------------------------------------------------------------ each iteration
    def next(self, config: Config, seconds: float, failed: str | None = None,
             comm_s: float | None = None, efficiency: float | None = None,
             loss: float | None = None) -> Config:
        """``config`` ran one iteration in ``seconds`` (the slowest worker's; ``inf``, or
        ``failed`` with the reason, when it failed): the configuration to run next.
        ``comm_s``: its communication time, what the drift watch judges (the least any
        worker waited for the averaged gradients: a straggler's compute is not in it).
        ``efficiency``: its statistical efficiency, when scored by goodput (module
        docstring; None: unknown). ``loss``: the training loss the loop passed (the mean
        over the workers; None: not passed), what a codec is kept by
        (:mod:`~autotune.schedule.loss_test`). The time this call takes (the searchers' and the
        prior's, while every rank waits for the answer) is on the job's clock too: it is
        charged to the trials' cost."""
        started = time.perf_counter()
        self.stakes.tick(seconds)
        tuning = self.phase != LOCKED
        try:
            return self._next(config, seconds, failed, comm_s, efficiency, loss)
        finally:
            took = time.perf_counter() - started
            self._charging = tuning or self.phase != LOCKED
            if self._charging:  # the search's time, charged to it
                self.stakes.overhead(took)
            else:  # after it: the job's clock only (what the done line said stays true)
                self.stakes.tick(took)

    def applied(self, seconds: float) -> None:
        """The configuration :meth:`next` returned took ``seconds`` to put in force on
        every rank (the session's switch: every rank waits for it, and no iteration's time
        holds it): charged to the search while it tunes, else on the job's clock only."""
        if self._charging:
            self.stakes.switch(seconds)
        else:
            self.stakes.tick(seconds)

    def _next(self, config: Config, seconds: float, failed: str | None,
              comm_s: float | None, efficiency: float | None, loss: float | None) -> Config:
        self.iteration += 1
        scored = scored_efficiency(self.goodput, config, efficiency)
        switched, self._ran = config != self._ran, dict(config)
        if seconds != float("inf") and failed is None:
            self.last_good = dict(config)
        if self._replan:
            return self._start_over(failed, config)
        if self.phase == LOCKED:
            if self.codecs.due(self.iteration):
                return self._codecs(config)
            if self.warmup_phase.left > 0:  # kept untuned from the start: a warm-up, unscored
                self.warmup_phase.unscored()
            elif not switched and failed is None and seconds != float("inf"):
                why = self.kept_phase.settled(self.space, config, seconds, scored)
                if why is not None:
                    self._back_to_default(why)
            kept = self.best[0] if self.best else config
            retune = self.kept_phase.retune(
                self.space, config, seconds, comm_s,
                efficiency if judged_by_goodput(self.goodput, config) else None,
                None if self.best is None else self.best[0])
            return kept if retune is None else self._retune(*retune, lossless=True)
        if self.phase == WARMUP:
            return self._warmed(config, seconds, comm_s)
        if self.phase == BASELINE:
            return self._baseline(config, seconds, failed, switched)
        if self.phase == WAITING:
            if self.iteration >= self._allowance.start_at:
                return self._search()
            return self.space.default()
        if self.phase == LOADING:
            self.stakes.loading(seconds)
            return self._when_loaded()
        if self.phase == PAUSED:
            if not self.stakes.may_resume():
                return self.best[0] if self.best else self.fallback()
            self.phase = TRIAL
            return self._next_trial()
        self.stakes.charge(float("inf") if failed is not None else seconds)
        if self.phase == LOSS_TEST:
            return self._loss_tested(config, seconds, failed, loss)
        return self._measured(seconds, failed, switched, scored, loss)

    def rejected(self, config: Config, error: str, retrying: bool = False) -> Config:
        """The runtime could not apply ``config`` (identically on every rank): outside a
        trial (or ``retrying`` a failed iteration) the fallback, else the trial fails and
        the next one is proposed."""
        if self.phase == LOSS_TEST:
            return self._loss_tested(config, float("inf"), error, None)
        if retrying or self.phase != TRIAL or self.trial_phase.trial is None:
            fallback = self.fallback()
            return fallback if config != fallback else self.space.default()
        self.trial_phase.finish(None, f"could not apply the configuration: {error}")
        return self._next_trial()

    def servers_lost(self, space: SearchSpace, servers: Sequence[int], error: str,
                     config: Config | None) -> None:
        """Servers stopped and ``space`` is what is left: reported and recorded now; the
        tuning starts over at the next iteration."""
        self.trial_phase.narrow(self.codecs.shrink(space))
        self._replan = True
        self.listener.say(f"[red]lost server(s)[/] {list(servers)}: {error}. Training goes "
                          "on with all-reduce among the workers.")
        self.ledger.record(Trial(self.trial_phase.index + 1, dict(config or {}), 0, "fault",
                                 state=FAILED, error=f"lost server(s) {list(servers)}: {error}"))

    def fallback(self) -> Config:
        """The last configuration that ran, if it is still allowed, else the default."""
        good = self.last_good
        return good if good is not None and self.allowed(good) else self.space.default()

    def allowed(self, config: Config) -> bool:  # (the session asks it too)
        return self.space.contains(config)

    # ------------------------------------------------------------------ state
    @property
    def tuning(self) -> bool:
        """Whether trials (or the warm-up before them) are still running."""
        return self.phase != LOCKED

    @property
    def settled(self) -> bool:
        """Whether no measurement can change the configuration any more: tuning is over,
        the kept configuration's figure is final and nothing watches it (no drift watch,
        no kept codec judged by its efficiency, no codec search to come). The caller may
        stop measuring; a failed iteration must still reach :meth:`next`."""
        return (self.phase == LOCKED and not self._replan and not self.codecs.waiting
                and self.warmup_phase.left <= 0 and self._ran is not None
                and self.kept_phase.done(judged_by_goodput(self.goodput, self._ran)))

    def quiet_for(self) -> float:
        """How many iterations after the next one need no measurement (:meth:`next` not
        called for them; :meth:`skipped` says when they ran): ``inf`` once
        :attr:`settled`; while a young job of unknown length waits (``waiting``), those
        before the search starts (not when scored by goodput: its efficiency samples
        follow every iteration); else 0. Measuring an iteration costs every rank
        collectives of its own (on 2 hosts at 1 Gbit/s, 2.3 s over 300 iterations)."""
        if self.settled:
            return math.inf
        if self.phase == WAITING and not self.goodput:
            return float(max(0, self._allowance.start_at - self.iteration - 2))
        return 0.0

    def skipped(self, iterations: int, seconds: float) -> None:
        """``iterations`` went by unmeasured in ``seconds`` (:meth:`quiet_for`): counted,
        and on the job's clock."""
        self.iteration += iterations
        self.stakes.tick(seconds)

    @property
    def space(self) -> SearchSpace:
        """The job's space (smaller once servers are lost)."""
        return self.trial_phase.space

    @property
    def tuner(self) -> Tuner | None:
        """The current Tuner (a new one after a re-tune); None before tuning."""
        return self.trial_phase.tuner

    @property
    def best(self) -> tuple[Config, float] | None:
        """The best configuration so far and the Tuner's mean score of it."""
        return self.trial_phase.best

    @property
    def kept(self) -> Config | None:
        """The best configuration so far (after the budget: the one kept)."""
        return dict(self.best[0]) if self.best is not None else None

    # --------------------------------------------------------------- phases
    def _warmed(self, config: Config, seconds: float, comm_s: float | None) -> Config:
        """A warm-up iteration ran: trains, but is not a trial. At its end the tuning
        begins (:meth:`_begin`)."""
        warming = self.warmup_phase.ran(config, seconds, self.allowed, comm_s)
        if warming is not None:
            return warming
        if self.tuner is not None:  # started over after a server loss during the warm-up
            self.tuner.try_first(self.warmup_phase.seeds(self.space, self._capped),
                                 technique=SEED)
            self.phase = TRIAL
            return self._next_trial()
        return self._begin()

    def _begin(self) -> Config:
        """The warm-up is over: as much search as the job can pay back
        (:meth:`Stakes.allowance`), none where nothing is to be won, later where a young job
        cannot pay for it yet (``waiting``)."""
        allowance = self._allowance = self.stakes.allowance(
            self.budget, self.iteration, self.warmup_phase.times, self.warmup_phase.comm)
        if allowance.budget == 0:
            proven = self._stored.tried(self.space, self.ledger, self.warmup_phase.times,
                                        self.samples_per_step) if allowance.stored else None
            line = allowance.line(None if proven is None else self._stored.proven[2])
            if line:
                self.listener.say(line)
            if proven is not None:
                return self._baseline(self.space.default(), None, None, False)
            self.phase = LOCKED
            kept = self.space.default()
            self.kept_phase.keep(kept)
            return kept
        if allowance.reason is not None:
            self.listener.say(allowance.line())
        if allowance.start_at > self.iteration:
            self.phase = WAITING
            return self.space.default()
        return self._search()

    def _baseline(self, config: Config, seconds: float | None, failed: str | None,
                  switched: bool) -> Config:
        """An iteration of the default ran (``seconds``; None: none yet) before a stored
        best is tried: scored, until the default has :data:`MIN_ITERATIONS`; then the
        stored best is kept, its settled iterations confirming it."""
        default = self.space.default()
        if seconds is not None and failed is None and not switched and math.isfinite(seconds):
            self.ledger.sample(default, throughput(self.samples_per_step, seconds))
        if len(self.ledger.samples.get(self.space.key(default), [])) < MIN_ITERATIONS:
            self.phase = BASELINE
            return default
        self.phase = LOCKED
        kept = self._stored.proven[0]
        self.kept_phase.keep(kept)
        return kept

    def _search(self) -> Config:
        """The search :attr:`_allowance` affords starts: its Tuner is made (a fixed cost,
        measured: :meth:`Stakes.setup`) and its libraries are imported beside the job.
        Codecs wait out the sensitive phase (a lossless search first). If the warm-up
        showed a per-flow cap, the seeds with the probe's streams are tried first."""
        budget = self._allowance.budget
        lossless = self.codecs.hold(self.iteration, self.stakes.sensitive_until(), budget)
        if lossless is not None:
            self.trial_phase.narrow(lossless)
            self.listener.say(f"codecs wait for the first {SENSITIVE:.0%} of training "
                              f"(iteration {self.codecs.at}); tuning lossless until then")
        for config, origin in self._stored.warm:  # the warm start is used: said, recorded
            self.ledger.came_from(config, origin)
        if self._stored.line:
            self.listener.say(self._stored.line)
        started = time.perf_counter()
        self.trial_phase.tune(budget, self.seed, self._warm_start,
                              self.warmup_phase.timings())
        self.tuner.try_first(self.warmup_phase.seeds(self.space, self._capped), technique=SEED)
        self.stakes.setup(time.perf_counter() - started)
        self._loading_until = time.perf_counter() + MAX_LOADING_S
        return self._when_loaded()

    def _when_loaded(self) -> Config:
        """The first trial once the Tuner's libraries are imported (:func:`~autotune.
        tuning.preload.loading`, at most :data:`MAX_LOADING_S`); until then the default
        runs, its iterations not scored (timed beside the import they are slower than
        the default is)."""
        if loading() and time.perf_counter() < self._loading_until:
            self.phase = LOADING
            return self.space.default()
        self.phase = TRIAL
        return self._next_trial()

    def _codecs(self, config: Config) -> Config:
        """The sensitive phase is over: a short search over the whole space (codecs in),
        from the kept lossless configuration."""
        full, budget = self.codecs.let_in()
        self.trial_phase.narrow(full)
        self.listener.say(f"iteration {self.iteration}: past the sensitive phase, trying "
                          f"codecs for {budget} iterations")
        return self._retune(budget, self.best[0] if self.best else config)

    def _back_to_default(self, why: str) -> None:
        """The kept configuration was not faster than the default once it trained
        (``why``): the default is kept from now on."""
        self.listener.say(why)
        default = self.space.default()
        score = self.tuner.score_of(default) if self.tuner is not None else None
        self.trial_phase.set_best((default, score or 0.0))
        self.kept_phase.restart_watch()

    def cost(self) -> dict:
        """What tuning cost and saved so far (:meth:`Stakes.summary`), with the kept
        configuration's measured step."""
        kept = self.kept if self.kept is not None else self.fallback()
        m = self.ledger.measured(kept)
        kept_s = None if not m or not m[0] else (self.samples_per_step or 1) / m[0]
        at = self._ended_at if self._ended_at is not None and self.phase == LOCKED \
            else self.iteration
        return self.stakes.summary(kept_s, at)

    def _measured(self, seconds: float, failed: str | None, switched: bool = True,
                  scored: float | None = 1.0, loss: float | None = None) -> Config:
        """An iteration of the trial under way ran (:meth:`TrialPhase.measured`)."""
        nxt = self.trial_phase.measured(seconds, failed, switched, scored, self.stakes.spent,
                                        loss)
        return self._stopped() if nxt is None else nxt

    def _next_trial(self) -> Config:
        nxt = self.trial_phase.next_trial(self.stakes.spent)
        return self._stopped() if nxt is None else nxt

    def _stopped(self) -> Config:
        """No next trial: the Tuner's budget is spent (locked), or the trials have lost
        their share of the job's time: locked when its length is known, paused when not
        (:mod:`autotune.schedule.stakes`)."""
        tuner = self.tuner
        if not (self.stakes.spent and self.stakes.pausable and tuner is not None
                and not tuner.done and not self.trial_phase.stopped):
            return self._lock()
        line = self.stakes.pause()
        if line is not None:
            self.listener.say(line)
        self.phase = PAUSED
        return self.best[0] if self.best else self.fallback()

    def _lock(self, tested: bool = False) -> Config:
        """The budget is spent: keep the best configuration from now on; a codec judged by
        goodput only once the loss test has kept it (``tested``, :meth:`_loss_tested`)."""
        kept = self.best[0] if self.best else self.fallback()
        lossless = self.ledger.best_lossless(self.space, SCORED_AS_LOSSLESS)
        if not tested and judged_by_goodput(self.goodput, kept) and self.allowed(lossless) \
                and not judged_by_goodput(True, lossless):  # (not a pinned codec)
            self._loss_test = LossTest(kept, lossless)
            self.phase = LOSS_TEST
            return self._loss_test.config()
        self.phase = LOCKED
        self._ended_at = self.iteration
        line = self.stakes.stopped_line()
        if line is not None:
            self.listener.say(line)
        self.kept_phase.lock(kept, self.tuner,
                             self.trial_phase.efficiency.get(self.space.key(kept), 1.0))
        self.listener.locked(self.kept, not_the_fastest(self.ledger, self.tuner, kept,
                                                         self.samples_per_step))
        return kept

    def _loss_tested(self, config: Config, seconds: float, failed: str | None,
                     loss: float | None) -> Config:
        """An iteration of the loss test ran (``inf`` seconds, or ``failed``: it failed
        or was refused): what runs next, or, with its verdict, the codec or the lossless
        configuration locked in (a refused or failing codec is not kept)."""
        test = self._loss_test
        verdict = test.ran(config, seconds, loss, failed)
        if verdict is None:
            return test.config()
        self.listener.say(f"iteration {self.iteration}: {verdict.line}")
        if not verdict.keep:  # recorded: the store says why the codec was not kept
            self.ledger.record(test.record(self.trial_phase.index + 1, verdict))
            score = self.tuner.score_of(test.lossless) if self.tuner is not None else None
            self.trial_phase.set_best((test.lossless, score or 0.0))
        return self._lock(tested=True)

    def _retune(self, budget: int, first: Config, lossless: bool = False) -> Config:
        """A re-tune of ``budget`` iterations whose first trial is ``first``. What was
        measured describes the job before the change: the means start afresh.
        ``lossless``: a re-tune once a kept configuration has settled (:meth:`_lossless`)."""
        if lossless:
            first = self._lossless(first)
        self.retunes.append(self.iteration)
        self.kept_phase.end_settling()
        self.ledger.forget()
        self.trial_phase.set_best(None)
        self.phase = TRIAL
        self.trial_phase.tune(budget, self.seed + self.iteration, [first],
                              self.warmup_phase.timings())
        return self._next_trial()

    def _lossless(self, first: Config | None) -> Config | None:
        """From now on the trials are lossless, and so is ``first`` (a codec's becomes the
        best lossless configuration measured). Codecs are tried once, in the search after
        the sensitive phase; a later re-tune (drift, a kept codec's efficiency dropping, a
        lost server) tries none (issue 62: a late re-tune's codec trials undid a codec's
        lead over DDP, its loss jumping from 2.46 to 2.73)."""
        space = self.trial_phase.space
        if space.lossy:
            self.trial_phase.narrow(space.lossless())
        if first is not None and first.get("compression", "none") != "none":
            first = self.ledger.best_lossless(space)
        return first

    def _start_over(self, failed: str | None, config: Config) -> Config:
        """After a server loss. Settled: keep the configuration if it can still run, else
        re-tune briefly (with ``budget`` 0: the fallback). Tuning: the trial under way
        failed, and a new Tuner over the smaller space gets the budget left, warm-started
        from the best so far if that can still run."""
        self._replan = False
        if self.phase == WARMUP and self.tuner is None:
            return self.fallback()  # the tuning begins over the smaller space after it
        best = self.best[0] if self.best and self.allowed(self.best[0]) else None
        if self.phase == LOCKED:
            kept = self.best[0] if self.best else config
            if self.allowed(kept):
                return kept
            if self.budget == 0:
                return self.fallback()
            budget = max(10, self.budget // 5)
            best = self._lossless(best)
        else:
            if self.phase == TRIAL and self.trial_phase.under_way:
                self.trial_phase.finish(None, failed or "servers lost")
            budget = self.tuner.remaining if self.tuner is not None else 0
        self.trial_phase.set_best((best, self.tuner.score_of(best) or 0.0)
                                  if best and self.tuner is not None else None)
        self.kept_phase.end_settling()
        if budget <= 0:
            return self._lock()
        self.trial_phase.tune(budget, self.seed + self.iteration, [best] if best else [],
                             self.warmup_phase.timings())
        if self.warmup_phase.left > 0:
            self.phase = WARMUP
            return self.fallback()
        self.phase = TRIAL
        return self._next_trial()


def _check(budget: int, warmup: int, cut_short: float | None) -> None:
    """:class:`TrialSchedule`'s arguments, checked."""
    if budget < 0:
        raise ArgumentError(f"budget must be >= 0, got {budget}")
    if warmup < 0:
        raise ArgumentError(f"warmup must be >= 0, got {warmup}")
    if cut_short is not None and not 0 < cut_short < 1:
        raise ArgumentError(f"cut_short is a fraction in (0, 1) or None, got {cut_short}")
