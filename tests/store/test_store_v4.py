"""Schema v4 (issue 19): the unit of a run's scores, the spreads, ``trials.number``, and
``best`` never ranking runs of different units together."""

from __future__ import annotations

import json
import sqlite3

import pytest
import sqlalchemy as sa

from autotune.store import Store, StoreError
from autotune.store import schema
from autotune.store.sqltext import sql
from store_helpers import CNN, WORLD, cluster, model


def _v3_file(path) -> None:
    """A store as autotune wrote it at schema version 3 (``trials.index``, no unit)."""
    engine = sa.create_engine(sa.engine.URL.create("sqlite", database=str(path)))
    rows = [(1, "tune-sim:bert", 1, 900.0), (2, "tune:resnet50", 0, 4.0), (3, "train", 0, 50.0)]
    with engine.begin() as c:
        for v in range(3):
            schema.MIGRATIONS[v](c)
        sql(c, "update meta set value = '3' where key = 'schema_version'")
        for rid, job, sim, score in rows:
            sql(c,
                "insert into runs (id, created, status, job, model_fp, topology_fp, best_config, "
                "best_score, default_score, simulated, world, space_facts) values (?, "
                "'2024-01-01T00:00:00.000+00:00', 'finished', ?, 'aa', 'bb', ?, ?, 1.0, ?, '{}', '{}')",
                [rid, job, json.dumps({"streams": rid}), score, sim])
            sql(c, 'insert into trials (run, "index", technique, config, iterations, score) '
                "values (?, 0, 'grid', '{}', 2, ?)", [rid, score])
    engine.dispose()


def test_a_v3_store_migrates_to_v4_with_units_inferred_and_trials_numbered(tmp_path):
    path = tmp_path / "v3.db"
    _v3_file(path)
    with Store(path) as s:
        assert s.schema_version == schema.SCHEMA_VERSION >= 4
        units = {r["id"]: r["unit"] for r in s.runs()}
        # simulated runs scored simulated samples/s, local `autotune tune` it/s; others unknown
        assert units == {1: "simulated samples/s", 2: "it/s", 3: None}
        assert s.run(1)["best_spread"] is None and s.run(1)["default_spread"] is None
        assert [t["number"] for t in s.trials(2)] == [0] and "index" not in s.trials(2)[0]
        assert s.query("select number from trials order by run") == [{"number": 0}] * 3
        # each unit is its own group: the 900 simulated samples/s never outrank real runs
        # of another unit as if comparable; groups come in UNITS order, unknown last
        assert [(r["id"], r["unit"]) for r in s.best()] == [
            (2, "it/s"), (1, "simulated samples/s"), (3, None)]
    con = sqlite3.connect(path)
    indexes = {r[0] for r in con.execute("select name from sqlite_master where type='index'")}
    assert "trials_run_number" in indexes and "trials_run_index" not in indexes
    con.close()


def _run(s: Store, unit: str, score: float, *, simulated: bool = False, job: str = "j") -> int:
    rid = s.start_run(job=job, world=WORLD, backend="gloo", model_graph=model(CNN),
                      topology_graph=cluster(2), space_facts={}, unit=unit, simulated=simulated)
    s.finish_run(rid, best_config={"streams": 2}, best_score=score, default_score=score / 2)
    return rid


def test_best_groups_runs_by_unit_and_limits_each_group(store):
    a = _run(store, "samples/s", 100.0)
    b = _run(store, "samples/s", 300.0)
    c = _run(store, "it/s", 5.0)
    d = _run(store, "samples/s", 900.0, simulated=True)
    e = _run(store, "simulated it/s", 7.0)
    assert [r["id"] for r in store.best()] == [b, a, c, d, e]
    assert [r["id"] for r in store.best(limit=1)] == [b, c, d, e]
    assert [r["id"] for r in store.best(unit="it/s")] == [c]
    assert store.units() == ["samples/s", "it/s", "simulated samples/s", "simulated it/s"]
    with pytest.raises(StoreError, match="unit must be one of"):
        store.best(unit="furlongs")


def test_start_run_checks_the_unit_and_a_simulated_run_is_simulated(store):
    with pytest.raises(StoreError, match="unit must be one of .*'samples/s'"):
        store.start_run(job="j", world=WORLD, backend="gloo", model_graph=None,
                        topology_graph=None, space_facts={}, unit="img/s")
    rid = store.start_run(job="j", world=WORLD, backend="sim", model_graph=None,
                          topology_graph=None, space_facts={}, simulated=True)
    assert store.run(rid)["unit"] == "simulated samples/s"
    rid = store.start_run(job="j", world=WORLD, backend="gloo", model_graph=None,
                          topology_graph=None, space_facts={}, unit="it/s")
    assert store.run(rid)["unit"] == "it/s"


def test_finish_run_records_the_spreads(store):
    rid = store.start_run(job="j", world=WORLD, backend="gloo", model_graph=None,
                          topology_graph=None, space_facts={})
    store.finish_run(rid, best_config={"streams": 1}, best_score=10.0, default_score=8.0,
                     best_spread=0.5, default_spread=1.25)
    run = store.run(rid)
    assert (run["best_spread"], run["default_spread"]) == (0.5, 1.25)
    with pytest.raises(StoreError, match="standard deviation"):
        store.finish_run(rid, best_config=None, best_score=None, best_spread=-1.0)


def test_add_trial_takes_number_and_still_the_old_index(store):
    rid = store.start_run(job="j", world=WORLD, backend="gloo", model_graph=None,
                          topology_graph=None, space_facts={})
    store.add_trial(rid, number=1, technique="grid", config={}, iterations=2, score=2.0)
    store.add_trial(rid, index=0, technique="grid", config={}, iterations=2, score=1.0)  # deprecated
    assert [(t["number"], t["score"]) for t in store.trials(rid)] == [(0, 1.0), (1, 2.0)]
    with pytest.raises(StoreError, match="number"):
        store.add_trial(rid, technique="grid", config={}, iterations=2, score=1.0)
    with pytest.raises(StoreError, match="number=3 and index=4"):
        store.add_trial(rid, number=3, index=4, technique="grid", config={}, iterations=2,
                        score=1.0)


def test_latest_is_the_newest_run(store):
    first = _run(store, "it/s", 1.0)
    assert store.run("latest")["id"] == first
    second = _run(store, "it/s", 2.0)
    assert store.run("latest")["id"] == second and store.run(" Latest ")["id"] == second
    assert len(store.trials("latest")) == 0
