"""Tuning progress as the person watching sees it: one protocol, wherever it comes from.

Whoever tunes (rank 0 of a session, the leader; ``autotune tune``'s rank program and its
simulator) drives a :class:`TuningDisplay` (``advance``, ``describe``, ``trial``, ``say``,
``stop``), built by :func:`tuning_display` in one of three modes:

* ``bar``: its own output is a terminal: a rich progress bar, redrawn as trials run;
* ``events``: another process shows it: one :data:`MARK` line of JSON per change (the
  whole state in each; see :class:`Events`), which that process reads from the pipe
  (:func:`parse`) and shows: ``autotune launch`` and the demo draw every rank's bar below
  the ranks' lines (:class:`Terminal`), ``autotune tune`` shows its rank 0's on a display
  of its own (:class:`Viewer`);
* ``lines``: no terminal anywhere (a pipe, a file, CI): one plain line per finished
  trial (number, technique, configuration, score with its unit, best so far), flushed
  at once, and one at the start and the end.

``AUTOTUNE_PROGRESS`` (:data:`ENV`) chooses one; unset, it is ``bar`` where the output is
a terminal and ``lines`` elsewhere. ``autotune launch`` sets ``events`` when its own output
is a terminal (a child's output is a pipe, so the child cannot tell); ``autotune tune``
always does, and shows the events as a bar or lines by its own stderr.

A display has a ``label`` (``tuning``; ``autotune tune`` also shows its ``ddp`` reference
and its ``verify`` iterations this way). Nothing here imports rich or torch until a
display is built.
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
#: the start of a progress event line: ``MARK`` + a JSON object: the display's state
#: (``label``, ``about``, ``total``, ``completed``, ``description``) and what happened,
#: if anything more: ``trial`` (a finished trial, :meth:`TuningDisplay.trial`'s
#: arguments), ``say`` (a message) or ``done`` (with ``summary``, and ``ended``: how,
#: when not ``done``: ``failed`` or ``aborted``)
MARK = "@autotune-progress "
#: the label and the words after "N iterations" of a tuning display
TUNING, TRIALS = "tuning", "of trials"


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
    {...}``, ``[w0@h0] ...`` on the emulated cluster, or without the tag: ``""``);
    ``None`` for any other line."""
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


def describe_trial(index: int, technique: str, best: float | None, unit: str) -> str:
    """A bar's description while a trial runs: ``trial 3 bayes     best 812 it/s`` (never
    a bare number: an empty unit shows as ``?``)."""
    from autotune.units import fmt_score, unit_of

    shown = f"best {fmt_score(best, unit_of(unit))}" if best else "best -"
    return f"trial {index} {technique:9s} {shown}"


def kept_summary(config: Mapping[str, Any] | None, score: float | None, unit: str) -> str:
    """A display's closing words: ``kept streams=2 chunk_bytes=1MiB ... at 812 it/s``
    (``""`` when nothing was kept)."""
    from autotune.units import fmt_config, fmt_score, unit_of

    return f"kept {fmt_config(config)} at {fmt_score(score, unit_of(unit))}" if config else ""


# ---- the side that tunes ----------------------------------------------------------------

class TuningDisplay:
    """What a tuner calls: ``advance(n)`` as tuning iterations pass, ``describe(text)``
    when a trial starts, ``trial(...)`` when one ends, ``say(text)`` for a message,
    ``stop(summary, ended)`` at the end (``ended``: ``done``, or ``failed`` or
    ``aborted`` when the tuning did not end well). The base class shows nothing but
    messages."""

    def __init__(self, total: int, label: str = TUNING, about: str = TRIALS) -> None:
        self.total = total
        self.completed = 0
        self.label = label
        self.about = about
        self.t0 = time.monotonic()

    def update(self, completed: int | None = None, total: int | None = None) -> None:
        """Set the iterations done (and the total) outright."""
        if total is not None:
            self.total = total
        if completed is not None:
            self.completed = completed

    def advance(self, n: int = 1) -> None:
        self.update(self.completed + n)

    def describe(self, text: str) -> None:
        pass

    def trial(self, index: int, technique: str, config: Mapping[str, Any] | None,
              score: float | None, best: float | None, unit: str,
              error: str | None = None) -> None:
        pass

    def say(self, text: str) -> None:
        message(text)

    def stop(self, summary: str = "", ended: str = "done") -> None:
        pass


