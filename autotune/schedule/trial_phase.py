"""The trial phase of the trial schedule: one (re-)tune's Tuner and the trials it asks for.

:class:`TrialPhase` owns what lasts from one ``Tuner`` to the next: the Tuner itself, the
trial under way (a running :class:`~autotune.tuning.trial.Trial`), the trials' running index,
the best configuration so far and the iterations spent in trials. The
:class:`~autotune.schedule.schedule.TrialSchedule` decides *when* trials run (after the
warm-up, until the budget is spent, again after drift or a server loss); this class says,
for one iteration of the trial under way, whether the trial goes on, and how it ends:
scored (the median of its scored iterations as throughput, times its efficiency when it is
a lossy trial scored by goodput), cut short, or failed. Torch-free.
"""

from __future__ import annotations

import time
from typing import Callable

from autotune.schedule.ledger import Ledger
from autotune.schedule.listener import Listener
from autotune.schedule.loss_test import CodecWatch
from autotune.tuning.lossy import (SCORED_AS_LOSSLESS, UNKNOWN_EFFICIENCY, codec_of,
                                   judged_by_goodput)
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trial import Trial, throughput, trial_seconds
from autotune.tuning.trust import PROPOSE
from autotune.tuning.tuner import Tuner

#: ``new_tuner(budget, seed, warm, space, warmup)``: the Tuner of a (re-)tune of
#: ``budget`` iterations over ``space``, warm-started from ``warm``; ``warmup``: the
#: warm-up's times, ``(the default's, the several-stream probe's)``
NewTuner = Callable[[int, int, list[Config], SearchSpace, tuple[list, list]], Tuner]


