"""What the leader of a session shows: its tuning as it goes, and the kept configuration.

:class:`SessionDisplay` is the trial schedule's listener (:class:`autotune.tuning.schedule.
Listener`): rank 0's progress (:mod:`autotune.progress`: a bar in its own terminal, events
for a launcher that draws the bar, or a plain line per trial) and its messages; at the end
:func:`report` prints one table of what was kept and what it measured.
"""

from __future__ import annotations

from typing import Any, Callable

from autotune.tuning.schedule import Listener
from autotune.tuning.space import Config
from autotune.tuning.tuner import Trial, TrialRecord


class SessionDisplay(Listener):
    """``best_score()`` gives the kept configuration's measured mean; ``unit`` what it
    counts. Silent unless ``verbose``."""

    def __init__(self, verbose: bool, unit: str, best_score: Callable[[], float | None]):
        self.verbose = verbose
        self.unit = unit
        self._best_score = best_score
        self._progress: Any = None

    def tuning(self, budget: int) -> None:
        if not self.verbose or self._progress is not None:
            return
        from autotune.progress import tuning_display

        self._progress = tuning_display(budget)

    def trial_started(self, index: int, trial: Trial) -> None:
        if self._progress is not None:
            from autotune.progress import describe_trial

            self._progress.describe(describe_trial(index, trial.technique, self._best_score(),
                                                   self.unit))

    def advanced(self, iterations: int) -> None:
        if self._progress is not None:
            self._progress.advance(iterations)

    def trial_finished(self, record: TrialRecord) -> None:
        if self._progress is None:
            return
        self._progress.trial(record.index, record.technique, record.config, record.score,
                             self._best_score(), self.unit, record.error)

    def settled(self, kept: Config | None, status: str = "finished") -> None:
        """The tuning display ends: ``done`` (with what was ``kept``) when the session goes
        on or ``status`` is ``finished``; else it says ``failed`` or ``aborted``."""
        if self._progress is None:
            return
        from autotune.progress import kept_summary

        if status == "finished":
            self._progress.stop(kept_summary(kept, self._best_score(), self.unit))
        else:
            self._progress.stop(ended=status)
        self._progress = None

    def say(self, text: str) -> None:
        if not self.verbose:
            return
        if self._progress is not None:
            self._progress.say(text)
        else:
            from rich.console import Console

            Console(stderr=True).print(text)


def report(session: Any) -> None:
    """The kept configuration's table: its parameters, its throughput and the default's
    (each with its spread and iterations), the speed-up, the trials, idle servers."""
    from rich.console import Console
    from rich.table import Table

    from autotune.speedup import Speedup
    from autotune.units import fmt_score, fmt_value, shown_params

    s = session
    t = Table(title="autotune: configuration kept")
    t.add_column("parameter")
    t.add_column("value")
    for k, v in shown_params(s.best).items():
        t.add_row(k, fmt_value(k, v))
    measured = s.trials.measured
    n_best = (measured(s.best) or (0, 0, 0))[2]
    n_default = (measured(s.space.default()) or (0, 0, 0))[2]
    if s.best_score is not None:
        t.add_row("throughput", f"{fmt_score(s.best_score, s.unit, s.best_spread)}"
                  f" ({n_best} iterations)")
    if s.default_score is not None:
        t.add_row("default's throughput",
                  f"{fmt_score(s.default_score, s.unit, s.default_spread)} ({n_default} iterations)")
        if s.best_score:  # refused ("– (n<4: ...)") under 4 scored iterations a side
            t.add_row("speed-up", Speedup.of((s.best_score, s.best_spread, n_best),
                                             (s.default_score, s.default_spread, n_default)).shown())
    tuner = s.tuner
    t.add_row("trials", f"{len(s.history)} ({len(s.failures)} failed"
              + (f", {tuner.screened} screened out by the prior" if tuner and tuner.screened
                 else "") + ")")
    best = s.best or {}
    uses_servers = best.get("transport") == "pushpull" and best.get("servers", 0) > 0
    if s.info.servers and not uses_servers:
        t.add_row("idle servers", f"{len(s.info.servers)} launched server rank(s) sum "
                  "nothing under this configuration: launch without them next time "
                  "(autotune launch -k 0)")
    Console(stderr=True).print(t)
