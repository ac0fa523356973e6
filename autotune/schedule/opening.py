"""From the warm-up to the first trial: the phases ``warmup``, ``waiting``, ``baseline``
and ``loading`` (:class:`~autotune.schedule.schedule.TrialSchedule`'s docstring says what
each does), and the start of a search.

:class:`Opening` holds what only this part of the schedule reads: the search the job
affords (:class:`~autotune.schedule.stakes.Allowance`), the warm start, what of it came
from the store (:class:`StoredStart`) and how long the first trial waits for the Tuner's
libraries. The functions named after a phase have the one interface of
:mod:`autotune.schedule.phase`.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from autotune.schedule.ledger import Ledger
from autotune.schedule.phase import BASELINE, LOADING, LOCKED, WAITING, Ran, Schedule
from autotune.schedule.loss_test import LENGTH as TEST_LENGTH
from autotune.schedule.stakes import SENSITIVE, TEST_SHARE, Allowance
from autotune.speedup import MIN_ITERATIONS
from autotune.tuning.efficiency import LOSSY_WARMUP
from autotune.tuning.lossy import lossless_seeds
from autotune.tuning.preload import loading as importing
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trial import throughput
from autotune.tuning.tuner import SEED

#: The longest the first trial waits for the Tuner's libraries to be imported
#: (:func:`~autotune.tuning.preload.loading`), in seconds.
MAX_LOADING_S = 30.0
#: Scored iterations of the check of fp16 while a young job waits for its search
#: (:func:`waiting`), after its switch iteration.
EARLY_ITERATIONS = 2
#: How much faster than the default's step fp16's check must run to stay for the wait.
EARLY_GAIN = 0.05


@dataclass
class StoredStart:
    """What the store offers a search (the session's provenance, leader/record.py),
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


@dataclass
class Opening:
    """What the start of a search reads (module docstring)."""

    allowance: Allowance
    warm: list[Config] = field(default_factory=list)
    stored: StoredStart = field(default_factory=StoredStart)
    loading_until: float = 0.0  # perf_counter: the first trial waits for imports until
    early: Config | None = None  # what the wait runs in the default's place (fp16)
    early_s: list[float] = field(default_factory=list)  # ... its check's scored times


def warmed(s: Schedule, ran: Ran) -> Config:
    """A warm-up iteration ran: trains, but is not a trial. At its end the tuning begins
    (:func:`begin`)."""
    warming = s.warmup_phase.ran(ran.config, ran.seconds, s.allowed, ran.comm_s)
    if warming is not None:
        return warming
    if s.tuner is not None:  # started over after a server loss during the warm-up
        s.tuner.try_first(s.warmup_phase.seeds(s.space, s.capped), technique=SEED)
        return s.next_trial()
    return begin(s)


def begin(s: Schedule) -> Config:
    """The warm-up is over: as much search as the job can pay back
    (:meth:`Stakes.allowance`), none where nothing is to be won, later where a young job
    cannot pay for it yet (``waiting``)."""
    allowance = s.opening.allowance = s.stakes.allowance(
        s.budget, s.iteration, s.warmup_phase.times, s.warmup_phase.comm)
    if allowance.budget == 0:
        stored = s.opening.stored
        proven = stored.tried(s.space, s.ledger, s.warmup_phase.times,
                              s.samples_per_step) if allowance.stored else None
        line = allowance.line(None if proven is None else stored.proven[2])
        if line:
            s.listener.say(line)
        if proven is not None:
            return baseline(s, None)
        s.enter(LOCKED)
        kept = s.space.default()
        s.kept_phase.keep(kept)
        return kept
    if allowance.reason is not None:
        s.listener.say(allowance.line())
    if allowance.start_at > s.iteration:
        s.enter(WAITING)
        return early(s)
    return search(s)


def early(s: Schedule) -> Config:
    """What a young job runs while it waits for its search: the default, or under
    goodput, where the wait is long enough for its check, the default with fp16
    (:func:`~autotune.tuning.lossy.lossless_seeds`: it needs no loss test), checked
    against the default's warm-up step (:func:`waiting`). Issue 62: at 15 Mbit/s the
    held-out LM waited 47 s at the default's speed, a fifth of DDP's steps, where fp16
    ran 1.8x faster."""
    seeds = lossless_seeds(s.space) if s.goodput else []
    wait = s.opening.allowance.start_at - s.iteration
    if not seeds or wait <= EARLY_ITERATIONS + 2 or s.stakes.step_s is None:
        return s.space.default()
    s.opening.early = seeds[0]
    return seeds[0]


def waiting(s: Schedule, ran: Ran) -> Config:
    """A young job runs the default, or fp16 once its check found it faster by
    :data:`EARLY_GAIN` (:func:`early`; the check's iterations are charged as trial
    iterations, the wait's after it are not), until it may pay for its search."""
    o = s.opening
    if o.early is not None and (not ran.ok or ran.config != o.early):
        o.early = None  # failed, or refused by the runtime: the default waits
    if s.iteration >= o.allowance.start_at:
        return search(s)
    if o.early is None or len(o.early_s) >= EARLY_ITERATIONS:
        return o.early or s.space.default()
    s.stakes.charge(ran.seconds)
    if not ran.switched:
        o.early_s.append(ran.seconds)
    if len(o.early_s) < EARLY_ITERATIONS:
        return o.early
    took, step = statistics.median(o.early_s), s.stakes.step_s
    codec = o.early.get("compression")
    if took > (1 - EARLY_GAIN) * step:
        s.listener.say(f"{codec} is no faster than the default ({took:.3g} s against "
                       f"{step:.3g} s a step): the default runs until the search")
        o.early = None
        return s.space.default()
    s.listener.say(f"{codec} runs until the search ({step / took:.2f}x the default's "
                   f"speed; it needs no loss test)")
    return o.early


def baseline(s: Schedule, ran: Ran | None) -> Config:
    """An iteration of the default ran (None: none yet) before a stored best is tried:
    scored, until the default has :data:`MIN_ITERATIONS`; then the stored best is kept,
    its settled iterations confirming it."""
    default = s.space.default()
    if ran is not None and ran.ok and not ran.switched and math.isfinite(ran.seconds):
        s.ledger.sample(default, throughput(s.samples_per_step, ran.seconds))
    if len(s.ledger.samples.get(s.space.key(default), [])) < MIN_ITERATIONS:
        s.enter(BASELINE)
        return default
    s.enter(LOCKED)
    kept = s.opening.stored.proven[0]
    s.kept_phase.keep(kept)
    return kept


def search(s: Schedule) -> Config:
    """The search the allowance affords starts: its Tuner is made (a fixed cost,
    measured: :meth:`Stakes.setup`) and its libraries are imported beside the job. Codecs
    wait out the sensitive phase (a lossless search first). If the warm-up showed a
    per-flow cap, the seeds with the probe's streams are tried first; under goodput, the
    default with fp16 after the warm start (:func:`~autotune.tuning.lossy.lossless_seeds`)."""
    budget = s.opening.allowance.budget
    until, why = codecs_wait(s)
    lossless = s.codecs.hold(s.iteration, until, budget)
    if lossless is not None:
        s.trial_phase.narrow(lossless)
        also = "".join(f" and {c}" for c in s.codecs.keep if c in lossless["compression"].values)
        s.listener.say(f"codecs wait for {why} (iteration {until}); tuning lossless{also} "
                       "until then" if math.isfinite(until) else
                       f"codecs are not tried in this job: {why}; tuning lossless{also}")
    stored = s.opening.stored
    for config, origin in stored.warm:  # the warm start is used: said, recorded
        s.ledger.came_from(config, origin)
    if stored.line:
        s.listener.say(stored.line)
    started = time.perf_counter()
    warm = s.opening.warm + (lossless_seeds(s.trial_phase.space) if s.goodput else [])
    s.trial_phase.tune(budget, s.seed, warm, s.warmup_phase.timings())
    s.tuner.try_first(s.warmup_phase.seeds(s.space, s.capped), technique=SEED)
    s.stakes.setup(time.perf_counter() - started)
    s.opening.loading_until = time.perf_counter() + MAX_LOADING_S
    return loaded(s)


def codecs_wait(s: Schedule) -> tuple[float, str]:
    """Until which iteration codecs wait (``inf``: never in this job), and why: the
    sensitive phase; under goodput also the gradient noise scale that judges them, and a
    job long enough to pay for their loss test (:meth:`Stakes.tested_from`)."""
    waits: list[tuple[float, str]] = [
        (s.stakes.sensitive_until(), f"the first {SENSITIVE:.0%} of training")]
    if s.goodput:
        waits.append((LOSSY_WARMUP, "the gradient noise scale, which judges them "
                      f"({LOSSY_WARMUP} lossless iterations)"))
        test = f"their loss test ({TEST_LENGTH} iterations)"
        share = f"{TEST_SHARE:.0%} of the iterations left"
        tested = s.stakes.tested_from(TEST_LENGTH)
        if tested is None:
            waits.append((math.inf, f"{test} would take over {share}"))
        else:
            unknown = "" if s.stakes.known else " (the length unknown: as many again as it has run)"
            waits.append((tested, f"a job long enough for {test} to take at most {share}{unknown}"))
    return max(waits, key=lambda w: w[0])


def loading(s: Schedule, ran: Ran) -> Config:
    """An iteration beside the import ran: on the job's clock, not scored."""
    s.stakes.loading(ran.seconds)
    return loaded(s)


def loaded(s: Schedule) -> Config:
    """The first trial once the Tuner's libraries are imported (at most
    :data:`MAX_LOADING_S`); until then the default runs, its iterations not scored (timed
    beside the import they are slower than the default is)."""
    if importing() and time.perf_counter() < s.opening.loading_until:
        s.enter(LOADING)
        return s.space.default()
    return s.next_trial()


__all__ = ["EARLY_GAIN", "EARLY_ITERATIONS", "MAX_LOADING_S", "Opening", "StoredStart",
           "baseline", "begin", "codecs_wait", "early", "loading", "search", "waiting", "warmed"]
