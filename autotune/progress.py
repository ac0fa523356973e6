"""Tuning progress as the person watching sees it, wherever rank 0's output goes.

Rank 0 of a session (the leader) shows its tuning in one of three ways
(:func:`tuning_display`):

* ``bar``: its own output is a terminal: a rich progress bar, redrawn as trials run;
* ``events``: a launcher renders it (``autotune launch`` in a terminal, the demo): rank 0
  prints one :data:`MARK` line of JSON per change, the launcher reads them from the
  rank's pipe (:func:`parse`) and draws the bar in its own terminal, with every rank's
  other lines printed above it (:class:`Terminal`);
* ``lines``: no terminal anywhere (a pipe, a file, CI): one plain line per finished
  trial (number, technique, configuration, score, best so far), flushed at once.

``AUTOTUNE_PROGRESS`` (:data:`ENV`) chooses one; unset, it is ``bar`` where rank 0's
stdout is a terminal and ``lines`` elsewhere. ``autotune launch`` sets ``events`` when its
own output is a terminal (a child's output is a pipe, so the child cannot tell).

Nothing here imports rich or torch until a display is built.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable, Mapping, TextIO

#: chooses the display: ``bar``, ``events`` or ``lines`` (unset: see the module docstring)
ENV = "AUTOTUNE_PROGRESS"
MODES = ("bar", "events", "lines")
#: the start of a progress event line: ``MARK`` + JSON (``total``, ``completed``,
#: ``description``; or ``done``)
MARK = "@autotune-progress "


def mode(stream: TextIO | None = None) -> str:
    """The display to use: :data:`ENV` if set to one of :data:`MODES`, else ``bar`` where
    ``stream`` (default stdout) is a terminal and ``lines`` elsewhere."""
    chosen = os.environ.get(ENV, "").strip().lower()
    if chosen in MODES:
        return chosen
    stream = sys.stdout if stream is None else stream
    try:
        return "bar" if stream.isatty() else "lines"
    except (AttributeError, ValueError):
        return "lines"


def parse(line: str) -> tuple[str, dict] | None:
    """``(tag, event)`` for an event line as a launcher shows it (``[w0] @autotune-progress
    {...}``, or without the tag: ``""``); ``None`` for any other line."""
    text = line.rstrip("\n")
    tag = ""
    if text.startswith("[") and "] " in text:
        tag, rest = text[1:].split("] ", 1)
        text = rest
    if not text.startswith(MARK):
        return None
    try:
        event = json.loads(text[len(MARK):])
    except ValueError:
        return None
    return (tag, event) if isinstance(event, dict) else None


def is_event(line: str) -> bool:
    """Whether a rank's raw output line is a progress event (not kept for error tails)."""
    return line.startswith(MARK)


# ---- rank 0's side ----------------------------------------------------------------------

