"""The results store: every tuning run and trial, in one SQLite file.

``Store(path)`` opens (or creates) an autotune database; ``None`` means the
``AUTOTUNE_DB`` environment variable, else ``autotune.db`` in the working directory.
The schema and its migrations are in :mod:`autotune.store.schema`.

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
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import sqlite3
import threading
import time
from datetime import datetime, timedelta, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TypeVar

import sqlite_utils

from autotune.errors import AutotuneError
from autotune.store import schema
from autotune.store.fingerprint import fingerprint, from_json, normalize, to_json
from autotune.store.similarity import BUDGET_S, TIMEOUT_S, Candidate, Matcher, Summary
from autotune.units import UNITS

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

    from autotune.tuning.space import Config, SearchSpace

DEFAULT_PATH = "autotune.db"
ENV_VAR = "AUTOTUNE_DB"
SQLITE_MAGIC = b"SQLite format 3\x00"
STATUSES = ("running", "finished", "failed", "aborted")
JSON_COLUMNS = {"runs": ("world", "space_facts", "best_config"), "trials": ("config",)}

T = TypeVar("T")


class StoreError(AutotuneError, RuntimeError):
    """The results store cannot do what was asked (foreign or corrupt file, unknown run,
    bad argument). The message says which file and why."""


def default_path() -> Path:
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH)


def now() -> str:
    """UTC time as ISO 8601 text; all stored times use this format, so they sort."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def check_unit(unit: str, simulated: bool = False) -> str:
    """``unit`` if it is one of :data:`autotune.units.UNITS` (a simulated run's
    ``samples/s``/``it/s`` become ``simulated samples/s``/``simulated it/s``: its scores
    were never measured); StoreError otherwise."""
    if unit not in UNITS:
        raise StoreError(f"unit must be one of {', '.join(repr(u) for u in UNITS)}, got {unit!r}")
    if simulated and not unit.startswith("simulated "):
        unit = f"simulated {unit}"
    return unit


