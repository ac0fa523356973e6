"""What the leader of a session shows: its tuning as it goes, and the kept configuration.

:class:`SessionDisplay` is the trial schedule's listener (:class:`autotune.schedule.schedule.
Listener`): rank 0's progress (:mod:`autotune.progress`: a bar in its own terminal, events
for a launcher that draws the bar, or a plain line per trial) and its messages; at the end
:func:`report` prints one table of what was kept and what it measured.
"""

from __future__ import annotations

from typing import Any, Callable

from autotune.schedule.schedule import Listener
from autotune.speedup import Side
from autotune.tuning.space import Config
from autotune.tuning.trial import Trial


class SessionDisplay(Listener):
    """``best_score()`` gives the kept configuration's measured mean; ``unit`` what it
    counts. Silent unless ``verbose``.

    While trials run, the display shows the best trial's score so far (``best trial``:
    it never goes down). Once the budget is spent (:meth:`locked`) it says what is kept
    and stays open while the kept configuration's first training iterations are scored;
    it closes with the kept configuration's figure when that is final
    (:meth:`kept_measured`) or when the session ends first (:meth:`settled`): the same
    mean, spread and count as the session's table, the store and the report."""

    def __init__(self, verbose: bool, unit: str, best_score: Callable[[], float | None],
                 cost: Callable[[], dict | None] = lambda: None):
        self.verbose = verbose
        self.unit = unit
        self._best_score = best_score
        self._progress: Any = None
        self._top: float | None = None  # the best trial's score of this tuning
        self._measured: Callable[[Config | None], Side | None] | None = None
        self._kept: Config | None = None  # kept, its figure still growing
        self._passed_over: str | None = None  # why the fastest trial is not the kept one
        self.cost = cost  # what tuning cost (the session's tuning_cost)
        self._said: set[str] = set()  # each message once a session

    def measured_by(self, measured: Callable[[Config | None], Side | None]) -> None:
        self._measured = measured

    def tuning(self, budget: int) -> None:
        if self._progress is not None and self._kept is not None:
            self._close_kept(self._kept)  # a re-tune: the last tuning's figure as it is
        if not self.verbose or self._progress is not None:
            return
        from autotune.progress import tuning_display

        self._top = None
        self._progress = tuning_display(budget)

    def trial_started(self, index: int, trial: Trial) -> None:
        if self._progress is not None:
            from autotune.progress import describe_trial

            self._progress.describe(describe_trial(index, trial.technique, self._top,
                                                   self.unit))

    def overtime(self, contenders: int, iterations: int) -> None:
        if self._progress is not None:
            self._progress.update(total=self._progress.total + iterations)
        if contenders == 1:
            self.say("tuning: the budget is spent and the one candidate faster than the default "
                     "by more than the noise is measured too few times to be kept: measuring it "
                     f"for at most {iterations} more iterations")
            return
        self.say(f"tuning: the budget is spent and {contenders} candidates, each faster than "
                 "the default by more than the noise, are not told apart yet: racing them "
                 f"for at most {iterations} more iterations")

    def advanced(self, iterations: int) -> None:
        if self._progress is not None:
            self._progress.advance(iterations)

    def trial_finished(self, record: Trial) -> None:
        if record.score is not None and (self._top is None or record.score > self._top):
            self._top = record.score
        if self._progress is None:
            return
        self._progress.trial(record.index, record.technique, record.config, record.score,
                             self._top, self.unit, record.error, record.efficiency)

    def locked(self, kept: Config | None, passed_over: str | None = None) -> None:
        """The budget is spent: the display says what is kept and waits for its figure;
        the done line ends with ``passed_over`` (why the fastest trial is not kept)."""
        if self._progress is None:
            return
        self._passed_over = passed_over
        if kept is None:
            self._close_kept(None)
            return
        from autotune.schedule.schedule import SETTLED_SAMPLES
        from autotune.units import fmt_config

        self._kept = dict(kept)
        self._progress.iterations_over()
        self._progress.describe(f"kept {fmt_config(kept)}: measuring it over its first "
                                f"{SETTLED_SAMPLES} training iterations")

    def kept_measured(self, kept: Config | None) -> None:
        if self._progress is not None:
            self._close_kept(kept)

    def ended(self, kept: Config | None, status: str = "finished") -> None:
        """The session ends: the tuning display (if still open) ends ``done`` with what
        was ``kept`` and its figure when ``status`` is ``finished``, else it says
        ``failed`` or ``aborted``."""
        if self._progress is None:
            return
        if status == "finished":
            self._close_kept(kept)
        else:
            self._progress.stop(ended=status)
            self._progress, self._kept = None, None

    def kept_figure(self, kept: Config | None) -> tuple[float | None, float | None,
                                                        int | None]:
        """``kept``'s figure as the session's table shows it: the mean
        (``best_score()``), and the spread and scored iterations it rests on."""
        mean = self._best_score()
        m = self._measured(kept) if self._measured is not None and kept else None
        if m is None or mean is None or m[0] != mean:
            return mean, None, None
        return mean, m[1], m[2]

    def _close_kept(self, kept: Config | None) -> None:
        """Stop the display with what was kept and its figure."""
        from autotune.progress import kept_summary

        from autotune.schedule.stakes import fmt_cost

        mean, spread, n = self.kept_figure(kept)
        summary = kept_summary(kept, mean, self.unit, spread, n)
        cost = fmt_cost(self.cost()) if summary else ""
        passed_over = self._passed_over if summary else None
        self._progress.stop(summary + (f"; {cost}" if cost else "")
                            + (f"; {passed_over}" if passed_over else ""))
        self._progress, self._kept, self._passed_over = None, None, None

    def say(self, text: str) -> None:
        """A line, once a session: a message that a state was reached (the prior's
        weight, a wait, a pause) is not said again when it is reached again."""
        if not self.verbose or text in self._said:
            return
        self._said.add(text)
        if self._progress is not None:
            self._progress.say(text)
        else:
            from autotune.progress import message

            message(text)  # one line on stderr, unwrapped


