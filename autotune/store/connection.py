"""The SQLite file under the results store: opening it, checking it is ours, its schema,
and every statement run on it (locking, retries, errors that name the file).

Several jobs may write the same file at once: the file is in WAL mode, every write is
one short ``BEGIN IMMEDIATE`` transaction (so a writer never has to upgrade a read lock,
the usual source of "database is locked" in WAL mode), the busy timeout is long, and
a write that still meets a busy database is retried with backoff.

A file that is not an autotune database, is corrupt, or was written by a newer
autotune raises :class:`StoreError` and is left untouched: nothing is written before
the file is known to be ours. With ``create=False`` (the read commands) a missing file,
an empty (0-byte) file and an SQLite file without tables are refused too, so they are
never created or turned into a store. A file or directory this process may not write
gives a "read-only" error (SQLite needs to write the directory even to read: the
``-wal``/``-shm`` files live beside the database).

The schema itself and its migrations are in :mod:`autotune.store.schema`.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import sqlite_utils

from autotune.errors import AutotuneError
from autotune.store import schema

DEFAULT_PATH = "autotune.db"
ENV_VAR = "AUTOTUNE_DB"
SQLITE_MAGIC = b"SQLite format 3\x00"

T = TypeVar("T")


class StoreError(AutotuneError, RuntimeError):
    """The results store cannot do what was asked (foreign or corrupt file, unknown run,
    bad argument). The message says which file and why."""


def default_path() -> Path:
    """``$AUTOTUNE_DB``, else ``autotune.db`` in the working directory."""
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH)


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _readonly(exc: sqlite3.Error) -> bool:
    """SQLITE_READONLY and its extended codes (read-only file, directory, database)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == 8  # SQLITE_READONLY
    return "readonly" in str(exc).lower()


