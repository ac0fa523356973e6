"""Output-file options: one convention for every option that names a file autotune writes
(``report --out``, ``db export --out``, ``probe --draw``, ``selftest --json-out``,
``tune --db``).

A file whose directory does not exist, or that cannot be written there (a read-only file
system, no write permission), is an ordinary mistake, not a crash: the option is checked
when the command line is read, before any work, and the command stops with one line
naming the file and the cause and exit code 2 (click's usage error code)::

    Error: --out: cannot write /nonexistent/x.png: directory /nonexistent does not exist
    Error: --out: cannot write /mnt/ro/x.png: /mnt/ro is on a read-only file system

Directories are never created (a typo in a path should not leave new directories behind).
Import-light: click only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

__all__ = ["OutFile", "OutPathError", "StoreTarget", "check_parent"]

USAGE_EXIT = 2


class OutPathError(click.ClickException):
    """``Error: <option>: cannot write <file>: directory <dir> does not exist``, exit 2;
    one line (no usage text)."""

    exit_code = USAGE_EXIT


def check_parent(path: Path | str, option: str | None = None, writable: bool = True) -> None:
    """Raise :class:`OutPathError` unless ``path``'s directory exists (and is a directory)
    and, with ``writable``, ``path`` can be written there (a read-only file system, a
    directory or a file without write permission)."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    prefix = f"{option}: " if option else ""
    if not parent.exists():
        raise OutPathError(f"{prefix}cannot write {p}: directory {parent} does not exist")
    if not parent.is_dir():
        raise OutPathError(f"{prefix}cannot write {p}: {parent} is not a directory")
    if p.is_dir():
        raise OutPathError(f"{prefix}cannot write {p}: it is a directory")
    if not writable:
        return
    if _read_only(parent):
        raise OutPathError(f"{prefix}cannot write {p}: {parent} is on a read-only file system")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutPathError(f"{prefix}cannot write {p}: directory {parent} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise OutPathError(f"{prefix}cannot write {p}: the file is not writable")


def _read_only(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


class OutFile(click.Path):
    """A ``click.Path`` for a file the command writes: its directory must exist
    (:func:`check_parent`). ``path_type`` as for ``click.Path`` (default ``Path``)."""

    name = "file"
    writes = True  # checked writable too (a store may be only read: StoreTarget)

    def __init__(self, path_type: type | None = Path) -> None:
        super().__init__(dir_okay=False, path_type=path_type)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        out = super().convert(value, param, ctx)
        opt = None
        if param is not None and getattr(param, "opts", None):
            opt = max(param.opts, key=len)
        check_parent(out, opt, writable=self.writes)
        return out


class StoreTarget(OutFile):
    """``--db``: a results store's file (its directory must exist, as :class:`OutFile`)
    or a database server's URL (``postgresql://...``), kept as the text given. The
    value is a ``str``."""

    name = "path or URL"
    writes = False  # `db show`, `report` read a store where they cannot write

    def __init__(self) -> None:
        super().__init__(path_type=str)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from autotune.store.location import is_url

        if isinstance(value, str) and is_url(value):
            return value
        return super().convert(value, param, ctx)
