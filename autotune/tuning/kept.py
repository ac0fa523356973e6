"""After tuning: the kept configuration's figure, and the watches that re-tune.

Once the budget is spent the trial schedule (:mod:`autotune.tuning.schedule`) keeps the
best configuration. :class:`KeptPhase` then

- scores its first :data:`~autotune.tuning.listener.SETTLED_SAMPLES` settled iterations
  (not the first after a switch) as iterations of it, so the one "best" figure rests on
  training and not only on the trials that picked it, whose highest means were picked
  for being high (the winner's curse); only the first ones, taken soon after the trials,
  while the default's figure was measured (later ones may meet a slower compute step
  that the default never met);
- watches a kept codec's efficiency (:mod:`autotune.tuning.lossy`) and the
  communication time (:mod:`autotune.tuning.drift`), and says when either calls for a
  re-tune, and from which configuration.

Nothing here imports torch.
"""

from __future__ import annotations

from typing import Callable

from autotune.tuning.drift import Drift, DriftWatch
from autotune.tuning.listener import SETTLED_SAMPLES, Listener
from autotune.tuning.lossy import EFFICIENCY_WINDOW, Goodput, best_lossless
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trials import TrialDriver
from autotune.tuning.tuner import Tuner


class KeptPhase:
    """The kept configuration of one schedule (module docstring). ``throughput(seconds)``
    and ``unit`` are the schedule's; ``budget`` its tuning budget."""

    def __init__(self, driver: TrialDriver, listener: Listener, drift: Drift | None,
                 guards: Goodput, budget: int, throughput: Callable[[float], float],
                 unit: str) -> None:
        self.driver = driver
        self.listener = listener
        self.drift = drift
        self.watch = None if drift is None else DriftWatch(drift)
        self.guards = guards
        self.budget = budget
        self.throughput = throughput
        self.unit = unit
        self.settled_left = 0  # settled iterations still to score
        self.keeping: Config | None = None  # the configuration they are scored for

    def keep(self, config: Config) -> None:
        """``config`` is kept from now on: its settled iterations are scored."""
        self.settled_left, self.keeping = SETTLED_SAMPLES, dict(config)

    def lock(self, config: Config, tuner: Tuner | None) -> None:
        """The budget is spent (or ``tuner`` found the leader separated): ``config`` is
        kept from now on; the watches start afresh."""
        if self.watch is not None:
            self.watch.reset()
        self.guards.reset_kept()
        self.keep(config)
        if tuner is not None and tuner.separated and tuner.remaining > 0:
            self.listener.say(f"tuning: the kept configuration is separated from the runner-up "
                              f"by more than the noise; {tuner.remaining} iterations of "
                              f"the budget are not needed")

    def settled(self, space: SearchSpace, config: Config, seconds: float,
                gain: float | None = 1.0) -> None:
        """A settled iteration of ``config`` (no switch, no failure) ran in ``seconds``
        with efficiency ``gain``: scored while it is one of the kept configuration's
        first :data:`SETTLED_SAMPLES`."""
        if (self.keeping is not None and self.settled_left > 0
                and space.key(config) == space.key(self.keeping)):
            if gain is None:  # a kept codec's efficiency unknown: not scored
                return
            self.settled_left -= 1
            self.driver.sample(config, self.throughput(seconds) * gain)
            if self.settled_left == 0:
                self.listener.kept_measured(dict(self.keeping))

    def end_settling(self) -> None:
        """A re-tune starts while the settled iterations are still being scored: the
        kept configuration's figure is final as it is."""
        if self.settled_left > 0 and self.keeping is not None:
            self.settled_left = 0
            self.listener.kept_measured(dict(self.keeping))

    def retune(self, space: SearchSpace, config: Config, seconds: float,
               comm_s: float | None, efficiency: float | None,
               best: Config | None) -> tuple[int, Config] | None:
        """One iteration of ``config`` ran under the kept ``best``: ``(budget, first
        configuration)`` of the re-tune it calls for (a kept codec's efficiency dropped,
        or the communication time drifted), else None."""
        if best is None:
            return None
        window = self.drift.window if self.drift is not None else EFFICIENCY_WINDOW
        dropped = self.guards.kept_dropped(space, config, efficiency, window)
        if dropped is not None:
            measured, now = dropped
            lossless = best_lossless(self.driver.history, space)
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
                          f"{fmt_seconds(now_comm)} ({fmt_score(self.throughput(base_s), self.unit)}"
                          f" to {fmt_score(self.throughput(now_s), self.unit)}): "
                          f"re-tuning for {self.watch.drift.budget} iterations")
        # The old best is stale: measure it again first, alongside its neighbours.
        return self.watch.drift.budget, best
