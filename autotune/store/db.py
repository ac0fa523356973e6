"""The results store: every tuning run and trial, in one SQLite file.

``Store(path)`` opens (or creates) an autotune database; ``None`` means the
``AUTOTUNE_DB`` environment variable, else ``autotune.db`` in the working directory.
It is the one entry point; the work is done by the pieces it holds:

* :class:`~autotune.store.connection.Connection`: the file (checking it is ours, the
  schema, WAL, locking, retries, errors naming the file);
* :class:`~autotune.store.writer.RunWriter`: runs, trials, pruning;
* :class:`~autotune.store.reader.RunReader`: runs, trials, graphs, read-only SQL;
* :class:`~autotune.store.nearest.NearestRuns`: the runs most like a job (graph edit
  distance), and so the warm start (:mod:`autotune.store.warmstart`);
* :class:`~autotune.store.calibrations.Calibrations` (:attr:`Store.calibrations`, used
  directly): the tuner's model of each cluster.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from autotune.store.calibrations import Calibrations
from autotune.store.connection import Connection, StoreError, default_path
from autotune.store.nearest import NearestRuns
from autotune.store.reader import RunReader
from autotune.store.similarity import BUDGET_S, TIMEOUT_S, Summary
from autotune.store.writer import RunWriter, parse_age

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

    from autotune.tuning.space import Config, SearchSpace

__all__ = ["Store", "StoreError", "default_path", "parse_age"]


class Store:
    """The results store (see the module docstring). Safe to share between threads of
    one process; open one per process (do not carry an open store across ``fork``).

    ``create=False`` (the read commands) refuses a missing or empty file instead of
    starting a store in it; ``lock_wait_s``: how long a write waits for a busy file."""

    def __init__(self, path: str | os.PathLike | None = None, *, create: bool = True,
                 lock_wait_s: float = 120.0) -> None:
        self._connection = Connection(path, create=create, lock_wait_s=lock_wait_s)
        self.path = self._connection.path
        self.create = create
        self.lock_wait_s = lock_wait_s
        self.conn = self._connection.conn
        self.db = self._connection.db
        self.schema_version = self._connection.schema_version
        self._writer = RunWriter(self._connection)
        self._reader = RunReader(self._connection)
        self._nearest = NearestRuns(self._connection, self._reader)
        #: the tuner's model per cluster (:class:`~autotune.store.calibrations.Calibrations`)
        self.calibrations = Calibrations(self._connection)

    # --------------------------------------------------------------- writing
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
        """Record a new run (status ``running``) with its graphs; returns its id. See
        :meth:`RunWriter.start_run <autotune.store.writer.RunWriter.start_run>`."""
        return self._writer.start_run(
            job=job, world=world, backend=backend, model_graph=model_graph,
            topology_graph=topology_graph, space_facts=space_facts, simulated=simulated,
            unit=unit)

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
    ) -> int:
        """Record one measured configuration; returns the trial's id. See
        :meth:`RunWriter.add_trial <autotune.store.writer.RunWriter.add_trial>`."""
        return self._writer.add_trial(
            run_id, number=number, technique=technique, config=config, iterations=iterations,
            score=score, error=error, wall_time=wall_time, index=index,
            throughput=throughput, efficiency=efficiency)

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
    ) -> None:
        """Record how a run ended and what it found. See
        :meth:`RunWriter.finish_run <autotune.store.writer.RunWriter.finish_run>`."""
        self._writer.finish_run(
            run_id, status=status, best_config=best_config, best_score=best_score,
            default_score=default_score, best_spread=best_spread, default_spread=default_spread,
            best_iterations=best_iterations, default_iterations=default_iterations,
            kept_from=kept_from)

    def close_run(self, run_id: int, status: str = "aborted") -> str:
        """Close a run left ``running`` (e.g. abandoned) as ``status``, keeping its
        trials; returns its stored status. See :meth:`RunWriter.close_run
        <autotune.store.writer.RunWriter.close_run>`."""
        return self._writer.close_run(run_id, status)

    def prune(self, older_than: str | float | timedelta | None = None, *,
              status: str | None = None, dry_run: bool = False) -> int:
        """Delete runs older than ``older_than`` and/or of a (shown) ``status``, their
        trials and unused graphs; returns how many runs. See
        :meth:`RunWriter.prune <autotune.store.writer.RunWriter.prune>`."""
        return self._writer.prune(older_than, status=status, dry_run=dry_run)

    # --------------------------------------------------------------- reading
    def query(self, sql: str, params: Iterable[Any] = ()) -> list[dict]:
        """Rows of a read-only SQL query (select/with) as dicts."""
        return self._reader.query(sql, params)

    def run(self, run_id: int | str) -> dict:
        """One run (``"latest"``: the newest); StoreError if there is none."""
        return self._reader.run(run_id)

    def runs(self, *, status: str | None = None, job: str | None = None,
             model: str | None = None, topology: str | None = None,
             limit: int | None = None) -> list[dict]:
        """Runs, newest first; ``model``/``topology`` match a fingerprint or its prefix."""
        return self._reader.runs(status=status, job=job, model=model, topology=topology,
                                 limit=limit)

    def trials(self, run_id: int | str) -> list[dict]:
        """A run's trials in order."""
        return self._reader.trials(run_id)

    def trial_counts(self) -> dict[int, int]:
        """Run id -> how many trials it has."""
        return self._reader.trial_counts()

    def units(self) -> list[str | None]:
        """The units of the stored runs, in :data:`autotune.units.UNITS` order."""
        return self._reader.units()

    def best(self, *, model: str | None = None, topology: str | None = None,
             like: int | str | None = None, limit: int | None = 10,
             unit: str | None = None) -> list[dict]:
        """Finished runs with a best configuration, best first within each unit. See
        :meth:`RunReader.best <autotune.store.reader.RunReader.best>`."""
        return self._reader.best(model=model, topology=topology, like=like, limit=limit,
                                 unit=unit)

    def graph(self, fp: str) -> "nx.Graph":
        """A stored graph by fingerprint (or unique prefix)."""
        return self._reader.graph(fp)

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[dict]:
        """Rows of any query, unchecked (tests read the tables through it)."""
        return self._connection.read(sql, params)

    # --------------------------------------------------------------- similarity
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
        **only: Any,
    ) -> list[tuple[dict, float]]:
        """The ``k`` stored runs most like a job with these graphs, nearest first, as
        ``(run, distance)``; ``only``: which runs count (``unit``, ``space_facts``,
        ``across_machines``, ``max_distance``). See
        :meth:`NearestRuns.nearest <autotune.store.nearest.NearestRuns.nearest>`."""
        return self._nearest.nearest(model_graph, topology_graph, k, exclude=exclude,
                                     finished_only=finished_only, timeout=timeout,
                                     budget=budget, **only)

    def similar(self, run_id: int | str, k: int = 3, **kw: Any) -> list[tuple[dict, float]]:
        """The runs nearest to a stored run (itself excluded); ``kw`` as :meth:`nearest`."""
        return self._nearest.similar(run_id, k, **kw)

    def warm_start_configs(self, model_graph: "nx.Graph | None", topology_graph: "nx.Graph | None",
                           space: "SearchSpace", k: int = 3, *, unit: str, machines: int,
                           **kw: Any) -> list["Config"]:
        """Best configurations of the nearest finished runs of alike jobs (same ``unit``,
        same space facts, same machine class, near enough), projected into ``space``;
        see :func:`autotune.store.warmstart.warm_start_configs`."""
        from autotune.store.warmstart import warm_start_configs

        return warm_start_configs(self, model_graph, topology_graph, space, k, unit=unit,
                                  machines=machines, **kw)

    def warm_start_sources(self, model_graph: "nx.Graph | None",
                           topology_graph: "nx.Graph | None", space: "SearchSpace", k: int = 3,
                           *, unit: str, machines: int,
                           **kw: Any) -> list[tuple["Config", dict[str, Any]]]:
        """:meth:`warm_start_configs`, each with the run it came from (its origin, see
        :mod:`autotune.store.origin`); see :func:`autotune.store.warmstart.warm_start_sources`."""
        from autotune.store.warmstart import warm_start_sources

        return warm_start_sources(self, model_graph, topology_graph, space, k, unit=unit,
                                  machines=machines, **kw)

    def _summaries_for(self, fps: Iterable[str]) -> dict[str, Summary]:
        """The stored graphs' summaries by fingerprint (the store benchmark's reference)."""
        return self._nearest.summaries(fps)

    # --------------------------------------------------------------- lifetime
    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"