class TrialPhase:
    """The trials of the schedule's current Tuner (module docstring).

    ``new_tuner`` makes a Tuner (:data:`NewTuner`); ``samples_per_step``: what an
    iteration's score counts (:func:`~autotune.tuning.trial.throughput`);
    ``cut_short``: the fraction of the best score under which a trial ends early (None:
    never); ``goodput``: lossy trials are scored by goodput. It owns the Tuner, the trial
    under way, the best so far and each lossy trial's efficiency (:attr:`efficiency`)."""

    def __init__(self, ledger: Ledger, listener: Listener, new_tuner: NewTuner,
                 samples_per_step: int | None, cut_short: float | None, space: SearchSpace,
                 goodput: bool = False) -> None:
        self.ledger = ledger
        self.listener = listener
        self._new_tuner = new_tuner
        self.samples_per_step = samples_per_step
        self.cut_short = cut_short
        self.space = space
        self.goodput = goodput
        self.tuner: Tuner | None = None
        self.trial: Trial | None = None   # the trial under way (or the last one)
        self.index = -1                   # the last trial's index
        self.best: tuple[Config, float] | None = None  # (config, the Tuner's mean score)
        self.iterations = 0               # iterations spent inside trials
        self.efficiency: dict[tuple, float] = {}  # each scored lossy trial's mean, by key
        self._prior_dropped = False       # the prior's drop below PROPOSE was said
        self.watch = CodecWatch() if goodput else None  # the codec trials' loss
        self.stopped: str | None = None   # why the codec trials ended (the watch, a test)
        self.admitted: set[tuple] = set()  # codecs the loss test kept during the search

    @property
    def under_way(self) -> bool:
        """Whether a trial has iterations left."""
        return self.trial is not None and self.trial.left > 0

    def narrow(self, space: SearchSpace) -> None:
        """The trials run over ``space`` from now on (servers lost; codecs waiting or
        let in): the ledger records against it too."""
        self.space = self.ledger.space = space

    def set_best(self, best: tuple[Config, float] | None) -> None:
        """The best so far is ``best`` (``None``: none yet, a re-tune starting afresh)."""
        self.best = best

    def tune(self, budget: int, seed: int, warm: list[Config],
             warmup: tuple[list, list] = ([], [])) -> None:
        """A new Tuner over :attr:`space` with ``budget`` iterations, warm-started;
        ``warmup``: the warm-up's times (:data:`NewTuner`)."""
        self.tuner = self._new_tuner(budget, seed, warm, self.space, warmup)
        self.ledger.space, self.ledger.tuner = self.space, self.tuner
        self.stopped = None  # (a re-tune after the watch ended the codec trials is lossless)
        if budget > 0:
            self.listener.tuning(budget)

    def next_trial(self, stop: bool = False) -> Config | None:
        """The next trial's configuration; None when the Tuner has none left, ``stop``
        (the trials have cost the job all they may), or the best so far waits for its loss
        test (:meth:`untested`)."""
        if stop or self.stopped or self.untested():
            return None
        trial = self.tuner.ask() if self.tuner is not None and not self.tuner.done else None
        if trial is None:
            return None
        if self.tuner.overtime == trial.iterations:  # the first trial past the budget
            self.listener.overtime(len(self.tuner.confirming.contenders()),
                                   self.tuner.confirming.overtime)
        trial.start(judged_by_goodput(self.goodput, trial.config))
        self.trial = trial
        self.index += 1
        self.listener.trial_started(self.index, trial)
        return trial.config

    def untested(self) -> bool:
        """Whether the best so far is a codec judged by goodput that the loss test has
        not kept (:func:`~autotune.tuning.lossy.codec_of`: the codec and its own knobs):
        no trial runs before it is tested (the gate, issue 62: left to the search, the
        goodput score kept proposing the codec that was hurting the loss; 10 of a held-out
        search's 15 trials were top-k 0.1 %, and the loss rose from 2.75 to 3.02 before
        the test at the end rejected it)."""
        best = None if self.best is None else self.best[0]
        return (best is not None and judged_by_goodput(self.goodput, best)
                and codec_of(best) not in self.admitted)

    def provisional(self) -> Config | None:
        """What the job would keep if it ended now: the best so far, or, where that is a
        codec the loss test has not kept (:meth:`untested`), the best configuration that
        needs no test (a job that ended during the test said it kept top-k 0.1 %, and
        stored it as its best)."""
        if self.best is None:
            return None
        if self.untested():
            lossless = self.ledger.best_lossless(self.space, SCORED_AS_LOSSLESS)
            if not judged_by_goodput(True, lossless):  # (else a pinned codec)
                return lossless
        return dict(self.best[0])

    def measured(self, seconds: float, failed: str | None, switched: bool = True,
                 efficiency: float | None = 1.0, stop: bool = False,
                 loss: float | None = None) -> Config | None:
        """An iteration of the trial under way ran (``switched``: under another
        configuration than the iteration before; ``efficiency``: what its score is
        multiplied by, :func:`~autotune.tuning.lossy.scored_efficiency`; ``loss``: the
        job's, for the codec watch): the configuration to run next, None when the Tuner
        has no trial left (or ``stop``, :meth:`next_trial`), or when the watch ended the
        codec trials (:attr:`stopped`; the best becomes the best configuration that needs
        no loss test)."""
        trial = self.trial
        assert trial is not None and self.tuner is not None
        self.iterations += 1
        first = trial.step(switched)
        hurt = self.watch.ran(trial.lossy, seconds, loss) if self.watch and not failed else None
        if hurt is not None:
            self.stopped = hurt
            self.finish(None, hurt)
            best = self.ledger.best_lossless(self.space, SCORED_AS_LOSSLESS)
            self.best = (best, self.tuner.score_of(best) or 0.0)
            return None
        if failed is None and seconds != float("inf") and trial.lossy:
            failed = trial.judged(efficiency, first)
        if failed is not None or seconds == float("inf"):
            self.finish(None, failed or "a worker failed under this configuration")
            return self.next_trial(stop)
        mean = trial.mean_efficiency()  # so far (this iteration's judged above)
        trial.record(seconds, first)
        score = throughput(self.samples_per_step, seconds) * (mean or 1.0)
        if not first:
            self.ledger.sample(trial.config, score)
        self.listener.advanced(1)
        best = self.tuner.best
        if (trial.left > 0 and not trial.clearly_slow(score, first, best and best[1],
                                                      self.cut_short)
                and not self.tuner.enough(trial, len(trial.times))):
            return trial.config
        if mean is None:  # only its switch iteration was seen, with no efficiency
            self.finish(None, UNKNOWN_EFFICIENCY)
            return self.next_trial(stop)
        speed = throughput(self.samples_per_step,
                           trial_seconds(trial.times, seconds, cut=trial.left > 0))
        self.finish(speed * mean, None, speed if trial.lossy else None)
        return self.next_trial(stop)

    def finish(self, score: float | None, error: str | None,
               throughput: float | None = None) -> None:
        """The trial under way ends: ``score`` (None: failed, ``error`` says why); a lossy
        trial scored by goodput also has its ``throughput`` and efficiency recorded."""
        trial = self.trial
        assert trial is not None and self.tuner is not None
        # A failed trial still used its iterations so far (the Tuner counts them all);
        # one cut short gives the rest back to the budget.
        if score is None:
            self.listener.advanced(trial.left)
        efficiency = trial.mean_efficiency() if trial.lossy else None
        if efficiency is not None and score is not None:
            self.efficiency[self.space.key(trial.config)] = efficiency
        rec = self.ledger.finish(trial, score, iterations=trial.used,
                                 measured=len(trial.times), error=error,
                                 wall_time=time.perf_counter() - trial.started,
                                 index=self.index, throughput=throughput,
                                 efficiency=efficiency)
        if error is not None:
            self.listener.say(f"[yellow]trial {rec.index} failed[/] ({trial.technique}, "
                              f"{rec.config}): {error}")
        surrogate = self.tuner.surrogate
        if (surrogate is not None and rec.trust is not None and not self._prior_dropped
                and rec.trust >= PROPOSE > surrogate.weight):
            self._prior_dropped = True  # a state reached: said once a session
            self.listener.say(f"the physics prior ranks the trials wrongly ("
                              f"{surrogate.trust.describe()}): it proposes and screens "
                              "nothing more")
        best = self.tuner.best
        self.best = (dict(best[0]), best[1]) if best else self.best
        self.listener.trial_finished(rec)
