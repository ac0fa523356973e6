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
    the iterations in between (:meth:`TrialSchedule.quiet_for`). Under goodput the wait
    runs fp16 instead where a check of two iterations finds it faster
    (:func:`~autotune.schedule.opening.early`: it needs no loss test).
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
    The search would keep a codec judged by goodput (at its end, or as soon as such a
    codec is the best so far: no trial runs before it is tested): it and the best
    configuration that needs no test run in alternating blocks, and the loss the loop
    passes says whether the job's loss falls faster under the codec
    (:mod:`~autotune.schedule.loss_test`). At the search's end the verdict's configuration
    is ``locked``; during it, a codec kept lets the trials go on, one rejected ends the
    codec trials: the search goes on with its budget left over the configurations that
    need no test (lossless, fp16), as when the codec watch ends them.
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

* no codec judged by goodput runs in the first :data:`~autotune.tuning.efficiency.LOSSY_WARMUP`
  iterations, so that the noise scale is stable before any codec is judged: the search
  over the lossless configurations (and fp16, scored like them) runs first and the codecs
  are let in after it (:mod:`~autotune.schedule.codec_wait`), and only once the job is
  long enough to pay for their loss test; a lossy trial whose efficiency is still unknown
  fails, saying so;
* a lossy trial whose mean efficiency falls below
  :data:`~autotune.tuning.efficiency.COLLAPSED` fails at once, with the efficiency in
  its error (and so in the store);
* after tuning, a kept codec whose efficiency (mean of a window of iterations) falls below
  :data:`~autotune.tuning.efficiency.DROPPED` of what its trials measured, or below
  ``COLLAPSED``, starts a re-tune whose first trial is the best lossless configuration
  (a critical regime, or a learning-rate change: Accordion, MLSys 2021).

What a person sees goes through a :class:`Listener` (a progress bar, or nothing).

Each phase is a function with one interface, ``(schedule, ran) -> configuration``
(:mod:`~autotune.schedule.phase`), in the module of its part of the job:
:mod:`~autotune.schedule.opening` (``warmup``, ``waiting``, ``baseline``, ``loading``),
this module (``trial``, ``paused``) and :mod:`~autotune.schedule.locked` (``loss test``,
``locked``, re-tunes). This class holds the parts they share and the events from outside.
"""

from __future__ import annotations

import math
import time
from typing import Sequence

from autotune.errors import ArgumentError
from autotune.schedule import locked as after
from autotune.schedule import opening
from autotune.schedule.codec_wait import CodecWait
from autotune.schedule.drift import Drift
from autotune.schedule.kept import KeptPhase
from autotune.schedule.ledger import Ledger
from autotune.schedule.listener import SETTLED_SAMPLES, Listener
from autotune.schedule.loss_test import LossTest
from autotune.schedule.opening import MAX_LOADING_S, Opening, StoredStart
from autotune.schedule.phase import (BASELINE, LOADING, LOCKED, LOSS_TEST, PAUSED, TRIAL,
                                     WAITING, WARMUP, Phase, Ran)
from autotune.schedule.stakes import SPEND, Allowance, SearchCosts, Stakes
from autotune.schedule.trial_phase import NewTuner, TrialPhase
from autotune.schedule.warmup import PROBE_STREAMS, Capped, WarmUp, flow_probe
from autotune.speedup import MIN_ITERATIONS
from autotune.tuning.lossy import SCORED_AS_LOSSLESS, judged_by_goodput, scored_efficiency
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trial import FAILED, SWITCH_MARGIN, Trial, trial_seconds
from autotune.tuning.tuner import Tuner

# re-exported: the session, its display and the tests import them from here
__all__ = ["BASELINE", "Drift", "LOADING", "LOCKED", "LOSS_TEST", "Listener",
           "MAX_LOADING_S", "PAUSED", "PROBE_STREAMS", "REFERENCE_ITERATIONS",
           "SETTLED_SAMPLES", "SWITCH_MARGIN", "StoredStart", "TRIAL", "TrialSchedule",
           "WAITING", "WARMUP", "flow_probe", "trial_seconds"]

#: The length of the default's first trial (the Tuner's ``reference_iterations``): one
#: switch iteration and :data:`~autotune.speedup.MIN_ITERATIONS` scored ones, the fewest a
#: speed-up over the default needs. When it did not switch (the default ran just before,
#: in the warm-up) it ends after MIN_ITERATIONS and gives the last back to the budget.
REFERENCE_ITERATIONS = MIN_ITERATIONS + 1


def trial(s: TrialSchedule, ran: Ran) -> Config:
    """An iteration of the trial under way ran (:meth:`TrialPhase.measured`); one of
    the default's is a sample of the step the trials are charged against."""
    s.stakes.charge(float("inf") if ran.failed is not None else ran.seconds)
    if ran.ok and not ran.switched and ran.config == s.space.default():
        s.stakes.default_ran(ran.seconds)
    nxt = s.trial_phase.measured(ran.seconds, ran.failed, ran.switched, ran.scored,
                                 s.stakes.spent, ran.loss)
    return s.stopped() if nxt is None else nxt