class Connection:
    """One open autotune database (see the module docstring): :meth:`write` runs a
    transaction, :meth:`read` and :meth:`tuples` a query, each under one lock, retried
    while the file is busy, SQLite errors turned into :class:`StoreError`. Safe to share
    between threads of one process; not across ``fork``."""

    def __init__(self, path: str | os.PathLike | None = None, *, create: bool = True,
                 lock_wait_s: float = 120.0) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.create = create
        self.lock_wait_s = lock_wait_s
        self._lock = threading.RLock()
        if not self.path.parent.is_dir():
            raise StoreError(f"cannot create {self.path}: directory {self.path.parent} does not exist")
        exists = self.path.exists()
        if not exists and not create:
            raise StoreError(f"no autotune database at {self.path}")
        if exists:
            self._check_header()
            if not create and self.path.stat().st_size == 0:
                raise StoreError(f"{self.path} is empty (0 bytes), not an autotune database; "
                                 "it was left untouched")
        try:
            conn = sqlite3.connect(str(self.path), timeout=min(lock_wait_s, 60.0),
                                   isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            if not exists and not os.access(self.path.parent, os.W_OK):
                raise StoreError(f"cannot create {self.path}: directory {self.path.parent} is "
                                 f"read-only here ({exc})") from exc
            raise StoreError(f"cannot open {self.path}: {exc}") from exc
        self.conn = conn
        self.db = sqlite_utils.Database(conn, execute_plugins=False)
        try:
            self.schema_version = self.retry(self._open_schema)
            self.retry(self._enable_wal)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except BaseException:
            conn.close()
            raise

    # ------------------------------------------------------------ opening
    def _check_header(self) -> None:
        if not self.path.is_file():
            raise StoreError(f"{self.path} is not a file")
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc.strerror or exc}") from exc
        if head and head != SQLITE_MAGIC:
            raise StoreError(f"{self.path} is not an autotune database (not an SQLite file); "
                             "it was left untouched")

    def _meta(self) -> dict[str, str] | None:
        """The meta table, None for an empty file; StoreError for a foreign one."""
        tables = {r[0] for r in self.conn.execute(
            "select name from sqlite_master where type = 'table'")}
        if not tables:
            return None
        if "meta" not in tables:
            raise StoreError(f"{self.path} is an SQLite database but not an autotune one "
                             f"(tables: {', '.join(sorted(tables)[:6])}); it was left untouched")
        meta = dict(self.conn.execute("select key, value from meta").fetchall())
        if meta.get("application") != schema.APPLICATION:
            raise StoreError(f"{self.path} is an SQLite database but not an autotune one; "
                             "it was left untouched")
        return meta

    def _open_schema(self) -> int:
        meta = self._meta()
        if meta is not None:
            check = self.conn.execute("PRAGMA quick_check(1)").fetchone()[0]
            if check != "ok":
                raise StoreError(f"{self.path} is corrupt ({check}); it was left untouched")
            version = int(meta.get("schema_version", "0"))
            if version > schema.SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {version}, newer than this autotune "
                    f"understands ({schema.SCHEMA_VERSION}); upgrade autotune")
            if version == schema.SCHEMA_VERSION:
                return version
        elif not self.create:
            raise StoreError(f"{self.path} is an empty SQLite database (no tables), not an "
                             "autotune database; it was left untouched")
        # Create or migrate, under the write lock; another process may have done it.
        def migrate(db: sqlite_utils.Database) -> int:
            meta = self._meta()
            return schema.migrate(db, 0 if meta is None else int(meta.get("schema_version", "0")))
        return self._transaction(migrate)

    def _enable_wal(self) -> None:
        mode = self.conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() != "wal":
            mode = self.conn.execute("PRAGMA journal_mode=wal").fetchone()[0]
            if mode.lower() != "wal":
                raise sqlite3.OperationalError("database is locked (could not switch to WAL)")

    # --------------------------------------------------------- statements
    def retry(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` under the connection lock; retry while the database is busy; turn
        SQLite errors into :class:`StoreError`."""
        deadline = time.monotonic() + self.lock_wait_s
        delay = 0.005
        while True:
            try:
                with self._lock:
                    return fn()
            except sqlite3.OperationalError as exc:
                if _busy(exc) and time.monotonic() < deadline:
                    time.sleep(delay * random.uniform(0.5, 1.5))
                    delay = min(delay * 2, 0.25)
                    continue
                raise self._error(exc) from exc
            except sqlite3.DatabaseError as exc:
                raise self._error(exc) from exc

    def _error(self, exc: sqlite3.Error) -> StoreError:
        text = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and _busy(exc):
            return StoreError(f"{self.path} stayed locked for {self.lock_wait_s:.0f} s: {text}")
        if isinstance(exc, sqlite3.IntegrityError):
            return StoreError(f"{self.path}: {text}")
        if _readonly(exc):
            return StoreError(
                f"{self.path} is read-only here ({text}): autotune needs write access to it to "
                f"record or prune runs, and to its directory {self.path.parent} even to read "
                f"(SQLite keeps {self.path.name}-wal and {self.path.name}-shm beside it); "
                "it was left untouched")
        return StoreError(f"{self.path} is corrupt or not an autotune database ({text}); "
                          "it was left untouched")

    def _transaction(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        """``fn(db)`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back if it fails."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            out = fn(self.db)
            self.conn.execute("COMMIT")
            return out
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def write(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        """Run ``fn(db)`` as one ``BEGIN IMMEDIATE`` transaction, retried while busy."""
        return self.retry(lambda: self._transaction(fn))

    def read(self, sql: str, params: Iterable[Any] = ()) -> list[dict]:
        """Rows of a query as dicts (column name -> value, nothing decoded)."""
        def go() -> list[dict]:
            cur = self.conn.execute(sql, list(params))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]
        return self.retry(go)

    def tuples(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        """Rows of a query as tuples."""
        return self.retry(lambda: self.conn.execute(sql, list(params)).fetchall())

    def close(self) -> None:
        with self._lock:
            self.conn.close()
