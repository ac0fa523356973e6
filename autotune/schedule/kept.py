"""After tuning: the kept configuration's figure, and the watches that re-tune.

Once the budget is spent the trial schedule (:mod:`autotune.schedule.schedule`) keeps the
best configuration. :class:`KeptPhase` then

- scores its first :data:`~autotune.schedule.listener.SETTLED_SAMPLES` settled iterations
  (not the first after a switch) as iterations of it, so the one "best" figure rests on
  training and not only on the trials that picked it, whose highest means were picked
  for being high (the winner's curse); only the first ones, taken soon after the trials,
  while the default's figure was measured (later ones may meet a slower compute step
  that the default never met);
- then checks them: a kept configuration whose settled iterations do not beat the
  default's scored iterations by more than their noise (:data:`Z_KEPT` standard errors
  of the difference of the means) gives way to the default (:meth:`KeptPhase.measure`);
- watches a kept codec's efficiency (:mod:`autotune.tuning.lossy`) and the
  communication time (:mod:`autotune.schedule.drift`), and says when either calls for a
  re-tune, and from which configuration.

:func:`not_the_fastest` says why the kept configuration is not the fastest trial's, when
it is not.

Nothing here imports torch.
"""

from __future__ import annotations

import statistics

from autotune.schedule.drift import Drift, DriftWatch
from autotune.schedule.ledger import Ledger
from autotune.schedule.listener import SETTLED_SAMPLES, Listener
from autotune.speedup import MIN_ITERATIONS, beats, measure
from autotune.tuning.lossy import EFFICIENCY_WINDOW, dropped
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trial import throughput, unit_of
from autotune.tuning.tuner import Tuner

#: Standard errors of the difference of the means by which a kept configuration's
#: settled iterations must beat the default's scored ones.
Z_KEPT = 1.0


