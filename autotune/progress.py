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
  trial (number, technique, configuration, score with its unit, the best trial so far),
  flushed at once, and one at the start and the end.

Two numbers, two names. While trials run, ``best trial`` is the highest score of one
trial so far (it never goes down; the report's "best so far" curve). The closing line
(:func:`kept_summary`) gives the kept configuration's figure: its mean over its scored
iterations, with their spread and count, the number the session's table, the store and
the report show. The two differ: the best trial was picked for being high, and the kept
configuration's mean also counts its confirm trials and its first iterations of training.

``AUTOTUNE_PROGRESS`` (:data:`ENV`) chooses one; unset, it is ``bar`` where the output is
a terminal and ``lines`` elsewhere, and ``lines`` beside a framework's own tqdm bar (the
HF Trainer's, Lightning's; :func:`host_bars`), each line written so that it is never glued
onto that bar (:func:`write_line`). ``autotune launch`` sets ``events`` when its own output
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
#: arguments), ``say`` (a message), ``over`` (no more iterations come:
#: :meth:`TuningDisplay.iterations_over`) or ``done`` (with ``summary``, and ``ended``:
#: how, when not ``done``: ``failed`` or ``aborted``)
MARK = "@autotune-progress "
#: the label and the words after "N iterations" of a tuning display
TUNING, TRIALS = "tuning", "of trials"


def mode(stream: TextIO | None = None) -> str:
    """The display to use: :data:`ENV` if set to one of :data:`MODES`, else ``bar`` where
    ``stream`` (default stdout) is a terminal and no host's tqdm bar is open
    (:func:`host_bars`: no second bar beside the framework's), ``lines`` elsewhere."""
    chosen = os.environ.get(ENV, "").strip().lower()
    if chosen in MODES:
        return chosen
    return "bar" if _is_tty(sys.stdout if stream is None else stream) and not host_bars() \
        else "lines"


def host_bars() -> list[Any]:
    """The tqdm progress bars open in this process (the HF Trainer's, Lightning's
    ``TQDMProgressBar``), where the host imported tqdm; tqdm keeps them per class, so its
    subclasses are searched too."""
    tqdm = sys.modules.get("tqdm")
    if tqdm is None:
        return []
    bars: list[Any] = []
    classes = [tqdm.tqdm]
    while classes:
        cls = classes.pop()
        bars += [b for b in cls.__dict__.get("_instances", ()) if b not in bars]
        classes += cls.__subclasses__()
    return bars


def write_line(text: str, out: TextIO) -> None:
    """``text`` as a line of its own on ``out``, beside the host's tqdm bars (:func:`host_bars`):
    in a terminal through ``tqdm.write`` (the bars are cleared, the line printed, the bars
    drawn again below it); elsewhere (a pipe, a log) after a line end, since a bar there
    leaves its last state without one and the line would be glued onto it."""
    bars = host_bars()
    if bars and _is_tty(out):
        type(bars[0]).write(text, file=out)
        return
    out.write(("\n" if bars else "") + text + "\n")
    out.flush()


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


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
    """A bar's description while a trial runs: ``trial 3 bayes     best trial 812 it/s``
    (``best``: the best trial's score so far; never a bare number: an empty unit shows as
    ``?``)."""
    from autotune.units import fmt_score, unit_of

    shown = f"best trial {fmt_score(best, unit_of(unit))}" if best else "best trial -"
    return f"trial {index} {technique:9s} {shown}"