def _spread(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise StoreError(f"{name} is a standard deviation (finite, >= 0), got {value!r}")
    return value


def parse_age(text: str | float | int | timedelta) -> timedelta:
    """``"30d"``, ``"12h"``, ``"90m"``, ``"45s"``, ``"2w"`` (or seconds, or a timedelta)."""
    if isinstance(text, timedelta):
        return text
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return timedelta(seconds=float(text))
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", str(text))
    if not m:
        raise StoreError(f"cannot read the age {text!r}: use a number and a unit, e.g. 30d, 12h, 90m")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[m.group(2)]
    return timedelta(**{unit: float(m.group(1))})


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot store {type(value).__name__} as JSON")


def _dumps(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, sort_keys=True, default=_jsonable)


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _readonly(exc: sqlite3.Error) -> bool:
    """SQLITE_READONLY and its extended codes (read-only file, directory, database)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == 8  # SQLITE_READONLY
    return "readonly" in str(exc).lower()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


class Store:
    """The results store (see the module docstring). Safe to share between threads of
    one process; open one per process (do not carry an open store across ``fork``)."""

    def __init__(self, path: str | os.PathLike | None = None, *, create: bool = True,
                 lock_wait_s: float = 120.0) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.create = create
        self.lock_wait_s = lock_wait_s
        self._lock = threading.RLock()
        self._summaries: dict[str, Summary] = {}
        self._distances: dict[tuple[str, str], float] = {}
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
            self.schema_version = self._retry(self._open_schema)
            self._retry(self._enable_wal)
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
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            meta = self._meta()
            version = 0 if meta is None else int(meta.get("schema_version", "0"))
            version = schema.migrate(self.db, version)
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        return version

    def _enable_wal(self) -> None:
        mode = self.conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() != "wal":
            mode = self.conn.execute("PRAGMA journal_mode=wal").fetchone()[0]
            if mode.lower() != "wal":
                raise sqlite3.OperationalError("database is locked (could not switch to WAL)")

    # --------------------------------------------------------- transactions
    def _retry(self, fn: Callable[[], T]) -> T:
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

    def _write(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        """Run ``fn(db)`` as one ``BEGIN IMMEDIATE`` transaction, retried while busy."""
        def attempt() -> T:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(self.db)
                self.conn.execute("COMMIT")
                return out
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
        return self._retry(attempt)

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[dict]:
        def go() -> list[dict]:
            cur = self.conn.execute(sql, list(params))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]
        return self._retry(go)

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[dict]:
        """Rows of a read-only SQL query as dicts (reports, benchmarks; the file is plain
        SQLite, so ``sqlite-utils`` and Datasette read it too)."""
        if not sql.lstrip().lower().startswith(("select", "with")):
            raise StoreError(f"query() is for reading (select/with), got {sql.split()[0]!r}")
        return self._read(sql, params)

    def _tuples(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        return self._retry(lambda: self.conn.execute(sql, list(params)).fetchall())

    # --------------------------------------------------------------- writing
    def _put_graph(self, db: sqlite_utils.Database, g: "nx.Graph", fp: str, kind: str) -> None:
        db["graphs"].insert(
            {"fingerprint": fp, "kind": kind, "graph": to_json(g), "nodes": g.number_of_nodes(),
             "edges": g.number_of_edges(), "created": now()},
            pk="fingerprint", ignore=True,
        )

    def start_run(
        self,
        *,
        job: str,
        world: Mapping[str, Any],
        backend: str,
        model_graph: "nx.Graph | None",
        topology_graph: "nx.Graph | None",
        space_facts: Mapping[str, Any],
        simulated: bool = False,
        unit: str = "samples/s",
    ) -> int:
        """Record a new run (status ``running``) with its graphs; returns its id.

        ``unit``: what every score of the run is in, one of
        :data:`autotune.units.UNITS` (with ``simulated``, ``samples/s`` is recorded as
        ``simulated samples/s``); runs in different units are never ranked together."""
        import autotune

        unit = check_unit(unit, bool(simulated))

        mg, tg = normalize(model_graph), normalize(topology_graph)
        mfp, tfp = fingerprint(mg), fingerprint(tg)
        world = dict(world)
        row = {
            "created": now(), "status": "running", "job": str(job),
            "autotune_version": autotune.__version__, "torch_version": _version("torch"),
            "workers": world.get("workers"), "servers": world.get("servers"),
            "machines": world.get("machines"), "world": _dumps(world),
            "backend": str(backend), "simulated": int(bool(simulated)), "unit": unit,
            "model_fp": mfp, "topology_fp": tfp, "space_facts": _dumps(dict(space_facts)),
        }

        def write(db: sqlite_utils.Database) -> int:
            self._put_graph(db, mg, mfp, "model")
            self._put_graph(db, tg, tfp, "topology")
            return int(db["runs"].insert(row).last_pk)

        return self._write(write)

    def add_trial(
        self,
        run_id: int,
        *,
        number: int | None = None,
        technique: str,
        config: Mapping[str, Any],
        iterations: int,
        score: float | None,
        error: str | None = None,
        wall_time: float | None = None,
        index: int | None = None,
    ) -> int:
        """Record one measured configuration (``score`` None and ``error`` set when it
        failed); returns the trial's id. ``number`` is the trial's place in the run
        (0, 1, ...); ``index`` is its old name, still accepted (deprecated)."""
        if number is None and index is None:
            raise StoreError("add_trial needs the trial's number")
        if number is not None and index is not None and int(number) != int(index):
            raise StoreError(f"add_trial got number={number} and index={index}; give number only")
        number = number if number is not None else index
        if score is not None and not math.isfinite(float(score)):
            error = error or f"score {score}"
            score = None
        row = {
            "run": int(run_id), "number": int(number), "technique": str(technique),
            "config": _dumps(dict(config)), "iterations": int(iterations),
            "score": None if score is None else float(score), "error": error,
            "wall_time": None if wall_time is None else float(wall_time), "created": now(),
        }

        def write(db: sqlite_utils.Database) -> int:
            self._require_run(int(run_id))
            return int(db["trials"].insert(row).last_pk)

        return self._write(write)

    def finish_run(
        self,
        run_id: int,
        *,
        status: str = "finished",
        best_config: Mapping[str, Any] | None,
        best_score: float | None,
        default_score: float | None = None,
        best_spread: float | None = None,
        default_spread: float | None = None,
    ) -> None:
        """Record how a run ended and what it found; the spreads are the standard
        deviations of the per-iteration scores of the kept and of the default
        configuration (in the run's unit)."""
        if status not in STATUSES:
            raise StoreError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        values = {
            "best_spread": _spread("best_spread", best_spread),
            "default_spread": _spread("default_spread", default_spread),
            "status": status, "finished": now(),
            "best_config": _dumps(dict(best_config)) if best_config is not None else None,
            "best_score": None if best_score is None else float(best_score),
            "default_score": None if default_score is None else float(default_score),
        }

        def write(db: sqlite_utils.Database) -> None:
            self._require_run(int(run_id))
            db["runs"].update(int(run_id), values)

        self._write(write)

    def _require_run(self, run_id: int) -> None:
        if self.conn.execute("select 1 from runs where id = ?", [run_id]).fetchone() is None:
            raise StoreError(f"no run {run_id} in {self.path}")

    def prune(self, older_than: str | float | timedelta, *, dry_run: bool = False) -> int:
        """Delete runs created more than ``older_than`` ago (``"30d"``, seconds or a
        timedelta), their trials, and graphs no run uses any more. Returns how many runs
        were (or, with ``dry_run``, would be) deleted."""
        cutoff = (datetime.now(timezone.utc) - parse_age(older_than)).isoformat(timespec="milliseconds")

        def write(db: sqlite_utils.Database) -> int:
            n = self.conn.execute("select count(*) from runs where created < ?", [cutoff]).fetchone()[0]
            if dry_run or n == 0:
                return n
            self.conn.execute("delete from trials where run in (select id from runs where created < ?)",
                              [cutoff])
            self.conn.execute("delete from runs where created < ?", [cutoff])
            self.conn.execute(
                "delete from graphs where fingerprint not in (select model_fp from runs) "
                "and fingerprint not in (select topology_fp from runs)")
            return n

        return self._write(write)

    # --------------------------------------------------------------- reading
    @staticmethod
    def _decode(table: str, row: dict) -> dict:
        for col in JSON_COLUMNS[table]:
            if col in row and isinstance(row[col], str):
                row[col] = json.loads(row[col])
        if "simulated" in row:
            row["simulated"] = bool(row["simulated"])
        return row

    def run(self, run_id: int | str) -> dict:
        """One run as a dict (JSON columns decoded); ``"latest"`` is the newest run.
        StoreError if there is none."""
        if isinstance(run_id, str) and run_id.strip().lower() == "latest":
            newest = self._tuples("select max(id) from runs")[0][0]
            if newest is None:
                raise StoreError(f"no runs in {self.path}")
            run_id = newest
        try:
            rid = int(run_id)
        except (TypeError, ValueError):
            raise StoreError(f"a run id is a number or 'latest', got {run_id!r}") from None
        rows = self._read("select * from runs where id = ?", [rid])
        if not rows:
            raise StoreError(f"no run {rid} in {self.path}")
        return self._decode("runs", rows[0])

    def runs(self, *, status: str | None = None, job: str | None = None,
             model: str | None = None, topology: str | None = None,
             limit: int | None = None) -> list[dict]:
        """Runs, newest first; ``model``/``topology`` match a fingerprint or its prefix."""
        where, params = self._filters(status=status, job=job, model=model, topology=topology)
        sql = "select * from runs" + where + " order by id desc"
        if limit is not None:
            sql += f" limit {int(limit)}"
        return [self._decode("runs", r) for r in self._read(sql, params)]

    @staticmethod
    def _filters(**kw: str | None) -> tuple[str, list]:
        clauses, params = [], []
        for name, value in kw.items():
            if value is None:
                continue
            if name in ("model", "topology"):
                col = f"{name}_fp"
                clauses.append(f"substr({col}, 1, ?) = ?")
                params += [len(value), value.lower()]
            else:
                clauses.append(f"{name} = ?")
                params.append(value)
        return (" where " + " and ".join(clauses)) if clauses else "", params

    def trials(self, run_id: int | str) -> list[dict]:
        """A run's trials in order."""
        rid = self.run(run_id)["id"]
        rows = self._read("select * from trials where run = ? order by number, id", [rid])
        return [self._decode("trials", r) for r in rows]

    def trial_counts(self) -> dict[int, int]:
        return {r["run"]: r["n"] for r in self._read("select run, count(*) n from trials group by run")}

    def units(self) -> list[str | None]:
        """The units of the stored runs, in :data:`autotune.units.UNITS` order (``None``,
        runs of an unknown unit, last)."""
        found = {r["unit"] for r in self._read("select distinct unit from runs")}
        return [u for u in UNITS if u in found] + ([None] if None in found else []) + \
            sorted(u for u in found if u is not None and u not in UNITS)

    def best(self, *, model: str | None = None, topology: str | None = None,
             like: int | str | None = None, limit: int | None = 10,
             unit: str | None = None) -> list[dict]:
        """Finished runs with a best configuration, best score first, never ranked
        across units: the runs of each unit form a group (``limit`` runs at most each),
        groups in :data:`autotune.units.UNITS` order, runs of an unknown unit last.
        ``unit`` keeps one group. Restricted to a model/topology fingerprint (or prefix),
        or to the graphs of run ``like``."""
        if unit is not None and unit not in UNITS:
            raise StoreError(f"unit must be one of {', '.join(repr(u) for u in UNITS)}, got {unit!r}")
        if like is not None:
            ref = self.run(like)
            model, topology = ref["model_fp"], ref["topology_fp"]
        where, params = self._filters(model=model, topology=topology, unit=unit)
        where = (where + " and" if where else " where") + \
            " status = 'finished' and best_config is not null and best_score is not null"
        order = " ".join(f"when ? then {i}" for i in range(len(UNITS)))
        sql = ("select * from (select *, row_number() over (partition by unit order by "
               "best_score desc, id desc) as _rank from runs" + where + ")")
        if limit is not None:
            sql += f" where _rank <= {int(limit)}"
        sql += (f" order by case unit {order} else {len(UNITS) + 1} end, unit is null, unit,"
                " best_score desc, id desc")
        rows = self._read(sql, params + list(UNITS))
        for r in rows:
            del r["_rank"]
        return [self._decode("runs", r) for r in rows]

    def graph(self, fp: str) -> "nx.Graph":
        """A stored graph by fingerprint (or unique prefix)."""
        rows = self._read("select fingerprint, graph from graphs where substr(fingerprint, 1, ?) = ?",
                          [len(fp), fp.lower()])
        if len(rows) != 1:
            raise StoreError(f"{'no' if not rows else 'more than one'} graph {fp!r} in {self.path}")
        return from_json(rows[0]["graph"])

    # --------------------------------------------------------------- similarity
    def _summaries_for(self, fps: Iterable[str]) -> dict[str, Summary]:
        missing = sorted({fp for fp in fps if fp not in self._summaries})
        for i in range(0, len(missing), 500):
            part = missing[i : i + 500]
            rows = self._read(
                f"select fingerprint, graph from graphs where fingerprint in ({','.join('?' * len(part))})",
                part)
            for r in rows:
                self._summaries[r["fingerprint"]] = Summary.of(
                    from_json(r["graph"]), r["fingerprint"], normalized=True)
        return self._summaries

    def nearest(
        self,
        model_graph: "nx.Graph | None",
        topology_graph: "nx.Graph | None",
        k: int = 3,
        *,
        exclude: int | None = None,
        finished_only: bool = True,
        timeout: float = TIMEOUT_S,
        budget: float | None = BUDGET_S,
    ) -> list[tuple[dict, float]]:
        """The ``k`` stored runs most like a job with these graphs, nearest first, as
        ``(run, distance)``; 0 means same model and cluster (see
        :mod:`autotune.store.similarity`). By default only finished runs with a best
        configuration count; runs sharing both graphs are ordered by best score."""
        qm, qt = Summary.of(model_graph), Summary.of(topology_graph)
        where = " where 1"
        params: list[Any] = []
        if finished_only:
            where += " and status = 'finished' and best_config is not null"
        if exclude is not None:
            where += " and id != ?"
            params.append(int(exclude))
        groups = self._tuples(
            "select model_fp, topology_fp, count(*) from runs" + where +
            " group by model_fp, topology_fp", params)
        summaries = self._summaries_for({fp for g in groups for fp in g[:2]})
        cands = [Candidate((m, t), summaries[m], summaries[t], n)
                 for m, t, n in groups if m in summaries and t in summaries]
        ranked = Matcher(self._distances).rank(qm, qt, cands, k, timeout=timeout, budget=budget)
        out: list[tuple[dict, float]] = []
        for cand, d in ranked:
            if len(out) >= k:
                break
            mfp, tfp = cand.key
            rows = self._read(
                "select * from runs" + where + " and model_fp = ? and topology_fp = ?"
                " order by best_score is null, best_score desc, id desc limit ?",
                params + [mfp, tfp, k - len(out)])
            out += [(self._decode("runs", r), d) for r in rows]
        return out

    def similar(self, run_id: int | str, k: int = 3, **kw: Any) -> list[tuple[dict, float]]:
        """The runs nearest to a stored run (itself excluded)."""
        ref = self.run(run_id)
        summaries = self._summaries_for([ref["model_fp"], ref["topology_fp"]])
        return self.nearest(summaries[ref["model_fp"]].graph, summaries[ref["topology_fp"]].graph,
                            k, exclude=ref["id"], **kw)

    def warm_start_configs(self, model_graph: "nx.Graph | None", topology_graph: "nx.Graph | None",
                           space: "SearchSpace", k: int = 3, **kw: Any) -> list["Config"]:
        """Best configurations of the nearest finished runs, projected into ``space``;
        see :func:`autotune.store.warmstart.warm_start_configs`."""
        from autotune.store.warmstart import warm_start_configs

        return warm_start_configs(self, model_graph, topology_graph, space, k, **kw)

    # --------------------------------------------------------------- lifetime
    def close(self) -> None:
        with self._lock:
            self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"
