"""The results store's SQLite schema and its forward migrations.

A store is a plain SQLite file (Datasette and ``sqlite-utils`` open it) with five
tables:

* ``meta``: ``application = 'autotune'`` marks the file as ours; ``schema_version``.
* ``runs``: one tuning run (a job): when, status, package versions, world (workers,
  servers, machines, as columns and as JSON), backend, model and topology fingerprints,
  the space's facts, the best configuration and its score, the default's score, the
  unit of every score of the run (``unit``, one of :data:`autotune.units.UNITS`) and
  the spread (standard deviation of the per-iteration scores) of the best and default
  configurations, how many scored iterations each of those two had (``best_iterations``,
  ``default_iterations``: a speed-up needs them, see :mod:`autotune.speedup`), its
  owner (``owner_host``, ``owner_pid``: who started it), and where the kept
  configuration came from when it came from the store (``kept_from``, JSON: run, job,
  created, how; :mod:`autotune.store.origin`).
* ``trials``: one measured configuration of a run: number (0, 1, ... in the order
  tried, like Optuna's ``trial.number``), technique, configuration (JSON), iterations,
  score (``NULL`` when it failed, with ``error``), wall time (its duration, s) and
  ``created`` (when it was recorded, i.e. when it finished; it started ``wall_time``
  earlier); for a lossy trial scored by goodput, its ``throughput`` and statistical
  ``efficiency`` (``score`` = throughput x efficiency; docs/compression.md).
* ``graphs``: fingerprint -> model or topology graph as node-link JSON, with node and
  edge counts.
* ``calibrations``: per cluster key, the tuner's model of those machines (the
  simulator's measured and fitted constants), which the next job on alike machines
  starts from (:mod:`autotune.store.calibrations`).

Configurations and other dicts are JSON text. ``MIGRATIONS[v]`` takes a store at
version ``v`` to ``v + 1`` inside the caller's transaction; a new file runs them all.
"""

from __future__ import annotations

import json
from typing import Callable

import sqlite_utils

APPLICATION = "autotune"
SCHEMA_VERSION = 9


def _v0_to_v1(db: sqlite_utils.Database) -> None:
    """The first schema."""
    db["meta"].create({"key": str, "value": str}, pk="key")
    db["meta"].insert_all(
        [{"key": "application", "value": APPLICATION}, {"key": "schema_version", "value": "0"}]
    )
    db["runs"].create(
        {
            "id": int, "created": str, "status": str, "job": str,
            "autotune_version": str, "torch_version": str,
            "workers": int, "servers": int, "machines": int, "backend": str,
            "model_fp": str, "topology_fp": str,
            "best_config": str, "best_score": float, "default_score": float,
        },
        pk="id",
    )
    db["trials"].create(
        {
            "id": int, "run": int, "index": int, "technique": str, "config": str,
            "iterations": int, "score": float, "error": str, "wall_time": float,
        },
        pk="id",
        foreign_keys=[("run", "runs", "id")],
    )
    db["graphs"].create({"fingerprint": str, "kind": str, "graph": str}, pk="fingerprint")
    db["trials"].create_index(["run", "index"], index_name="trials_run_index")


def _v1_to_v2(db: sqlite_utils.Database) -> None:
    """Full world and space facts as JSON, simulated flag, finish/insert times, graph
    sizes (for the edit-distance lower bounds), and the look-up indexes."""
    runs = db["runs"]
    runs.add_column("finished", str)
    runs.add_column("world", str)
    runs.add_column("simulated", int, not_null_default=0)
    runs.add_column("space_facts", str)
    for row in list(db.query("select id, workers, servers, machines from runs")):
        world = {k: row[k] for k in ("workers", "servers", "machines") if row[k] is not None}
        db.execute(
            "update runs set world = ?, space_facts = '{}' where id = ?",
            [json.dumps(world, sort_keys=True), row["id"]],
        )
    db["trials"].add_column("created", str)
    graphs = db["graphs"]
    graphs.add_column("nodes", int)
    graphs.add_column("edges", int)
    graphs.add_column("created", str)
    for row in list(db.query("select fingerprint, graph from graphs")):
        data = json.loads(row["graph"])
        db.execute(
            "update graphs set nodes = ?, edges = ? where fingerprint = ?",
            [len(data.get("nodes", [])), len(data.get("edges", data.get("links", []))),
             row["fingerprint"]],
        )
    runs.create_index(["status", "model_fp", "topology_fp"], index_name="runs_lookup")
    runs.create_index(["created"], index_name="runs_created")
    runs.create_index(["job"], index_name="runs_job")