def paused(s: TrialSchedule, ran: Ran) -> Config:
    """The trials lost their share of the job's time: the best so far runs until the
    job has run long enough for the next (:meth:`Stakes.may_resume`)."""
    if not s.stakes.may_resume():
        return s.best[0] if s.best else s.fallback()
    return s.next_trial()


def loss_test(s: TrialSchedule, ran: Ran) -> Config:
    """An iteration of the loss test ran: charged to the search."""
    s.stakes.charge(float("inf") if ran.failed is not None else ran.seconds)
    return after.loss_testing(s, ran)


#: Each phase's function (:mod:`autotune.schedule.phase`).
PHASES: dict[str, Phase] = {
    WARMUP: opening.warmed, WAITING: opening.waiting, BASELINE: opening.baseline,
    LOADING: opening.loading, TRIAL: trial, PAUSED: paused, LOSS_TEST: loss_test,
    LOCKED: after.locked,
}


class TrialSchedule:
    """The leader's schedule of one job (module docstring).

    ``ledger`` measures, tells and records trials; ``new_tuner(budget, seed, warm,
    space, warmup)`` makes the Tuner for a (re-)tune (:data:`~autotune.schedule.trial_phase.
    NewTuner`); ``capped(times, probe_times)`` says whether
    the warm-up's times show a per-flow cap. The phases are functions of the parts they
    share (:data:`PHASES`); the parts are each the one owner of their state: the warm-up
    (:attr:`warmup_phase`, :class:`WarmUp`), the start of a search (:attr:`opening`,
    :class:`~autotune.schedule.opening.Opening`), the trials of the current Tuner
    (:attr:`trial_phase`, :class:`TrialPhase`), the kept configuration after them
    (:attr:`kept_phase`, :class:`KeptPhase`), the codecs' wait (:attr:`codecs`) and what
    the search costs (:attr:`stakes`). This class says which phase runs, and hears the
    events from outside.
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
        # the search the job affords (at the warm-up's end), the warm start, the imports
        self.opening = Opening(Allowance(budget))
        self._charging = False  # whether the last next() was the search's (applied())
        # codecs wait out the sensitive phase, and under goodput the noise scale
        self.codecs = CodecWait(space, SCORED_AS_LOSSLESS if goodput else ())
        self.budget = budget
        self.samples_per_step = samples_per_step
        self.seed = seed
        self.capped = capped
        self.listener = listener or Listener()
        self.listener.measured_by(ledger.measured)
        self.phase = WARMUP
        self.iteration = 0          # iterations measured (next() calls)
        self.goodput = goodput
        self.warmup_phase = WarmUp(space, warmup, probe, gradient_bytes)
        # the warm-up's times (the same lists) and its probe, read by the session
        self.warmup_times = self.warmup_phase.times
        self.probe_times = self.warmup_phase.probe_times
        self.last_good: Config | None = None
        self.retunes: list[int] = []  # iterations at which drift started a re-tune
        self._replan = False
        self._ran: Config | None = None  # the configuration of the previous iteration
        self.ended_at: int | None = None  # the iteration the last trials ended at
        self.loss_test: LossTest | None = None  # a codec's, before it is kept
        # the current Tuner, the trial under way, the best so far
        self.trial_phase = TrialPhase(ledger, self.listener, new_tuner, samples_per_step,
                                      cut_short, space, goodput)
        # after tuning: the kept configuration's settled figure and its watches
        self.kept_phase = KeptPhase(ledger, self.listener, drift, budget, samples_per_step)

    def enter(self, phase: str) -> None:
        """From now on ``phase`` (one of :data:`PHASES`) hears the iterations."""
        self.phase = phase

    # ---------------------------------------------------------------- start
    def start(self, warm: Sequence[Config], keep: Config | None = None,
              stored: StoredStart | None = None) -> Config:
        """The first configuration. ``warm``: warm-start configurations (the first is kept
        as it is when ``budget`` is 0); ``keep``: a configuration to keep without tuning
        (a restarted job's stored best); ``stored``: what of ``warm`` came from the store,
        said and recorded once it is used (:class:`StoredStart`)."""
        if keep is not None or self.budget == 0:
            self.enter(LOCKED)
            kept = keep if keep is not None else (warm[0] if warm else self.space.default())
            self.kept_phase.keep(kept)
            return kept
        self.opening.warm = list(warm)
        self.opening.stored = stored or StoredStart()
        if self.warmup_phase.left:
            return self.space.default()
        return opening.begin(self)

    # ------------------------------------------------------------ each iteration
    def next(self, config: Config, seconds: float, failed: str | None = None,
             comm_s: float | None = None, efficiency: float | None = None,
             loss: float | None = None, measure_s: float = 0.0) -> Config:
        """``config`` ran one iteration in ``seconds`` (the slowest worker's; ``inf``, or
        ``failed`` with the reason, when it failed): the configuration to run next.
        ``comm_s``: its communication time, what the drift watch judges (the least any
        worker waited for the averaged gradients: a straggler's compute is not in it).
        ``efficiency``: its statistical efficiency, when scored by goodput (module
        docstring; None: unknown). ``loss``: the training loss the loop passed (the mean
        over the workers; None: not passed), what a codec is kept by
        (:mod:`~autotune.schedule.loss_test`). The time this call takes (the searchers' and the
        prior's, while every rank waits for the answer) is on the job's clock too: it is
        charged to the trials' cost, and so is ``measure_s``, what measuring the iteration
        took the leader beyond ``seconds`` (the collective that carried them: with
        ``seconds``, the leader's own clock)."""
        started = time.perf_counter() - measure_s
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
        ran = Ran(dict(config), seconds, failed, comm_s, efficiency, loss,
                  switched=config != self._ran,
                  scored=scored_efficiency(self.goodput, config, efficiency))
        self._ran = dict(config)
        if ran.ok:
            self.last_good = dict(config)
        if self._replan:
            return self._start_over(failed, config)
        return PHASES[self.phase](self, ran)

    def rejected(self, config: Config, error: str, retrying: bool = False) -> Config:
        """The runtime could not apply ``config`` (identically on every rank): outside a
        trial (or ``retrying`` a failed iteration) the fallback, else the trial fails and
        the next one is proposed."""
        if self.phase == LOSS_TEST:
            return after.loss_testing(self, Ran(dict(config), float("inf"), error))
        if retrying or self.phase != TRIAL or self.trial_phase.trial is None:
            fallback = self.fallback()
            return fallback if config != fallback else self.space.default()
        self.trial_phase.finish(None, f"could not apply the configuration: {error}")
        return self.next_trial()

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
            return float(max(0, self.opening.allowance.start_at - self.iteration - 2))
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
        """After the budget, the configuration kept; before, what the job would keep if
        it ended now (:meth:`TrialPhase.provisional`)."""
        if self.phase != LOCKED:
            return self.trial_phase.provisional()
        return dict(self.best[0]) if self.best is not None else None

    def cost(self) -> dict:
        """What tuning cost and saved so far (:meth:`Stakes.summary`), with the kept
        configuration's measured step."""
        kept = self.kept if self.kept is not None else self.fallback()
        m = self.ledger.measured(kept)
        kept_s = None if not m or not m[0] else (self.samples_per_step or 1) / m[0]
        at = self.ended_at if self.ended_at is not None and self.phase == LOCKED \
            else self.iteration
        return self.stakes.summary(kept_s, at)

    # ------------------------------------------------- moves the phases share
    def next_trial(self) -> Config:
        """The Tuner's next trial (:meth:`TrialPhase.next_trial`), or, with none,
        :meth:`stopped`."""
        self.enter(TRIAL)
        nxt = self.trial_phase.next_trial(self.stakes.spent)
        return self.stopped() if nxt is None else nxt

    def stopped(self) -> Config:
        """No next trial: the codec trials ended (the search goes on without them,
        :func:`~autotune.schedule.locked.without_codecs`), the Tuner's budget is spent
        (locked), or the trials have lost their share of the job's time: locked when its
        length is known, paused when not (:mod:`autotune.schedule.stakes`)."""
        tuner = self.tuner
        if self.trial_phase.stopped and not self.stakes.spent:  # the codec trials ended
            return after.without_codecs(self)
        if not (self.stakes.spent and self.stakes.pausable and tuner is not None
                and not tuner.done and not self.trial_phase.stopped):
            return after.lock(self)
        line = self.stakes.pause()
        if line is not None:
            self.listener.say(line)
        self.enter(PAUSED)
        return self.best[0] if self.best else self.fallback()

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
            best = after.lossless_from(self, best)
        else:
            if self.phase == TRIAL and self.trial_phase.under_way:
                self.trial_phase.finish(None, failed or "servers lost")
            budget = self.tuner.remaining if self.tuner is not None else 0
        self.trial_phase.set_best((best, self.tuner.score_of(best) or 0.0)
                                  if best and self.tuner is not None else None)
        self.kept_phase.end_settling()
        if budget <= 0:
            return after.lock(self)
        self.trial_phase.tune(budget, self.seed + self.iteration, [best] if best else [],
                             self.warmup_phase.timings())
        if self.warmup_phase.left > 0:
            self.enter(WARMUP)
            return self.fallback()
        return self.next_trial()


def _check(budget: int, warmup: int, cut_short: float | None) -> None:
    """:class:`TrialSchedule`'s arguments, checked."""
    if budget < 0:
        raise ArgumentError(f"budget must be >= 0, got {budget}")
    if warmup < 0:
        raise ArgumentError(f"warmup must be >= 0, got {warmup}")
    if cut_short is not None and not 0 < cut_short < 1:
        raise ArgumentError(f"cut_short is a fraction in (0, 1) or None, got {cut_short}")
