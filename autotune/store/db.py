"""The results store: every tuning run and trial, in one SQLite file or one PostgreSQL
database.

``Store(db)`` opens (or creates) an autotune database: ``db`` is a path (SQLite, the
default) or a ``postgresql://`` URL; ``None`` means the ``AUTOTUNE_DB`` environment
variable, else ``autotune.db`` in the working directory. A store *is* each of the pieces
that do the work, all on one :class:`~autotune.store.connection.Connection` (the
database: checking it is ours, the schema, locking, retries, errors naming it):

* :class:`~autotune.store.writer.RunWriter`: runs, trials, pruning;
* :class:`~autotune.store.reader.RunReader`: runs, trials, graphs, read-only SQL;
* :class:`~autotune.store.nearest.NearestRuns`: the runs most like a job (graph edit
  distance), which the warm start (:mod:`autotune.store.warmstart`) takes;
* :attr:`Store.calibrations` (:class:`~autotune.store.calibrations.Calibrations`): the
  tuner's model of each cluster.
"""

from __future__ import annotations

import os

from autotune.store.calibrations import Calibrations
from autotune.store.connection import Connection, StoreError, StoreUnreachable
from autotune.store.location import default_path
from autotune.store.nearest import NearestRuns
from autotune.store.reader import RunReader
from autotune.store.writer import RunWriter, parse_age

__all__ = ["Store", "StoreError", "StoreUnreachable", "default_path", "parse_age"]


class Store(RunWriter, RunReader, NearestRuns):
    """The results store (see the module docstring). Safe to share between threads of
    one process; open one per process (do not carry an open store across ``fork``).

    ``create=False`` (the read commands) refuses a missing or empty database instead of
    starting a store in it; ``lock_wait_s``: how long a write waits for a busy database;
    ``allow_network_fs``: keep an SQLite file on a network file system anyway."""

    def __init__(self, db: str | os.PathLike | None = None, *, create: bool = True,
                 lock_wait_s: float = 120.0, allow_network_fs: bool | None = None) -> None:
        connection = Connection(db, create=create, lock_wait_s=lock_wait_s,
                                allow_network_fs=allow_network_fs)
        RunWriter.__init__(self, connection)
        RunReader.__init__(self, connection)
        NearestRuns.__init__(self, connection, self)
        #: the file of an SQLite store (None for PostgreSQL)
        self.path = connection.path
        #: how messages name the store
        self.name = connection.name
        self.schema_version = connection.schema_version
        #: the tuner's model per cluster (:class:`~autotune.store.calibrations.Calibrations`)
        self.calibrations = Calibrations(connection)

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.name!r})"
