"""The database under the results store: an SQLite file (the default) or a PostgreSQL
database, opened through SQLAlchemy: checking it is ours, its schema, and every
statement run on it (locking, retries, errors that name the database).

Where the store is (:func:`target`): a path, or a ``postgresql://`` URL (credentials from
the URL, the environment's ``PGPASSWORD`` or a libpq password file); ``None`` means the
``AUTOTUNE_DB`` environment variable, else ``autotune.db`` in the working directory.
:attr:`Connection.name` is what messages show: the path, or the URL without its password.

SQLite. Several jobs on one machine may write the same file at once: the file is in WAL
mode, every write is one short ``BEGIN IMMEDIATE`` transaction (so a writer never has to
upgrade a read lock, the usual source of "database is locked" in WAL mode), the busy
timeout is long, and a write that still meets a busy database is retried with backoff.
A file on a network file system (NFS, CIFS, Lustre: :mod:`autotune.store.mounts`) is
refused unless forced: SQLite's locking and WAL do not hold there.

PostgreSQL. Jobs on many machines write at once; each write is one transaction, retried
when the server reports a serialization failure or a deadlock. A server that cannot be
reached raises :class:`StoreUnreachable` within ``CONNECT_TIMEOUT_S``.

Both. A database that is not an autotune one (other tables and no autotune ``meta``),
a corrupt file, or one written by a newer autotune raises :class:`StoreError` and is
left untouched: nothing is written before it is known to be ours. With ``create=False``
(the read commands) a missing file, an empty (0-byte) file and a database without
tables are refused too, so they are never created or turned into a store.

Statements are SQL text with ``?`` placeholders on both databases, always bound as
parameters, never formatted into the SQL; the schema and its migrations are in
:mod:`autotune.store.schema`.
"""

from __future__ import annotations

import importlib.util
import os
import random
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import StaticPool

from autotune.errors import AutotuneError
from autotune.store import schema
from autotune.store.location import shown, target
from autotune.store.mounts import network_fs
from autotune.store.sqltext import sql

#: set to 1 to keep an SQLite store on a network file system (at your own risk)
FORCE_ENV_VAR = "AUTOTUNE_DB_ALLOW_NETWORK_FS"
SQLITE_MAGIC = b"SQLite format 3\x00"
CONNECT_TIMEOUT_S = 5
#: PostgreSQL: the longest one statement waits for a lock, and runs (then it fails, named)
LOCK_TIMEOUT_MS = 30_000
STATEMENT_TIMEOUT_MS = 120_000
#: PostgreSQL's codes for a transaction to run again: serialization failure, deadlock,
#: a lock not had within LOCK_TIMEOUT_MS (until lock_wait_s runs out)
RETRY_CODES = ("40001", "40P01", "55P03")

T = TypeVar("T")


class StoreError(AutotuneError, RuntimeError):
    """The results store cannot do what was asked (foreign or corrupt database, unknown
    run, bad argument). The message says which database and why."""


class StoreUnreachable(StoreError):
    """The store's database server cannot be reached (down, wrong address, refused
    login): a session trains anyway (:mod:`autotune.leader.record`)."""