class KeptPhase:
    """The kept configuration of one schedule (module docstring). ``budget``: the
    schedule's tuning budget; ``samples_per_step``: what a score counts
    (:func:`~autotune.tuning.trial.throughput`). It owns the settled iterations'
    scores, the drift watch and a kept codec's window of efficiencies."""

    def __init__(self, ledger: Ledger, listener: Listener, drift: Drift | None,
                 budget: int, samples_per_step: int | None) -> None:
        self.ledger = ledger
        self.listener = listener
        self.drift = drift
        self.watch = None if drift is None else DriftWatch(drift)
        self.budget = budget
        self.samples_per_step = samples_per_step
        self.unit = unit_of(samples_per_step)
        self.settled_left = 0  # settled iterations still to score
        self.keeping: Config | None = None  # the configuration they are scored for
        self.scores: list[float] = []  # its settled iterations' scores
        self.measured_efficiency = 1.0  # what the kept codec's trials measured
        self._window: list[float] = []  # the kept codec's efficiencies since the last check

    def keep(self, config: Config) -> None:
        """``config`` is kept from now on: its settled iterations are scored."""
        self.settled_left, self.keeping, self.scores = SETTLED_SAMPLES, dict(config), []

    def restart_watch(self) -> None:
        """The drift watch measures its baseline afresh (another configuration is kept)."""
        if self.watch is not None:
            self.watch.reset()

    def lock(self, config: Config, tuner: Tuner | None, efficiency: float = 1.0) -> None:
        """The budget is spent (or ``tuner`` found the leader separated): ``config``, whose
        trials measured ``efficiency``, is kept from now on; the watches start afresh."""
        self.restart_watch()
        self.measured_efficiency, self._window = efficiency, []
        self.keep(config)
        if tuner is not None and tuner.separated and tuner.remaining > 0:
            self.listener.say(f"tuning: the kept configuration is separated from the runner-up "
                              f"by more than the noise; {tuner.remaining} iterations of "
                              f"the budget are not needed")

    def measure(self, space: SearchSpace, config: Config, seconds: float,
                efficiency: float | None = 1.0) -> str | None:
        """A settled iteration of ``config`` (no switch, no failure) ran in ``seconds``
        with this ``efficiency``: scored while it is one of the kept configuration's
        first :data:`SETTLED_SAMPLES`. After the last of them, why the default is kept
        instead (it is then: the kept one is not proven faster), else None."""
        if (self.keeping is not None and self.settled_left > 0
                and space.key(config) == space.key(self.keeping)):
            if efficiency is None:  # a kept codec's efficiency unknown: not scored
                return None
            self.settled_left -= 1
            score = throughput(self.samples_per_step, seconds) * efficiency
            self.ledger.sample(config, score)
            self.scores.append(score)
            if self.settled_left == 0:
                why = self.not_proven(space)
                if why is not None:
                    self.keeping = space.default()
                self.listener.kept_measured(dict(self.keeping))
                return why
        return None

    def not_proven(self, space: SearchSpace) -> str | None:
        """Why the kept configuration's settled iterations do not show it faster than the
        default's scored iterations (module docstring), or None where they do (or where
        it is the default, or the default has fewer than two scored iterations)."""
        from autotune.units import fmt_config, fmt_score

        default = space.default()
        if self.keeping is None or space.key(self.keeping) == space.key(default):
            return None
        base = self.ledger.samples.get(space.key(default)) or []
        if len(base) < 2 or len(self.scores) < 2:
            return None
        kept, default_side = measure(self.scores), measure(base)
        if beats(kept, default_side, Z_KEPT):
            return None
        (k, k_sd, k_n), (d, d_sd, d_n) = kept, default_side
        return (f"kept {fmt_config(self.keeping)} ran {fmt_score(k, self.unit, k_sd)} over its "
                f"first {k_n} iterations, not faster than the default's "
                f"{fmt_score(d, self.unit, d_sd)} ({d_n} iterations) by more than the noise: "
                "back to the default")

    def done(self, lossy: bool) -> bool:
        """Whether the kept configuration's figure is final and nothing watches it (no
        drift watch; ``lossy``: it is a codec whose efficiency is watched)."""
        return self.settled_left <= 0 and self.watch is None and not lossy

    def end_settling(self) -> None:
        """A re-tune starts while the settled iterations are still being scored: the
        kept configuration's figure is final as it is."""
        if self.settled_left > 0 and self.keeping is not None:
            self.settled_left = 0
            self.listener.kept_measured(dict(self.keeping))

    def retune(self, space: SearchSpace, config: Config, seconds: float,
               comm_s: float | None, efficiency: float | None,
               best: Config | None) -> tuple[int, Config] | None:
        """One iteration of ``config`` ran under the kept ``best`` (``efficiency``: a kept
        codec's, judged by goodput; else None): ``(budget, first configuration)`` of the
        re-tune it calls for (a kept codec's efficiency dropped, or the communication time
        drifted), else None."""
        if best is None:
            return None
        drop = self._dropped(efficiency)
        if drop is not None:
            measured, now = drop
            lossless = self.ledger.best_lossless(space)
            self.listener.say(f"[yellow]statistical efficiency of the kept codec dropped[/] "
                              f"from {measured:.2f} to {now:.2f}: back to lossless "
                              f"({lossless.get('compression', 'none')}) and re-tuning")
            budget = self.drift.budget if self.drift is not None else max(10, self.budget // 5)
            return budget, lossless
        if self.watch is None or seconds == float("inf"):
            return None
        moved = self.watch.moved(seconds, comm_s)
        if moved is None:
            return None
        from autotune.units import fmt_score, fmt_seconds

        (base_s, base_comm), (now_s, now_comm) = moved
        what = "iteration" if comm_s is None else "communication"
        self.listener.say(f"[yellow]{what} time drifted[/] from {fmt_seconds(base_comm)} to "
                          f"{fmt_seconds(now_comm)} ("
                          f"{fmt_score(throughput(self.samples_per_step, base_s), self.unit)} to "
                          f"{fmt_score(throughput(self.samples_per_step, now_s), self.unit)}): "
                          f"re-tuning for {self.watch.drift.budget} iterations")
        # The old best is stale: measure it again first, alongside its neighbours.
        return self.watch.drift.budget, best

    def _dropped(self, efficiency: float | None) -> tuple[float, float] | None:
        """A kept codec's iteration of ``efficiency``: ``(what its trials measured, the
        window's mean)`` once a full window shows it dropped, else None."""
        if efficiency is None:
            return None
        self._window.append(efficiency)
        window = self.drift.window if self.drift is not None else EFFICIENCY_WINDOW
        if len(self._window) < window:
            return None
        now, self._window = statistics.fmean(self._window), []
        return (self.measured_efficiency, now) if dropped(self.measured_efficiency, now) else None


def not_the_fastest(ledger: Ledger, tuner: Tuner | None, kept: Config,
                samples_per_step: int | None) -> str | None:
    """Why ``kept`` (what ``tuner`` keeps of the trials in ``ledger``) is not the
    configuration of the fastest single trial, when it is not (issue 65: a report showed
    a trial faster than what was kept, and not why): a clause the done line ends with,
    "not the fastest trial's ...: the rule".
    The Tuner keeps the highest lower bound of a trials' mean (``Tuner.best``): in
    the confirm phase among those measured :data:`MIN_ITERATIONS` times or more, and
    only where that bound clears the default's upper one."""
    if tuner is None:
        return None
    scored = [r for r in ledger.history if r.score is not None
              and r.technique != "fault"
              and tuner.space.contains(r.config)]  # a re-tune's space may be narrower
    if not scored:
        return None
    key = ledger.space.key
    top = max(scored, key=lambda r: r.score)
    top_b, kept_b = tuner.bounds(top.config), tuner.bounds(kept)
    if key(top.config) == key(kept) or top_b is None or kept_b is None:
        return None
    from autotune.units import fmt_config, fmt_score

    unit = unit_of(samples_per_step)
    n = tuner.measurements(top.config)
    if tuner.reference is not None and key(kept) == key(tuner.reference):
        why = (f"its mean's lower bound, {fmt_score(top_b[0], unit)}, does not clear "
               f"the default's upper bound, {fmt_score(kept_b[2], unit)}: it is not "
               "proven faster than the default")
    elif n < MIN_ITERATIONS:
        why = (f"it was measured {n} time{'s' if n != 1 else ''}, fewer than the "
               f"{MIN_ITERATIONS} a kept configuration needs")
    else:
        why = (f"its mean's lower bound, {fmt_score(top_b[0], unit)}, is under the kept "
               f"one's, {fmt_score(kept_b[0], unit)}")
    return (f"not the fastest trial's {fmt_config(top.config)} "
            f"({fmt_score(top.score, unit)} once, {fmt_score(top_b[1], unit)} on average "
            f"over {n} measurements): {why}")