class Bar(TuningDisplay):
    """A rich progress bar on ``out`` (default stdout), a terminal: the label, the
    iterations, the description (the trial under way and the best score so far; ``about``
    until the first)."""

    def __init__(self, total: int, label: str = TUNING, about: str = TRIALS,
                 out: TextIO | None = None) -> None:
        super().__init__(total, label, about)
        from rich.console import Console
        from rich.progress import Progress

        self._progress = Progress(*columns(), transient=False,
                                  console=None if out is None else Console(file=out))
        self._task = self._progress.add_task(about, total=total, label=label)
        self._progress.start()

    def update(self, completed: int | None = None, total: int | None = None) -> None:
        super().update(completed, total)
        self._progress.update(self._task, completed=self.completed, total=self.total)

    def describe(self, text: str) -> None:
        self._progress.update(self._task, description=text)

    def say(self, text: str) -> None:
        self._progress.console.print(markup(text))

    def stop(self, summary: str = "", ended: str = "done") -> None:
        self._progress.stop()


class Events(TuningDisplay):
    """:data:`MARK` lines on ``out`` (default stdout) for another process to show
    (:class:`Terminal`, :class:`Viewer`): the whole state in each, so a lost or late line
    does no harm, and what happened (a finished trial, a message, the end)."""

    def __init__(self, total: int, label: str = TUNING, about: str = TRIALS,
                 out: TextIO | None = None) -> None:
        super().__init__(total, label, about)
        self._out = out
        self._description = ""
        self._send()

    def _send(self, **extra: Any) -> None:
        out = self._out or sys.stdout
        state = {"label": self.label, "about": self.about, "total": self.total,
                 "completed": self.completed, "description": self._description, **extra}
        out.write(MARK + json.dumps(state, default=str) + "\n")
        out.flush()

    def update(self, completed: int | None = None, total: int | None = None) -> None:
        super().update(completed, total)
        self._send()

    def describe(self, text: str) -> None:
        self._description = text
        self._send()

    def trial(self, index: int, technique: str, config: Mapping[str, Any] | None,
              score: float | None, best: float | None, unit: str,
              error: str | None = None) -> None:
        self._send(trial={"index": index, "technique": technique,
                          "config": None if config is None else dict(config),
                          "score": score, "best": best, "unit": unit, "error": error})

    def say(self, text: str) -> None:
        self._send(say=text)

    def stop(self, summary: str = "", ended: str = "done") -> None:
        self._send(done=True, summary=summary, **({} if ended == "done" else {"ended": ended}))


class Lines(TuningDisplay):
    """One plain line per finished trial on ``out`` (default stderr), and one at the start
    and the end."""

    def __init__(self, total: int, label: str = TUNING, about: str = TRIALS,
                 out: TextIO | None = None) -> None:
        super().__init__(total, label, about)
        self._out = out
        self._write(f"{label}: {total} iterations" + (f" {about}" if about else ""))

    def _write(self, text: str) -> None:
        out = self._out or sys.stderr
        out.write(text + "\n")
        out.flush()

    def trial(self, index: int, technique: str, config: Mapping[str, Any] | None,
              score: float | None, best: float | None, unit: str,
              error: str | None = None) -> None:
        from autotune.units import fmt_config, fmt_score, unit_of

        unit = unit_of(unit)
        result = "failed" if error is not None else fmt_score(score, unit)
        self._write(f"{self.label}: trial {index} {technique}: {fmt_config(config)}: "
                    f"{result}; best {fmt_score(best, unit) or '-'} "
                    f"[{self.completed}/{self.total} iterations, {self._elapsed()}]")

    def say(self, text: str) -> None:
        message(text, self._out or sys.stderr)

    def stop(self, summary: str = "", ended: str = "done") -> None:
        self._write(f"{self.label}: {ended}, {self.completed}/{self.total} iterations in "
                    f"{self._elapsed()}" + (f"; {summary}" if summary else ""))

    def _elapsed(self) -> str:
        from autotune.units import fmt_seconds

        return fmt_seconds(time.monotonic() - self.t0)