class Connection:
    """One open autotune database (see the module docstring): :meth:`write` runs a
    transaction, :meth:`read` and :meth:`tuples` a query, each under one lock, retried
    while the database is busy, driver errors turned into :class:`StoreError`. Safe to
    share between threads of one process; not across ``fork``.

    ``allow_network_fs``: keep an SQLite file on a network file system (default: the
    ``AUTOTUNE_DB_ALLOW_NETWORK_FS`` environment variable)."""

    def __init__(self, db: str | os.PathLike | None = None, *, create: bool = True,
                 lock_wait_s: float = 120.0, allow_network_fs: bool | None = None) -> None:
        where = target(db)
        self.create = create
        self.lock_wait_s = lock_wait_s
        self._lock = threading.RLock()
        #: the error that said the server cannot be reached, once one did
        self.unreachable: StoreUnreachable | None = None
        #: the SQLite file (None for a server's database); :attr:`name` is for messages
        self.path: Path | None = where if isinstance(where, Path) else None
        self.name = shown(where)
        if isinstance(where, Path):
            self.engine = self._sqlite_engine(where, allow_network_fs)
        else:
            self.engine = self._server_engine(where)
        self.dialect = self.engine.dialect.name
        try:
            self.schema_version = self.retry(self._open_schema)
            self.tables = self.retry(lambda: schema.tables(self.engine))
        except BaseException:
            self.engine.dispose()
            raise

    # ------------------------------------------------------------ opening
    def _sqlite_engine(self, path: Path, allow_network_fs: bool | None) -> sa.Engine:
        if not path.parent.is_dir():
            raise StoreError(f"cannot create {path}: directory {path.parent} does not exist")
        if allow_network_fs is None:
            allow_network_fs = os.environ.get(FORCE_ENV_VAR, "") not in ("", "0")
        fs = network_fs(path.parent)
        if fs and not allow_network_fs:
            raise StoreError(
                f"{path} is on a network file system ({fs}), where SQLite's locking does not "
                "hold and several writers corrupt it: use a PostgreSQL store "
                "(--db postgresql://user@host/dbname, docs/store.md), or set "
                f"{FORCE_ENV_VAR}=1 to use this file anyway")
        exists = path.exists()
        if not exists and not self.create:
            raise StoreError(f"no autotune database at {path}")
        if exists:
            _check_header(path)
            if not self.create and path.stat().st_size == 0:
                raise StoreError(f"{path} is empty (0 bytes), not an autotune database; "
                                 "it was left untouched")
        if not exists and not os.access(path.parent, os.W_OK):
            raise StoreError(f"cannot create {path}: directory {path.parent} is read-only here")
        # one DB-API connection, shared under the lock; transactions are ours (BEGIN
        # IMMEDIATE for writes), so the driver is in autocommit mode
        engine = sa.create_engine(
            sa.engine.URL.create("sqlite", database=str(path)), poolclass=StaticPool,
            isolation_level="AUTOCOMMIT",
            connect_args={"timeout": min(self.lock_wait_s, 60.0), "check_same_thread": False})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.execute("PRAGMA foreign_keys=ON")
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

        return engine

    def _server_engine(self, url: str) -> sa.Engine:
        try:
            parsed = sa.engine.make_url(url)
        except (sa_exc.ArgumentError, ValueError):
            raise StoreError(f"cannot read the store's URL {shown(url)}: use "
                             "postgresql://user@host:5432/dbname") from None
        if parsed.drivername not in ("postgresql", "postgresql+psycopg", "postgres"):
            raise StoreError(f"the store is an SQLite path or a postgresql:// URL (psycopg 3), "
                             f"got {shown(url)}")
        parsed = parsed.set(drivername="postgresql+psycopg")
        if importlib.util.find_spec("psycopg") is None:
            raise StoreError("a PostgreSQL store needs psycopg 3: pip install "
                             "'autotune[postgresql]'") from None
        # every wait bounded: connecting, a lock, a statement, a silent network
        return sa.create_engine(parsed, pool_pre_ping=True, pool_size=2, max_overflow=4,
                                connect_args={
                                    "connect_timeout": CONNECT_TIMEOUT_S,
                                    "application_name": "autotune",
                                    "options": f"-c lock_timeout={LOCK_TIMEOUT_MS} "
                                               f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
                                    "keepalives": 1, "keepalives_idle": 30,
                                    "keepalives_interval": 10, "keepalives_count": 3,
                                    "tcp_user_timeout": 60_000})

    @property
    def _kind(self) -> str:
        return "SQLite" if self.dialect == "sqlite" else "PostgreSQL"

    def _meta(self, c: sa.Connection) -> dict[str, str] | None:
        """The meta table, None for an empty database; StoreError for a foreign one."""
        tables = set(sa.inspect(c).get_table_names())
        if not tables:
            return None
        what = f"{'an' if self.dialect == 'sqlite' else 'a'} {self._kind}"
        if "meta" not in tables:
            raise StoreError(f"{self.name} is {what} database but not an autotune one "
                             f"(tables: {', '.join(sorted(tables)[:6])}); it was left untouched")
        try:
            meta = {k: v for k, v in sql(c, "select key, value from meta").fetchall()}
        except sa_exc.DBAPIError:
            meta = {}
        if meta.get("application") != schema.APPLICATION:
            raise StoreError(f"{self.name} is {what} database but not an autotune one; "
                             "it was left untouched")
        return meta

    def _open_schema(self) -> int:
        with self.engine.connect() as c:
            meta = self._meta(c)
            version = 0 if meta is None else int(meta.get("schema_version", "0"))
            if meta is not None:
                if self.dialect == "sqlite":
                    check = sql(c, "PRAGMA quick_check(1)").fetchone()[0]
                    if check != "ok":
                        raise StoreError(f"{self.name} is corrupt ({check}); it was left untouched")
                if version > schema.SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.name} has schema version {version}, newer than this autotune "
                        f"understands ({schema.SCHEMA_VERSION}); upgrade autotune")
            elif not self.create:
                raise StoreError(f"{self.name} is an empty {self._kind} database (no tables), "
                                 "not an autotune database; it was left untouched")
            if self.dialect == "sqlite":  # only once the file is known to be ours
                _wal(c)
            if version == schema.SCHEMA_VERSION:
                return version

        # create or migrate, under the write lock; another process may have done it
        def migrate(c: sa.Connection) -> int:
            if self.dialect == "postgresql":  # writers of an empty database queue here
                sql(c, "select pg_advisory_xact_lock(?)", [schema.LOCK_KEY])
            meta = self._meta(c)
            return schema.migrate(c, 0 if meta is None else int(meta.get("schema_version", "0")))
        return self._transaction(migrate)

    # --------------------------------------------------------- statements
    def retry(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` under the connection lock; retry while the database is busy (SQLite)
        or asks for it (PostgreSQL: serialization failure, deadlock); turn driver errors
        into :class:`StoreError`."""
        if self.unreachable is not None:  # once lost, fail at once: no wait per call
            raise StoreUnreachable(str(self.unreachable))
        deadline = time.monotonic() + self.lock_wait_s
        delay = 0.005
        while True:
            try:
                with self._lock:
                    return fn()
            except sa_exc.DBAPIError as exc:
                if self._transient(exc) and time.monotonic() < deadline:
                    time.sleep(delay * random.uniform(0.5, 1.5))
                    delay = min(delay * 2, 0.25)
                    continue
                error = self._error(exc)
                if isinstance(error, StoreUnreachable):
                    self.unreachable = error
                raise error from exc.orig

    def _transient(self, exc: sa_exc.DBAPIError) -> bool:
        if exc.connection_invalidated:
            return False
        if self.dialect == "sqlite":
            return isinstance(exc, sa_exc.OperationalError) and _busy(exc)
        return getattr(exc.orig, "sqlstate", None) in RETRY_CODES

    def _error(self, exc: sa_exc.DBAPIError) -> StoreError:
        text = str(exc.orig).strip()
        if self.dialect != "sqlite":
            state = getattr(exc.orig, "sqlstate", None) or ""
            if isinstance(exc, sa_exc.OperationalError) and (
                    state.startswith("28") or "authentication failed" in text
                    or "no password supplied" in text):
                return StoreUnreachable(f"cannot log in to the store {self.name}: {text}")
            if isinstance(exc, sa_exc.OperationalError) and not state:
                return StoreUnreachable(f"cannot reach the store {self.name}: {text}")
            return StoreError(f"{self.name}: {text}")
        if isinstance(exc, sa_exc.OperationalError) and _busy(exc):
            return StoreError(f"{self.name} stayed locked for {self.lock_wait_s:.0f} s: {text}")
        if isinstance(exc, sa_exc.IntegrityError):
            return StoreError(f"{self.name}: {text}")
        if _readonly(exc.orig) and self.path is not None:
            path = self.path
            return StoreError(
                f"{path} is read-only here ({text}): autotune needs write access to it to "
                f"record or prune runs, and to its directory {path.parent} even to read "
                f"(SQLite keeps {path.name}-wal and {path.name}-shm beside it); "
                "it was left untouched")
        if "unable to open" in text.lower():
            return StoreError(f"cannot open {self.name}: {text}")
        return StoreError(f"{self.name} is corrupt or not an autotune database ({text}); "
                          "it was left untouched")

    def _transaction(self, fn: Callable[[sa.Connection], T]) -> T:
        """``fn(connection)`` inside one transaction (SQLite: ``BEGIN IMMEDIATE``),
        committed, or rolled back if it fails."""
        if self.dialect != "sqlite":
            with self.engine.begin() as c:
                return fn(c)
        with self.engine.connect() as c:
            sql(c, "BEGIN IMMEDIATE")
            try:
                out = fn(c)
                sql(c, "COMMIT")
                return out
            except BaseException:
                if c.connection.driver_connection.in_transaction:
                    sql(c, "ROLLBACK")
                raise

    def write(self, fn: Callable[[sa.Connection], T]) -> T:
        """Run ``fn(connection)`` as one transaction, retried while busy; ``fn`` uses
        :func:`sql` or SQLAlchemy Core on :attr:`tables`."""
        return self.retry(lambda: self._transaction(fn))

    def read(self, text: str, params: Iterable[Any] = ()) -> list[dict]:
        """Rows of a query as dicts (column name -> value, nothing decoded)."""
        def go() -> list[dict]:
            with self.engine.connect() as c:
                return [dict(r) for r in sql(c, text, params).mappings()]
        return self.retry(go)

    def tuples(self, text: str, params: Iterable[Any] = ()) -> list[tuple]:
        """Rows of a query as tuples."""
        def go() -> list[tuple]:
            with self.engine.connect() as c:
                return [tuple(r) for r in sql(c, text, params).fetchall()]
        return self.retry(go)

    def close(self) -> None:
        with self._lock:
            self.engine.dispose()


def _check_header(path: Path) -> None:
    if not path.is_file():
        raise StoreError(f"{path} is not a file")
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if head and head != SQLITE_MAGIC:
        raise StoreError(f"{path} is not an autotune database (not an SQLite file); "
                         "it was left untouched")


def _wal(c: sa.Connection) -> None:
    mode = sql(c, "PRAGMA journal_mode").fetchone()[0]
    if mode.lower() != "wal":
        mode = sql(c, "PRAGMA journal_mode=wal").fetchone()[0]
        if mode.lower() != "wal":
            raise sa_exc.OperationalError("PRAGMA journal_mode=wal", (),
                                          Exception("database is locked (could not switch to WAL)"))


def _busy(exc: sa_exc.DBAPIError) -> bool:
    text = str(exc.orig).lower()
    return "locked" in text or "busy" in text


def _readonly(exc: BaseException) -> bool:
    """SQLITE_READONLY and its extended codes (read-only file, directory, database)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == 8  # SQLITE_READONLY
    return "readonly" in str(exc).lower()
