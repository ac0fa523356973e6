"""After the search: the phases ``loss test`` and ``locked``, and re-tunes
(:class:`~autotune.schedule.schedule.TrialSchedule`'s docstring says what each does).

:func:`lock` ends a search: a codec judged by goodput goes through the loss test first
(:mod:`~autotune.schedule.loss_test`), whatever is kept is handed to the kept phase
(:mod:`~autotune.schedule.kept`). While locked, the kept phase's watches may start a
re-tune (:func:`retune`), and the codecs' wait (:mod:`~autotune.schedule.codec_wait`) a
short codec search. The functions named after a phase have the one interface of
:mod:`autotune.schedule.phase`.
"""

from __future__ import annotations

from autotune.schedule.kept import not_the_fastest
from autotune.schedule.loss_test import LossTest
from autotune.schedule.phase import LOCKED, LOSS_TEST, Ran, Schedule
from autotune.schedule.stakes import MIN_SEARCH
from autotune.tuning.lossy import SCORED_AS_LOSSLESS, codec_of, judged_by_goodput
from autotune.tuning.space import Config


def locked(s: Schedule, ran: Ran) -> Config:
    """An iteration of the kept configuration ran: its settled figure and its watches
    (:class:`~autotune.schedule.kept.KeptPhase`); the codecs' search when it is due."""
    if s.codecs.due(s.iteration):
        return codecs(s, ran.config)
    if s.warmup_phase.left > 0:  # kept untuned from the start: a warm-up, unscored
        s.warmup_phase.unscored()
    elif not ran.switched and ran.ok:
        why = s.kept_phase.measure(s.space, ran.config, ran.seconds, ran.scored)
        if why is not None:
            back_to_default(s, why)
    kept = s.best[0] if s.best else ran.config
    watched = ran.efficiency if judged_by_goodput(s.goodput, ran.config) else None
    again = s.kept_phase.retune(s.space, ran.config, ran.seconds, ran.comm_s, watched,
                                None if s.best is None else s.best[0])
    return kept if again is None else retune(s, *again, lossless=True)


def lock(s: Schedule, tested: bool = False) -> Config:
    """The budget is spent, or the search waits for the loss test of the codec it would
    keep (:meth:`TrialPhase.untested`): keep the best configuration from now on; a codec
    judged by goodput only once the loss test has kept it (``tested``, or kept during the
    search, :func:`loss_testing`)."""
    kept = s.best[0] if s.best else s.fallback()
    lossless = s.ledger.best_lossless(s.space, SCORED_AS_LOSSLESS)
    if not tested and judged_by_goodput(s.goodput, kept) and s.allowed(lossless) \
            and codec_of(kept) not in s.trial_phase.admitted \
            and not judged_by_goodput(True, lossless):  # (not a pinned codec)
        s.loss_test = LossTest(kept, lossless)
        s.enter(LOSS_TEST)
        return s.loss_test.config()
    s.enter(LOCKED)
    s.ended_at = s.iteration
    line = s.stakes.stopped_line()
    if line is not None:
        s.listener.say(line)
    s.kept_phase.lock(kept, s.tuner, s.trial_phase.efficiency.get(s.space.key(kept), 1.0))
    s.listener.locked(s.kept, not_the_fastest(s.ledger, s.tuner, kept, s.samples_per_step))
    return kept


def loss_testing(s: Schedule, ran: Ran) -> Config:
    """An iteration of the loss test ran (``inf`` seconds, or ``failed``: it failed or
    was refused): what runs next, or, with its verdict, the codec or the lossless
    configuration locked in (a refused or failing codec is not kept). A test the search
    waited for (its Tuner not done): a codec kept lets the search go on, admitted; one
    rejected ends the search's trials (as the codec watch ends them)."""
    test = s.loss_test
    verdict = test.ran(ran.config, ran.seconds, ran.loss, ran.failed)
    if verdict is None:
        return test.config()
    s.listener.say(f"iteration {s.iteration}: {verdict.line}")
    searching = s.tuner is not None and not s.tuner.done and not s.trial_phase.stopped
    if verdict.keep:
        s.trial_phase.admitted.add(codec_of(test.codec))
        if searching:
            return s.next_trial()
    else:  # recorded: the store says why the codec was not kept
        s.ledger.record(test.record(s.trial_phase.index + 1, verdict))
        score = s.tuner.score_of(test.lossless) if s.tuner is not None else None
        s.trial_phase.set_best((test.lossless, score or 0.0))
        if searching:
            s.trial_phase.stopped = verdict.line
            return without_codecs(s)
    return lock(s, tested=True)