def kept_summary(config: Mapping[str, Any] | None, score: float | None, unit: str,
                 spread: float | None = None, iterations: int | None = None) -> str:
    """A display's closing words: ``kept streams=2 chunk_bytes=1MiB ... at 812 ± 9 it/s
    (24 iterations)``: the kept configuration's figure, its mean ``score`` over its
    ``iterations`` scored iterations with their ``spread`` (each left out when None), as
    the session's table and the store give it (``""`` when nothing was kept)."""
    from autotune.units import fmt_config, fmt_score, unit_of

    if not config:
        return ""
    text = f"kept {fmt_config(config)}"
    if score is None:
        return text
    count = "" if iterations is None else f" ({iterations} iterations)"
    return f"{text} at {fmt_score(score, unit_of(unit), spread)}{count}"


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
        self._t_full: float | None = None  # when the last of the iterations was done
        self._t_over: float | None = None  # when the iterations were said to be over

    def update(self, completed: int | None = None, total: int | None = None) -> None:
        """Set the iterations done (and the total) outright (a total that grows, as a
        timing that goes on until it is long enough, is full again when reached)."""
        if total is not None:
            if total > self.total:
                self._t_full = None
            self.total = total
        if completed is not None:
            self.completed = completed
        full = self.total > 0 and self.completed >= self.total
        if full and self._t_full is None:
            self._t_full = time.monotonic()
        elif not full:
            self._t_full = None

    def iterations_over(self) -> None:
        """No more iterations will come, whether or not ``total`` ran (a tuning separated
        early leaves some): the clock stops here, though the display may stay open for
        its closing words."""
        if self._t_over is None:
            self._t_over = time.monotonic()

    def elapsed_s(self) -> float:
        """Seconds the iterations took: from the start until the last of them, or until
        :meth:`iterations_over` (a display kept open after them, until the kept
        configuration's figure is final, does not count that wait), else until now."""
        end = next((t for t in (self._t_over, self._t_full) if t is not None),
                   time.monotonic())
        return end - self.t0

    def advance(self, n: int = 1) -> None:
        self.update(self.completed + n)

    def describe(self, text: str) -> None:
        pass

    def trial(self, index: int, technique: str, config: Mapping[str, Any] | None,
              score: float | None, best: float | None, unit: str,
              error: str | None = None, efficiency: float | None = None) -> None:
        pass

    def say(self, text: str) -> None:
        message(text)

    def stop(self, summary: str = "", ended: str = "done") -> None:
        pass