def report(session: Any) -> None:
    """The kept configuration's table: its parameters, its throughput and the default's
    (each with its spread and iterations; a codec scored by goodput: its goodput, with its
    throughput and statistical efficiency beside it), the speed-up, the stored run it came
    from (if it did), the trials, idle servers."""
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
    measured = s.ledger.measured
    n_best = (measured(s.best) or (0, 0, 0))[2]
    n_default = (measured(s.space.default()) or (0, 0, 0))[2]
    efficiency = s.best_efficiency
    if s.best_score is not None and efficiency is not None:  # a codec, scored by goodput
        t.add_row("goodput", f"{fmt_score(s.best_score, s.unit, s.best_spread)}"
                  f" ({n_best} iterations)")
        t.add_row("throughput", fmt_score(s.best_score / efficiency, s.unit))
        t.add_row("statistical efficiency", f"{efficiency:.2f} (docs/compression.md)")
    elif s.best_score is not None:
        t.add_row("throughput", f"{fmt_score(s.best_score, s.unit, s.best_spread)}"
                  f" ({n_best} iterations)")
    if s.default_score is not None:
        t.add_row("default's throughput",
                  f"{fmt_score(s.default_score, s.unit, s.default_spread)} ({n_default} iterations)")
        if s.best_score:  # refused ("– (n<4: ...)") under 4 scored iterations a side
            t.add_row("speed-up", Speedup.of((s.best_score, s.best_spread, n_best),
                                             (s.default_score, s.default_spread, n_default)).shown())
    came = s.ledger.origin(s.best)
    if came:
        from autotune.store.origin import fmt_origin

        t.add_row("from the store", fmt_origin(came))
    tuner = s.tuner
    from autotune.schedule.stakes import fmt_cost

    cost = fmt_cost(s.tuning_cost)
    if cost:
        t.add_row("tuning cost", cost)
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