def tuning_display(total: int, which: str | None = None, *, label: str = TUNING,
                   about: str = TRIALS, out: TextIO | None = None) -> TuningDisplay:
    """The display for ``total`` iterations on ``out`` (each mode's default stream when
    None): ``which`` or :func:`mode` of ``out``."""
    which = which or mode(out)
    kind = {"events": Events, "lines": Lines}.get(which, Bar)
    return kind(total, label, about, out=out)


def columns() -> tuple:
    """The bar's columns, one look for a tuner's own bar and a launcher's (a task's
    ``label`` field names it)."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    return (TextColumn("[bold]{task.fields[label]}[/]"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.description}"), TimeElapsedColumn())


def markup(text: str) -> Any:
    """``text`` with its rich markup (``[yellow]...[/]``) as a rich ``Text``; as it is
    where the markup does not parse (a message that quotes brackets)."""
    from rich.errors import MarkupError
    from rich.text import Text

    try:
        return Text.from_markup(text)
    except MarkupError:
        return Text(text)


def message(text: str, out: TextIO | None = None) -> None:
    """A message (rich markup) on ``out`` (default stderr) as one line, unwrapped."""
    from rich.console import Console

    Console(file=out, stderr=out is None, highlight=False).print(markup(text), soft_wrap=True)


# ---- the side that shows another process's events ---------------------------------------

def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _float(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


class Viewer:
    """One process's events (rank 0's :class:`Events`) shown on this process's own
    display (:func:`tuning_display`: a bar or plain lines, by ``which`` or ``out``):
    ``event(ev)`` for each parsed event (:func:`parse`; a field of the wrong type is
    shown as missing, never raised: the caller is a rank's output reader). A display
    starts at an event when none is open (after ``done``, or when the label changes) and
    stops at ``done``; ``close()`` stops one left open (a job that died)."""

    def __init__(self, which: str | None = None, out: TextIO | None = None) -> None:
        self.which = which or mode(out)
        self.out = out
        self.display: TuningDisplay | None = None
        self._description = ""

    def event(self, ev: Mapping[str, Any]) -> None:
        label = str(ev.get("label", TUNING))
        shown = self.display
        if shown is not None and shown.label != label:
            self.close()
            shown = None
        if shown is None:
            shown = self.display = tuning_display(
                _int(ev.get("total"), 0), self.which, label=label,
                about=str(ev.get("about", TRIALS)), out=self.out)
            self._description = ""
        shown.update(completed=_int(ev.get("completed"), shown.completed),
                     total=_int(ev.get("total"), shown.total))
        description = str(ev.get("description", ""))
        if description != self._description:
            self._description = description
            shown.describe(description)
        trial = ev.get("trial")
        if isinstance(trial, Mapping):
            config = trial.get("config")
            shown.trial(_int(trial.get("index"), -1), str(trial.get("technique", "?")),
                        config if isinstance(config, Mapping) else None,
                        _float(trial.get("score")), _float(trial.get("best")),
                        str(trial.get("unit", "")), trial.get("error"))
        if "say" in ev:
            shown.say(str(ev["say"]))
        if ev.get("done"):
            shown.stop(str(ev.get("summary") or ""), str(ev.get("ended") or "done"))
            self.display = None

    def close(self) -> None:
        if self.display is not None:
            self.display.stop()
            self.display = None


class Terminal:
    """A launcher's output on a terminal: every rank's lines printed as they come, and the
    bar of any rank that sends events (:class:`Events`) drawn live below them; a rank's
    messages (``say``) are printed as its lines.

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
        if "say" in ev:
            from rich.text import Text

            self.console.print(Text(f"[{tag}] " if tag else "") + markup(str(ev["say"])),
                               soft_wrap=True)
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
            from rich.progress import Progress

            self._progress = Progress(*columns(), console=self.console, transient=False)
            self._progress.start()
        label = str(ev.get("label", TUNING))
        if tag not in self._tasks:
            self._tasks[tag] = self._progress.add_task("", total=ev.get("total"), label=label)
        self._progress.update(self._tasks[tag], total=ev.get("total"),
                              completed=ev.get("completed", 0), label=label,
                              description=str(ev.get("description") or ev.get("about", "")))

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._tasks.clear()

    def close(self) -> None:
        self._stop()