def _v2_to_v3(db: sqlite_utils.Database) -> None:
    """A partial covering index for the nearest-run look-up: the finished runs with a
    best configuration, by graph pair, with the best score. It replaces v2's
    ``runs_lookup``, which the planner preferred although it does not cover the query."""
    db.execute("drop index if exists runs_lookup")
    db.execute(
        "create index if not exists runs_finished on runs (model_fp, topology_fp, best_score) "
        "where status = 'finished' and best_config is not null")


def _v3_to_v4(db: sqlite_utils.Database) -> None:
    """Units and spreads: ``runs.unit`` (what every score of the run is in),
    ``runs.best_spread`` and ``runs.default_spread`` (standard deviation of the
    per-iteration scores); ``trials.index`` becomes ``trials.number`` (``index`` is an SQL
    keyword: ``select index from trials`` failed).

    Older runs did not record their unit. Simulated runs always scored simulated
    samples/s; ``autotune tune`` on local processes (job ``tune:...``) scored it/s; for
    the other runs (training sessions: samples/s or it/s, depending on
    ``samples_per_step``) it stays ``NULL``, shown as ``?`` and ranked apart."""
    runs = db["runs"]
    runs.add_column("unit", str)
    runs.add_column("best_spread", float)
    runs.add_column("default_spread", float)
    db.execute("update runs set unit = 'simulated samples/s' where simulated = 1")
    db.execute("update runs set unit = 'it/s' where simulated = 0 and job like 'tune:%'")
    db.execute("drop index if exists trials_run_index")
    db.execute('alter table trials rename column "index" to number')
    db.execute("create index if not exists trials_run_number on trials (run, number)")


def _v4_to_v5(db: sqlite_utils.Database) -> None:
    """A run's owner: ``runs.owner_host`` and ``runs.owner_pid``, the host and process
    that started it (and should close it). A ``running`` run whose owner is gone (same
    host, process not alive) reads as ``abandoned``. Older runs did not record an owner:
    ``NULL``, never shown as abandoned."""
    runs = db["runs"]
    runs.add_column("owner_host", str)
    runs.add_column("owner_pid", int)


def _v5_to_v6(db: sqlite_utils.Database) -> None:
    """How many scored iterations the kept and the default configuration's means are
    over: ``runs.best_iterations`` and ``runs.default_iterations``, so that a speed-up
    is shown only over enough of them (:data:`autotune.speedup.MIN_ITERATIONS`). Older
    runs did not record them: ``NULL``, an unknown count, so their speed-up is refused."""
    runs = db["runs"]
    runs.add_column("best_iterations", int)
    runs.add_column("default_iterations", int)


def _v6_to_v7(db: sqlite_utils.Database) -> None:
    """Provenance: ``runs.kept_from``, the stored run the kept configuration came from
    (a warm start, the stored best kept with budget 0, a restart) as JSON ``{"run",
    "job", "created", "how"}`` (:mod:`autotune.store.origin`); ``NULL`` when it did not
    come from the store, and for older runs."""
    db["runs"].add_column("kept_from", str)


def _v7_to_v8(db: sqlite_utils.Database) -> None:
    """Goodput (issue 39): ``trials.throughput``, the trial's speed alone, and
    ``trials.efficiency``, its statistical efficiency relative to lossless (a lossy trial
    of a job scored by goodput; ``score`` is then throughput x efficiency). ``NULL`` where
    ``score`` is the throughput itself: lossless trials, jobs scored by throughput, and
    older runs."""
    trials = db["trials"]
    trials.add_column("throughput", float)
    trials.add_column("efficiency", float)


def _v8_to_v9(db: sqlite_utils.Database) -> None:
    """The tuner's model, remembered per cluster (issue 40): ``calibrations``, one row per
    cluster key (:func:`autotune.store.calibrations.cluster_key`: worker machines,
    workers per machine, servers, device, backend) with the simulator's measured and
    fitted constants as JSON (:class:`autotune.sim.calibration.Calibration`), the world
    and device it describes, the run that last wrote it, when, and how many runs have."""
    db["calibrations"].create(
        {"key": str, "world": str, "device": str, "backend": str, "calibration": str,
         "run": int, "updated": str, "runs": int, "fit_error": float},
        pk="key")


MIGRATIONS: dict[int, Callable[[sqlite_utils.Database], None]] = {
    0: _v0_to_v1,
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
    6: _v6_to_v7,
    7: _v7_to_v8,
    8: _v8_to_v9,
}
assert sorted(MIGRATIONS) == list(range(SCHEMA_VERSION))


def migrate(db: sqlite_utils.Database, version: int) -> int:
    """Run the migrations from ``version`` to :data:`SCHEMA_VERSION` (inside the caller's
    transaction) and record the new version. Returns it."""
    for v in range(version, SCHEMA_VERSION):
        MIGRATIONS[v](db)
        db.execute("update meta set value = ? where key = 'schema_version'", [str(v + 1)])
    return SCHEMA_VERSION