class TuningDisplay:
    """What the session calls: ``advance(n)`` as tuning iterations pass, ``describe(text)``
    when a trial starts, ``trial(...)`` when one ends, ``say(text)`` for a message,
    ``stop(summary)`` at the end. The base class shows nothing."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.completed = 0
        self.t0 = time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.completed += n

    def describe(self, text: str) -> None:
        pass

    def trial(self, index: int, technique: str, config: Mapping[str, Any] | None,
              score: float | None, best: float | None, unit: str,
              error: str | None = None) -> None:
        pass

    def say(self, text: str) -> None:
        _console().print(text)

    def stop(self, summary: str = "") -> None:
        pass


class Bar(TuningDisplay):
    """A rich progress bar on this process's terminal (as before: description = the trial
    under way and the best score so far)."""

    def __init__(self, total: int) -> None:
        super().__init__(total)
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)

        self._progress = Progress(*columns(BarColumn, MofNCompleteColumn, TextColumn,
                                           TimeElapsedColumn), transient=False)
        self._task = self._progress.add_task("", total=total)
        self._progress.start()

    def advance(self, n: int = 1) -> None:
        super().advance(n)
        self._progress.advance(self._task, n)

    def describe(self, text: str) -> None:
        self._progress.update(self._task, description=text)

    def say(self, text: str) -> None:
        self._progress.console.print(text)

    def stop(self, summary: str = "") -> None:
        self._progress.stop()


class Events(TuningDisplay):
    """:data:`MARK` lines for a launcher to draw (:class:`Terminal`): the whole state in
    each, so a lost or late line does no harm."""

    def __init__(self, total: int, out: TextIO | None = None) -> None:
        super().__init__(total)
        self._out = out
        self._description = ""
        self._send()

    def _send(self, **extra: Any) -> None:
        out = self._out or sys.stdout
        state = {"total": self.total, "completed": self.completed,
                 "description": self._description, **extra}
        out.write(MARK + json.dumps(state) + "\n")
        out.flush()

    def advance(self, n: int = 1) -> None:
        super().advance(n)
        self._send()

    def describe(self, text: str) -> None:
        self._description = text
        self._send()

    def say(self, text: str) -> None:
        _console(self._out).print(text)

    def stop(self, summary: str = "") -> None:
        self._send(done=True, summary=summary)


class Lines(TuningDisplay):
    """One plain line per finished trial, and one at the start and the end."""

    def __init__(self, total: int, out: TextIO | None = None) -> None:
        super().__init__(total)
        self._out = out
        self._write(f"tuning: {total} iterations of trials")

    def _write(self, text: str) -> None:
        out = self._out or sys.stderr
        out.write(text + "\n")
        out.flush()

    def trial(self, index: int, technique: str, config: Mapping[str, Any] | None,
              score: float | None, best: float | None, unit: str,
              error: str | None = None) -> None:
        from autotune.units import fmt_config, fmt_score

        result = "failed" if error is not None else fmt_score(score, unit)
        self._write(f"tuning: trial {index} {technique}: {fmt_config(config)}: {result}; "
                    f"best {fmt_score(best, unit) or '-'} "
                    f"[{self.completed}/{self.total} iterations, {self._elapsed()}]")

    def say(self, text: str) -> None:
        _console(self._out or sys.stderr).print(text)

    def stop(self, summary: str = "") -> None:
        self._write(f"tuning: done, {self.completed}/{self.total} iterations in "
                    f"{self._elapsed()}" + (f"; {summary}" if summary else ""))

    def _elapsed(self) -> str:
        from autotune.units import fmt_seconds

        return fmt_seconds(time.monotonic() - self.t0)


def tuning_display(total: int, which: str | None = None) -> TuningDisplay:
    """The display for ``total`` tuning iterations: ``which`` or :func:`mode`."""
    which = which or mode()
    if which == "events":
        return Events(total)
    if which == "lines":
        return Lines(total)
    return Bar(total)


def columns(BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn) -> tuple:
    """The bar's columns, one look for the session's own bar and a launcher's."""
    return (TextColumn("[bold]tuning[/]"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.description}"), TimeElapsedColumn())


def _console(out: TextIO | None = None):
    from rich.console import Console

    return Console(file=out, stderr=out is None, highlight=False)


# ---- the launcher's side ----------------------------------------------------------------

class Terminal:
    """A launcher's output on a terminal: every rank's lines printed as they come, and the
    tuning bar of any rank that sends events (:class:`Events`) drawn live below them.

    ``feed(line)`` takes a line as the launcher shows it (``[w0] text\\n``). Call
    ``close()`` at the end (it stops the bar, leaving its last state on screen)."""

    def __init__(self, out: TextIO | None = None,
                 on_event: Callable[[str, dict], None] | None = None) -> None:
        from rich.console import Console

        self.console = Console(file=out or sys.stdout, highlight=False)
        self._progress = None
        self._tasks: dict[str, Any] = {}
        self._on_event = on_event

    def feed(self, line: str) -> None:
        ev = parse(line)
        if ev is not None:
            self.event(*ev)
            return
        from rich.text import Text

        self.console.print(Text(line.rstrip("\n")), soft_wrap=True)

    def event(self, tag: str, ev: dict) -> None:
        if self._on_event is not None:
            self._on_event(tag, ev)
        if ev.get("done"):
            task = self._tasks.pop(tag, None)
            if task is not None and self._progress is not None:
                self._progress.update(task, completed=ev.get("completed", 0),
                                      total=ev.get("total"))
                self._progress.stop_task(task)
            if not self._tasks:
                self._stop()
            return
        if self._progress is None:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)

            self._progress = Progress(*columns(BarColumn, MofNCompleteColumn, TextColumn,
                                               TimeElapsedColumn),
                                      console=self.console, transient=False)
            self._progress.start()
        if tag not in self._tasks:
            self._tasks[tag] = self._progress.add_task("", total=ev.get("total"))
        self._progress.update(self._tasks[tag], total=ev.get("total"),
                              completed=ev.get("completed", 0),
                              description=str(ev.get("description", "")))

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._tasks.clear()

    def close(self) -> None:
        self._stop()
