"""The results store's read side: runs (one, filtered, the best per unit), a run's
trials, stored graphs, and plain read-only SQL. Rows come back as dicts with their JSON
columns decoded (:func:`autotune.store.rows.decode`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from autotune.store.connection import Connection, StoreError
from autotune.store.fingerprint import from_json
from autotune.store.rows import ABANDONED, check_unit, decode
from autotune.units import UNITS

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx


def _filters(**kw: str | None) -> tuple[str, list]:
    """A ``where`` clause and its parameters: ``model``/``topology`` match a fingerprint
    prefix (case-insensitive), the other columns are compared for equality; None is no
    filter."""
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


class RunReader:
    """Looks runs, trials and graphs up in one store (:class:`autotune.store.db.Store`
    is one)."""

    connection: Connection

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[dict]:
        """Rows of a read-only SQL query (``?`` placeholders for ``params``) as dicts
        (reports, benchmarks; an SQLite store is a plain file, so ``sqlite-utils`` and
        Datasette read it too)."""
        if not sql.lstrip().lower().startswith(("select", "with")):
            raise StoreError(f"query() is for reading (select/with), got {sql.split()[0]!r}")
        return self.connection.read(sql, params)

    def run(self, run_id: int | str) -> dict:
        """One run as a dict (JSON columns decoded); ``"latest"`` is the newest run.
        StoreError if there is none."""
        path = self.connection.name
        if isinstance(run_id, str) and run_id.strip().lower() == "latest":
            newest = self.connection.tuples("select max(id) from runs")[0][0]
            if newest is None:
                raise StoreError(f"no runs in {path}")
            run_id = newest
        try:
            rid = int(run_id)
        except (TypeError, ValueError):
            raise StoreError(f"a run id is a number or 'latest', got {run_id!r}") from None
        rows = self.connection.read("select * from runs where id = ?", [rid])
        if not rows:
            raise StoreError(f"no run {rid} in {path}")
        return decode("runs", rows[0])

    def runs(self, *, status: str | None = None, job: str | None = None,
             model: str | None = None, topology: str | None = None,
             limit: int | None = None) -> list[dict]:
        """Runs, newest first; ``model``/``topology`` match a fingerprint or its prefix.
        ``status`` is the shown one: ``running`` leaves out, and ``abandoned`` keeps
        only, the running runs whose owner is gone; ``abandoned`` also keeps the runs
        stored so (their store was lost and the rest imported: :mod:`.transfer`)."""
        derived = status in ("running", ABANDONED)
        where, params = _filters(status=None if derived else status, job=job,
                                 model=model, topology=topology)
        if derived:  # shown abandoned: running with its owner gone, or closed so
            where += (" and" if where else " where") + " status in ('running', 'abandoned')"
        sql = "select * from runs" + where + " order by id desc"
        if limit is not None and not derived:
            sql += f" limit {int(limit)}"
        rows = [decode("runs", r) for r in self.connection.read(sql, params)]
        if derived:
            rows = [r for r in rows if r["status"] == status]
            if limit is not None:
                rows = rows[:int(limit)]
        return rows

    def tuning_costs(self, host: str, limit: int = 20) -> list[dict]:
        """What tuning cost the newest ``limit`` runs that ``host`` owned and closed with
        a cost (``runs.tuning_cost``, :meth:`autotune.schedule.stakes.Stakes.summary`),
        newest first."""
        rows = self.connection.read(
            "select tuning_cost from runs where owner_host = ? and tuning_cost is not null "
            f"order by id desc limit {int(limit)}", [host])
        return [c for c in (decode("runs", r)["tuning_cost"] for r in rows)
                if isinstance(c, dict)]

    def trials(self, run_id: int | str) -> list[dict]:
        """A run's trials in order."""
        rid = self.run(run_id)["id"]
        rows = self.connection.read("select * from trials where run = ? order by number, id", [rid])
        return [decode("trials", r) for r in rows]

    def trial_counts(self) -> dict[int, int]:
        """Run id -> how many trials it has (runs without trials are absent)."""
        rows = self.connection.read("select run, count(*) n from trials group by run")
        return {r["run"]: r["n"] for r in rows}

    def units(self) -> list[str | None]:
        """The units of the stored runs, in :data:`autotune.units.UNITS` order (``None``,
        runs of an unknown unit, last)."""
        found = {r["unit"] for r in self.connection.read("select distinct unit from runs")}
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
        if unit is not None:
            check_unit(unit)
        if like is not None:
            ref = self.run(like)
            model, topology = ref["model_fp"], ref["topology_fp"]
        where, params = _filters(model=model, topology=topology, unit=unit)
        where = (where + " and" if where else " where") + \
            " status = 'finished' and best_config is not null and best_score is not null"
        order = " ".join(f"when ? then {i}" for i in range(len(UNITS)))
        sql = ("select * from (select *, row_number() over (partition by unit order by "
               "best_score desc, id desc) as _rank from runs" + where + ") as ranked")
        if limit is not None:
            sql += f" where _rank <= {int(limit)}"
        sql += (f" order by case unit {order} else {len(UNITS) + 1} end, unit is null, unit,"
                " best_score desc, id desc")
        rows = self.connection.read(sql, params + list(UNITS))
        for r in rows:
            del r["_rank"]
        return [decode("runs", r) for r in rows]

    def graph(self, fp: str) -> "nx.Graph":
        """A stored graph by fingerprint (or unique prefix)."""
        rows = self.connection.read(
            "select fingerprint, graph from graphs where substr(fingerprint, 1, ?) = ?",
            [len(fp), fp.lower()])
        if len(rows) != 1:
            raise StoreError(f"{'no' if not rows else 'more than one'} graph {fp!r} in "
                             f"{self.connection.name}")
        return from_json(rows[0]["graph"])