class Bar(TuningDisplay):
    """A rich progress bar on ``out`` (default stdout), a terminal: the label, the
    iterations, the description (the trial under way and the best trial so far; ``about``
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
        if summary or ended != "done":  # the bar's last words: what was kept, or how it ended
            self._progress.update(self._task, description=summary or ended)
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

    def iterations_over(self) -> None:
        super().iterations_over()
        self._send(over=True)

    def trial(self, index: int, technique: str, config: Mapping[str, Any] | None,
              score: float | None, best: float | None, unit: str,
              error: str | None = None, efficiency: float | None = None) -> None:
        self._send(trial={"index": index, "technique": technique,
                          "config": None if config is None else dict(config),
                          "score": score, "best": best, "unit": unit, "error": error,
                          "efficiency": efficiency})

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
        write_line(text, self._out or sys.stderr)

    def trial(self, index: int, technique: str, config: Mapping[str, Any] | None,
              score: float | None, best: float | None, unit: str,
              error: str | None = None, efficiency: float | None = None) -> None:
        from autotune.units import fmt_config, fmt_score, unit_of

        unit = unit_of(unit)
        result = "failed" if error is not None else fmt_score(score, unit)
        if efficiency is not None and score is not None:  # scored by goodput
            result = (f"goodput {result} ({fmt_score(score / efficiency, unit)} x "
                      f"efficiency {efficiency:.2f})")
        self._write(f"{self.label}: trial {index} {technique}: {fmt_config(config)}: "
                    f"{result}; best trial {fmt_score(best, unit) or '-'} "
                    f"[{self.completed}/{self.total} iterations, {self._elapsed()}]")

    def say(self, text: str) -> None:
        message(text, self._out or sys.stderr)

    def stop(self, summary: str = "", ended: str = "done") -> None:
        self._write(f"{self.label}: {ended}, {self.completed}/{self.total} iterations in "
                    f"{self._elapsed()}" + (f"; {summary}" if summary else ""))

    def _elapsed(self) -> str:
        from autotune.units import fmt_seconds

        return fmt_seconds(self.elapsed_s())


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
    if host_bars():
        write_line(markup(text).plain, out or sys.stderr)
        return
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
    displays (:func:`tuning_display`: bars or plain lines, by ``which`` or ``out``):
    ``event(ev)`` for each parsed event (:func:`parse`; a field of the wrong type is
    shown as missing, never raised: the caller is a rank's output reader).

    One display per label, open from its first event until its ``done``: a phase may
    start while another's display is still open (a session keeps its tuning display
    open until the kept configuration's figure is final, while ``autotune tune`` times
    its ``verify`` iterations). Plain lines show both; a bar is one at a time, so an open
    bar stops (its state stays on screen) when another phase's starts, and its closing
    words, when they come, are printed as a line (``tuning: kept ...``). ``close()``
    stops what is left open (a job that died, a lost ``done``)."""

    def __init__(self, which: str | None = None, out: TextIO | None = None) -> None:
        self.which = which or mode(out)
        self.out = out
        self.displays: dict[str, TuningDisplay] = {}  # open, by label, oldest first
        self._descriptions: dict[str, str] = {}
        self._cut: set[str] = set()  # labels whose bar stopped for another's

    @property
    def display(self) -> TuningDisplay | None:
        """The display opened last and still open (``None``: none is)."""
        return next(reversed(self.displays.values()), None)

    def event(self, ev: Mapping[str, Any]) -> None:
        label = str(ev.get("label", TUNING))
        shown = self.displays.get(label)
        if shown is None and label in self._cut:
            self._after_cut(label, ev)
            return
        if shown is None:
            shown = self._open(label, ev)
        shown.update(completed=_int(ev.get("completed"), shown.completed),
                     total=_int(ev.get("total"), shown.total))
        description = str(ev.get("description", ""))
        if description != self._descriptions.get(label, ""):
            self._descriptions[label] = description
            shown.describe(description)
        trial = ev.get("trial")
        if isinstance(trial, Mapping):
            config = trial.get("config")
            shown.trial(_int(trial.get("index"), -1), str(trial.get("technique", "?")),
                        config if isinstance(config, Mapping) else None,
                        _float(trial.get("score")), _float(trial.get("best")),
                        str(trial.get("unit", "")), trial.get("error"),
                        _float(trial.get("efficiency")))
        if ev.get("over"):
            shown.iterations_over()
        if "say" in ev:
            shown.say(str(ev["say"]))
        if ev.get("done"):
            shown.stop(str(ev.get("summary") or ""), str(ev.get("ended") or "done"))
            self.displays.pop(label, None)
            self._descriptions.pop(label, None)

    def _open(self, label: str, ev: Mapping[str, Any]) -> TuningDisplay:
        """A display for ``label``'s phase; a bar first stops any other open bar."""
        if self.which == "bar":
            for other in list(self.displays):
                self.displays.pop(other).stop()
                self._descriptions.pop(other, None)
                self._cut.add(other)
        shown = self.displays[label] = tuning_display(
            _int(ev.get("total"), 0), self.which, label=label,
            about=str(ev.get("about", TRIALS)), out=self.out)
        self._descriptions[label] = ""
        return shown

    def _after_cut(self, label: str, ev: Mapping[str, Any]) -> None:
        """An event of a phase whose bar stopped for another's: its messages and its
        closing words are printed as lines; its progress is not shown again."""
        if "say" in ev:
            message(str(ev["say"]), self.out)
        if ev.get("done"):
            self._cut.discard(label)
            words = str(ev.get("summary") or "") or str(ev.get("ended") or "")
            if words and words != "done":
                message(f"{label}: {words}", self.out)

    def close(self) -> None:
        for label in list(self.displays):
            self.displays.pop(label).stop()
        self._descriptions.clear()
        self._cut.clear()


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