def without_codecs(s: Schedule) -> Config:
    """The search's codec trials ended (the loss test rejected the codec that was the best
    so far, or the codec watch saw the loss fall slower under them: ``s.trial_phase.
    stopped`` says why): the search goes on, with the budget it has left, over the
    configurations that need no loss test (lossless, and fp16, scored like them), from
    the best of them measured; with too little left (under :data:`MIN_SEARCH`), or none
    of them but the lossless ones it has, it ends and keeps that best. Issue 62: ended at
    once, a search at 15 Mbit/s that had tried the default and top-k 0.1 % kept the
    default, fp16 (nearly twice its speed there) never tried."""
    left = s.tuner.remaining if s.tuner is not None else 0
    space = s.trial_phase.space
    untested = space.lossless(SCORED_AS_LOSSLESS)
    if (left < MIN_SEARCH or untested.params == space.params
            or untested["compression"].values == ("none",)):
        return lock(s, tested=True)
    first = s.ledger.best_lossless(space, SCORED_AS_LOSSLESS)
    s.listener.say(f"iteration {s.iteration}: the codec trials end; the search goes on for "
                   f"{left} iterations over the configurations that need no loss test "
                   f"({', '.join(untested['compression'].values)})")
    s.trial_phase.narrow(untested)
    s.trial_phase.set_best((first, 0.0))
    s.trial_phase.tune(left, s.seed + s.iteration, [first], s.warmup_phase.timings())
    return s.next_trial()


def codecs(s: Schedule, config: Config) -> Config:
    """The codecs' wait is over (the sensitive phase, the noise scale): a short search over
    the whole space (codecs in), from the kept configuration."""
    full, budget = s.codecs.let_in()
    s.trial_phase.narrow(full)
    s.listener.say(f"iteration {s.iteration}: the codecs' wait is over, trying codecs for "
                   f"{budget} iterations")
    return retune(s, budget, s.best[0] if s.best else config)


def back_to_default(s: Schedule, why: str) -> None:
    """The kept configuration was not faster than the default once it trained (``why``):
    the default is kept from now on."""
    s.listener.say(why)
    default = s.space.default()
    score = s.tuner.score_of(default) if s.tuner is not None else None
    s.trial_phase.set_best((default, score or 0.0))
    s.kept_phase.restart_watch()


def retune(s: Schedule, budget: int, first: Config, lossless: bool = False) -> Config:
    """A re-tune of ``budget`` iterations whose first trial is ``first``. What was
    measured describes the job before the change: the means start afresh. ``lossless``:
    a re-tune once a kept configuration has settled (:func:`lossless_from`)."""
    if lossless:
        first = lossless_from(s, first)
    s.retunes.append(s.iteration)
    s.kept_phase.end_settling()
    s.ledger.forget()
    s.trial_phase.set_best(None)
    s.trial_phase.tune(budget, s.seed + s.iteration, [first], s.warmup_phase.timings())
    return s.next_trial()


def lossless_from(s: Schedule, first: Config | None) -> Config | None:
    """From now on the trials are lossless, and so is ``first`` (a codec's becomes the
    best lossless configuration measured). Codecs are tried once, in the search after the
    sensitive phase; a later re-tune (drift, a kept codec's efficiency dropping, a lost
    server) tries none (issue 62: a late re-tune's codec trials undid a codec's lead over
    DDP, its loss jumping from 2.46 to 2.73)."""
    space = s.trial_phase.space
    if space.lossy:
        s.trial_phase.narrow(space.lossless())
    if first is not None and first.get("compression", "none") != "none":
        first = s.ledger.best_lossless(space)
    return first


__all__ = ["back_to_default", "codecs", "lock", "locked", "lossless_from", "loss_testing",
           "retune", "without_codecs"]
