"""The results store's write side: a run starts (with its model and cluster graphs),
gets its trials, finishes with what it found; old runs are pruned. Each call is one
transaction on the :class:`~autotune.store.connection.Connection`.
"""

from __future__ import annotations

import math
import os
import re
from datetime import datetime, timedelta, timezone
from importlib import metadata
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import sqlalchemy as sa

from autotune.store.connection import Connection, StoreError
from autotune.store.fingerprint import fingerprint, normalize, to_json
from autotune.store.rows import (ABANDONED, SHOWN_STATUSES, STATUSES, check_unit, dumps, host,
                                 now, owner_gone)
from autotune.store.schema import GRAPHS_LOCK_KEY
from autotune.store.sqltext import insert_ignoring, sql

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx


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


def _spread(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise StoreError(f"{name} is a standard deviation (finite, >= 0), got {value!r}")
    return value


def _count(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or int(value) != value or value < 0:
        raise StoreError(f"{name} is a number of iterations (a whole number >= 0), got {value!r}")
    return int(value)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


class RunWriter:
    """Records runs and trials in one store (:class:`autotune.store.db.Store` is one)."""

    connection: Connection

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def _insert(self, c: sa.Connection, table: str, row: Mapping[str, Any]) -> int:
        """Insert ``row`` into ``table``; its new integer key."""
        result = c.execute(self.connection.tables[table].insert().values(dict(row)))
        return int(result.inserted_primary_key[0])

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
        continues: Mapping[str, Any] | None = None,
    ) -> int:
        """Record a new run (status ``running``) with its graphs; returns its id.

        ``unit``: what every score of the run is in, one of
        :data:`autotune.units.UNITS` (with ``simulated``, ``samples/s`` is recorded as
        ``simulated samples/s``); runs in different units are never ranked together.
        ``continues``: ``{"store", "run"}``, the run this one goes on from, where that
        run's store was lost mid-run (:mod:`autotune.store.transfer`)."""
        import autotune

        unit = check_unit(unit, bool(simulated))

        mg, tg = normalize(model_graph), normalize(topology_graph)
        mfp, tfp = fingerprint(mg), fingerprint(tg)
        world = dict(world)
        row = {
            "created": now(), "status": "running", "job": str(job),
            "autotune_version": autotune.__version__, "torch_version": _version("torch"),
            "workers": world.get("workers"), "servers": world.get("servers"),
            "machines": world.get("machines"), "world": dumps(world),
            "backend": str(backend), "simulated": int(bool(simulated)), "unit": unit,
            "model_fp": mfp, "topology_fp": tfp, "space_facts": dumps(dict(space_facts)),
            "owner_host": host(), "owner_pid": os.getpid(),
            "continues": dumps(dict(continues)) if continues else None,
        }

        def write(c: sa.Connection) -> int:
            _graph_lock(c, exclusive=False)  # a prune does not delete the graphs under it
            self._put_graph(c, mg, mfp, "model")
            self._put_graph(c, tg, tfp, "topology")
            return self._insert(c, "runs", row)

        return self.connection.write(write)

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
        throughput: float | None = None,
        efficiency: float | None = None,
        trust: float | None = None,
    ) -> int:
        """Record one measured configuration (``score`` None and ``error`` set when it
        failed); returns the trial's id. ``throughput`` and ``efficiency``: a lossy trial
        scored by goodput (``score`` is their product). ``trust``: the physics prior's
        weight when the trial was proposed (None without a prior). ``number`` is the
        trial's place in the run (0, 1, ...); ``index`` is its old name, still accepted
        (deprecated)."""
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
            "config": dumps(dict(config)), "iterations": int(iterations),
            "score": None if score is None else float(score), "error": error,
            "wall_time": None if wall_time is None else float(wall_time), "created": now(),
            "throughput": _finite(throughput), "efficiency": _finite(efficiency),
            "trust": _finite(trust),
        }

        def write(c: sa.Connection) -> int:
            self._require_run(c, int(run_id))
            return self._insert(c, "trials", row)

        return self.connection.write(write)

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
        best_iterations: int | None = None,
        default_iterations: int | None = None,
        kept_from: Mapping[str, Any] | None = None,
        tuning_cost: Mapping[str, Any] | None = None,
    ) -> None:
        """Record how a run ended and what it found; the spreads are the standard
        deviations of the per-iteration scores of the kept and of the default
        configuration (in the run's unit), the iterations how many scored iterations
        their means are over (``None``: not known; its speed-up is then refused, see
        :mod:`autotune.speedup`); ``kept_from``: the stored run the kept configuration
        came from, if it did (:mod:`autotune.store.origin`); ``tuning_cost``: what the
        trials cost the job (:meth:`autotune.schedule.stakes.Stakes.summary`)."""
        if status not in STATUSES:
            raise StoreError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        values = {
            "best_spread": _spread("best_spread", best_spread),
            "default_spread": _spread("default_spread", default_spread),
            "best_iterations": _count("best_iterations", best_iterations),
            "default_iterations": _count("default_iterations", default_iterations),
            "status": status, "finished": now(),
            "best_config": dumps(dict(best_config)) if best_config is not None else None,
            "best_score": None if best_score is None else float(best_score),
            "default_score": None if default_score is None else float(default_score),
            "kept_from": dumps(dict(kept_from)) if kept_from else None,
            "tuning_cost": dumps(dict(tuning_cost)) if tuning_cost else None,
        }

        def write(c: sa.Connection) -> None:
            self._require_run(c, int(run_id))
            self._update_run(c, int(run_id), values)

        self.connection.write(write)

    def record_ddp(self, run_id: int, ddp: tuple, kept: tuple) -> None:
        """What the run measured against PyTorch DDP on the same job (``autotune tune``):
        ``ddp`` and ``kept`` (the kept configuration re-timed as DDP's is), each
        ``(score, spread, iterations)`` in the run's unit; ``runs.ddp``."""
        def side(name: str, value: tuple) -> dict[str, Any]:
            score, spread, n = value
            return {"score": None if score is None else float(score),
                    "spread": _spread(f"{name} spread", spread),
                    "iterations": _count(f"{name} iterations", n)}

        values = {"ddp": dumps({"ddp": side("ddp", ddp), "kept": side("kept", kept)})}

        def write(c: sa.Connection) -> None:
            self._require_run(c, int(run_id))
            self._update_run(c, int(run_id), values)

        self.connection.write(write)

    def close_run(self, run_id: int, status: str = "aborted", cause: str | None = None) -> str:
        """Close a run left ``running`` (e.g. shown ``abandoned``: its owner is gone) as
        ``status`` (default ``aborted``; ``abandoned`` stored, with its ``cause``, where
        the run went on elsewhere: :mod:`autotune.store.transfer`) with a finish time now;
        its trials and what it recorded are kept. A run already closed is left as it is.
        Returns the run's stored status afterwards."""
        if status not in STATUSES + (ABANDONED,) or status == "running":
            raise StoreError("a run is closed as finished, failed, aborted or abandoned, "
                             f"got {status!r}")

        def write(c: sa.Connection) -> str:
            self._require_run(c, int(run_id))
            sql(c, "update runs set status = ?, finished = ?, cause = ? where id = ? and "
                   "status = 'running'", [status, now(), cause, int(run_id)])
            return sql(c, "select status from runs where id = ?", [int(run_id)]).fetchone()[0]

        return self.connection.write(write)

    def prune(self, older_than: str | float | timedelta | None = None, *,
              status: str | None = None, dry_run: bool = False) -> int:
        """Delete runs created more than ``older_than`` ago (``"30d"``, seconds or a
        timedelta) and/or of a shown ``status`` (``abandoned``: running, owner gone),
        their trials, and graphs no run uses any more. Returns how many runs were (or,
        with ``dry_run``, would be) deleted."""
        if older_than is None and status is None:
            raise StoreError("prune needs an age (older_than) or a status")
        if status is not None and status not in SHOWN_STATUSES:
            raise StoreError(f"status must be one of {', '.join(SHOWN_STATUSES)}, got {status!r}")
        clauses, params = [], []
        if older_than is not None:
            cutoff = (datetime.now(timezone.utc) - parse_age(older_than)).isoformat(
                timespec="milliseconds")
            clauses.append("created < ?")
            params.append(cutoff)
        if status is not None:
            clauses.append("status = ?")
            params.append("running" if status == ABANDONED else status)
        where = " and ".join(clauses)

        def write(c: sa.Connection) -> int:
            _graph_lock(c, exclusive=True)
            rows = sql(c, f"select id, status, owner_host, owner_pid from runs where {where}",
                       params).fetchall()
            ids = [r[0] for r in rows]
            if status in ("running", ABANDONED):
                gone = {r[0] for r in rows if owner_gone(
                    {"owner_host": r[2], "owner_pid": r[3]})}
                ids = [i for i in ids if (i in gone) == (status == ABANDONED)]
            if dry_run or not ids:
                return len(ids)
            for start in range(0, len(ids), 500):
                chunk = ids[start:start + 500]
                marks = ",".join("?" * len(chunk))
                sql(c, f"delete from trials where run in ({marks})", chunk)
                sql(c, f"delete from runs where id in ({marks})", chunk)
            sql(c, 
                "delete from graphs where fingerprint not in (select model_fp from runs) "
                "and fingerprint not in (select topology_fp from runs)")
            return len(ids)

        return self.connection.write(write)

    def import_run(self, run: Mapping[str, Any], trials: Sequence[Mapping[str, Any]],
                   graphs: Sequence[Mapping[str, Any]]) -> int:
        """Copy a run of another store, as its rows (``select *``, JSON as text) with its
        trials and graphs, into this one in one transaction; returns its id here."""

        def write(c: sa.Connection) -> int:
            _graph_lock(c, exclusive=False)
            table = self.connection.tables["graphs"]
            for g in graphs:
                c.execute(insert_ignoring(c, table, "fingerprint").values(
                    {k: v for k, v in g.items() if k in table.c}))
            rid = self._insert(c, "runs", _columns(self.connection.tables["runs"], run))
            for t in trials:
                self._insert(c, "trials", {**_columns(self.connection.tables["trials"], t),
                                           "run": rid})
            return rid

        return self.connection.write(write)

    def _put_graph(self, c: sa.Connection, g: "nx.Graph", fp: str, kind: str) -> None:
        """Store graph ``g`` under its fingerprint, unless it is there already."""
        c.execute(insert_ignoring(c, self.connection.tables["graphs"], "fingerprint").values(
            fingerprint=fp, kind=kind, graph=to_json(g), nodes=g.number_of_nodes(),
            edges=g.number_of_edges(), created=now()))

    def _update_run(self, c: sa.Connection, run_id: int, values: Mapping[str, Any]) -> None:
        runs = self.connection.tables["runs"]
        c.execute(runs.update().where(runs.c.id == run_id).values(dict(values)))

    def _require_run(self, c: sa.Connection, run_id: int) -> None:
        if sql(c, "select 1 from runs where id = ?", [run_id]).fetchone() is None:
            raise StoreError(f"no run {run_id} in {self.connection.name}")


def _columns(table: sa.Table, row: Mapping[str, Any]) -> dict[str, Any]:
    """``row``'s values of ``table``'s columns, without its key (a new one is given)."""
    return {k: v for k, v in row.items() if k in table.c and k != "id"}


def _graph_lock(c: sa.Connection, *, exclusive: bool) -> None:
    """PostgreSQL: runs start under a shared lock and a prune takes it alone, so a prune
    never deletes a graph that a run being recorded at the same moment uses (SQLite's
    ``BEGIN IMMEDIATE`` already runs one writer at a time)."""
    if c.dialect.name == "postgresql":
        sql(c, f"select pg_advisory_xact_lock{'' if exclusive else '_shared'}(?)",
            [GRAPHS_LOCK_KEY])


def _finite(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None
