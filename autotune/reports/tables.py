"""Tables for people that fit the terminal (``autotune db``, ``autotune report``).

A :class:`Column` says how its cells behave when the terminal is narrow: numbers never
wrap (a value is never split across lines), text wraps at spaces and ellipsizes what
does not fit. When even that does not fit, the columns of lowest priority are left out
and the table's caption names them (``--json`` has everything).

The width is the terminal's; with output to a pipe or file, ``$COLUMNS`` if set, else
200 (so ``grep`` sees whole rows).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

PIPE_WIDTH = 200


@dataclass(frozen=True)
class Column:
    """``kind``: ``num`` (right-aligned, never wraps or shrinks), ``word`` (left-aligned,
    never wraps or shrinks: times, statuses), ``text`` (wraps at spaces, ellipsizes a
    word longer than the column), ``fold`` (wraps at spaces, folds longer words:
    configurations, errors). A ``text``/``fold`` column keeps room for its longest word
    up to ``room`` cells (default 12 for text, 24 for fold).
    ``drop``: 0 = always shown; larger values are left out first when space runs out."""

    name: str
    kind: str = "text"
    drop: int = 0
    room: int | None = None


def console_width() -> int | None:
    """The width to print at: ``None`` (the terminal's own) on a terminal, else
    ``$COLUMNS`` or :data:`PIPE_WIDTH`."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    return None if sys.stdout.isatty() else PIPE_WIDTH


def console(file: Any = None, width: int | None = None) -> Any:
    from rich.console import Console

    return Console(file=file or sys.stdout, width=width if width is not None else console_width())


def _cell_len(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in text.split("\n")), default=0)


def _min_width(col: Column, cells: list[str]) -> int:
    if col.kind in ("num", "word"):
        return max([_cell_len(c) for c in cells] + [_cell_len(col.name)])
    words = [_cell_len(w) for c in cells for w in c.split()]
    room = col.room if col.room is not None else (24 if col.kind == "fold" else 12)
    return max(min(max(words + [1]), room), min(_cell_len(col.name), room))


def fit(columns: Sequence[Column], rows: list[list[str]], width: int) -> list[int]:
    """Indexes of the columns to show at ``width``: all, or without the ones of highest
    ``drop`` until the narrowest rendering fits (numbers whole, text squeezed)."""
    keep = list(range(len(columns)))
    mins = [_min_width(c, [r[i] for r in rows]) for i, c in enumerate(columns)]

    def need(idx: list[int]) -> int:
        return sum(mins[i] for i in idx) + 3 * len(idx) + 1  # padding and rules

    while need(keep) > width:
        droppable = [i for i in keep if columns[i].drop > 0]
        if not droppable:
            break
        worst = max(droppable, key=lambda i: (columns[i].drop, i))
        keep.remove(worst)
    return keep


def build(title: str | None, columns: Sequence[Column], rows: Iterable[Iterable[Any]],
          width: int, caption: str | None = None) -> Any:
    """A rich Table of ``rows`` fitted to ``width`` (see :func:`fit`)."""
    from rich.table import Table

    cells = [["" if v is None else str(v) for v in r] for r in rows]
    keep = fit(columns, cells, width)
    left_out = [columns[i].name for i in range(len(columns)) if i not in keep]
    notes = [caption] if caption else []
    if left_out:
        notes.append(f"not shown at this width: {', '.join(left_out)} (wider terminal, or --json)")
    t = Table(title=title, caption="\n".join(notes) or None, caption_justify="left")
    for i in keep:
        c = columns[i]
        if c.kind in ("num", "word"):
            t.add_column(c.name, justify="right" if c.kind == "num" else "left", no_wrap=True,
                         min_width=_min_width(c, [r[i] for r in cells]))
        else:
            t.add_column(c.name, overflow="fold" if c.kind == "fold" else "ellipsis")
    for r in cells:
        t.add_row(*(r[i] for i in keep))
    return t


def show(title: str | None, columns: Sequence[Column], rows: Iterable[Iterable[Any]],
         caption: str | None = None, *, out: Any = None) -> None:
    """Print a fitted table (``out``: a rich Console, default :func:`console`)."""
    out = out or console()
    out.print(build(title, columns, rows, out.width, caption))
