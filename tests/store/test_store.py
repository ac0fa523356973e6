"""The results store: schema, migration, round trips, and foreign or corrupt files."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

from autotune.store import Store, StoreError
from autotune.store import schema
from store_helpers import CNN, TRANSFORMER, WORLD, add_run, cluster, model


def test_new_file_gets_the_current_schema(tmp_path):
    path = tmp_path / "new.db"
    with Store(path) as s:
        assert s.schema_version == schema.SCHEMA_VERSION
    con = sqlite3.connect(path)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    assert {"meta", "runs", "trials", "graphs"} <= tables
    meta = dict(con.execute("select key, value from meta"))
    assert meta == {"application": "autotune", "schema_version": str(schema.SCHEMA_VERSION)}
    indexes = {r[0] for r in con.execute("select name from sqlite_master where type='index'")}
    assert {"runs_created", "runs_finished", "trials_run_number"} <= indexes
    assert con.execute("pragma journal_mode").fetchone()[0] == "wal"
    con.close()


def test_default_path_is_env_then_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    with Store() as s:
        assert s.path.resolve() == (tmp_path / "autotune.db").resolve()
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "env.db"))
    with Store() as s:
        assert s.path == tmp_path / "env.db"
    assert (tmp_path / "env.db").exists()


V1_SQL = """
CREATE TABLE [meta] ([key] TEXT PRIMARY KEY, [value] TEXT);
INSERT INTO meta VALUES ('application', 'autotune'), ('schema_version', '1');
CREATE TABLE [runs] ([id] INTEGER PRIMARY KEY, [created] TEXT, [status] TEXT, [job] TEXT,
  [autotune_version] TEXT, [torch_version] TEXT, [workers] INTEGER, [servers] INTEGER,
  [machines] INTEGER, [backend] TEXT, [model_fp] TEXT, [topology_fp] TEXT,
  [best_config] TEXT, [best_score] FLOAT, [default_score] FLOAT);
CREATE TABLE [trials] ([id] INTEGER PRIMARY KEY, [run] INTEGER REFERENCES [runs]([id]),
  [index] INTEGER, [technique] TEXT, [config] TEXT, [iterations] INTEGER, [score] FLOAT,
  [error] TEXT, [wall_time] FLOAT);
CREATE TABLE [graphs] ([fingerprint] TEXT PRIMARY KEY, [kind] TEXT, [graph] TEXT);
CREATE INDEX [trials_run_index] ON [trials] ([run], [index]);
"""


def test_migrates_a_v1_file_forward_keeping_its_rows(tmp_path):
    from autotune.store.fingerprint import fingerprint, to_json

    path = tmp_path / "old.db"
    g = model(CNN)
    fp = fingerprint(g)
    con = sqlite3.connect(path)
    con.executescript(V1_SQL)
    con.execute("insert into graphs values (?, 'model', ?)", [fp, to_json(g)])
    con.execute(
        "insert into runs values (7, '2024-01-02T03:04:05.000+00:00', 'finished', 'old-job', "
        "'0.0.1', '2.3.0', 4, 1, 2, 'gloo', ?, ?, ?, 12.5, 10.0)",
        [fp, fp, json.dumps({"streams": 3})])
    con.execute("insert into trials values (1, 7, 0, 'grid', ?, 5, 12.5, NULL, 0.25)",
                [json.dumps({"streams": 3})])
    con.commit()
    con.close()

    with Store(path) as s:
        assert s.schema_version == schema.SCHEMA_VERSION
        run = s.run(7)
        assert run["job"] == "old-job" and run["best_config"] == {"streams": 3}
        assert run["world"] == {"workers": 4, "servers": 1, "machines": 2}
        assert run["space_facts"] == {} and run["simulated"] is False
        assert [t["score"] for t in s.trials(7)] == [12.5]
        # graph sizes were backfilled from the stored JSON
        row = s.connection.read("select nodes, edges from graphs where fingerprint = ?", [fp])[0]
        assert (row["nodes"], row["edges"]) == (g.number_of_nodes(), g.number_of_edges())
        # the migrated file takes new runs
        rid = add_run(s, g, cluster(2), {"streams": 4}, 13.0)
        assert rid == 8 and [r["id"] for r in s.best(model=fp)] == [8, 7]
    con = sqlite3.connect(path)
    assert dict(con.execute("select key, value from meta"))["schema_version"] == str(schema.SCHEMA_VERSION)
    assert "runs_finished" in {r[0] for r in con.execute("select name from sqlite_master where type='index'")}
    con.close()
    with Store(path) as s:  # opening again is a no-op
        assert s.schema_version == schema.SCHEMA_VERSION and len(s.runs()) == 2


def test_a_newer_schema_is_refused_untouched(tmp_path):
    path = tmp_path / "future.db"
    Store(path).close()
    con = sqlite3.connect(path)
    con.execute("update meta set value = '99' where key = 'schema_version'")
    con.commit()
    con.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="newer"):
        Store(path)
    assert path.read_bytes() == before


def test_round_trip_of_runs_and_trials(store):
    g, t = model(TRANSFORMER), cluster(3, bandwidth="25G")
    rid = store.start_run(job="bert", world={**WORLD, "workers_per_machine": 2}, backend="gloo",
                          model_graph=g, topology_graph=t,
                          space_facts={"k_max": 2, "root_candidates": (0, 1)}, simulated=True)
    run = store.run(rid)
    assert run["status"] == "running" and run["job"] == "bert" and run["simulated"] is True
    assert run["world"]["workers_per_machine"] == 2 and run["workers"] == 4 and run["machines"] == 2
    assert run["space_facts"] == {"k_max": 2, "root_candidates": [0, 1]}
    assert run["autotune_version"] and run["torch_version"] and run["created"]
    configs = [{"streams": s, "chunk_bytes": 1 << (16 + s), "transport": "allreduce"} for s in range(1, 6)]
    for i, c in enumerate(configs):
        store.add_trial(rid, index=i, technique=["grid", "bayes"][i % 2], config=c,
                        iterations=4, score=None if i == 3 else 100.0 + i,
                        error="timed out" if i == 3 else None, wall_time=0.5 * i)
    store.finish_run(rid, status="finished", best_config=configs[4], best_score=104.0,
                     default_score=100.0)
    trials = store.trials(rid)
    assert [t["config"] for t in trials] == configs
    assert [t["score"] for t in trials] == [100.0, 101.0, 102.0, None, 104.0]
    assert trials[3]["error"] == "timed out" and trials[2]["wall_time"] == 1.0
    assert [t["technique"] for t in trials] == ["grid", "bayes", "grid", "bayes", "grid"]
    run = store.run(rid)
    assert run["status"] == "finished" and run["best_config"] == configs[4]
    assert (run["best_score"], run["default_score"]) == (104.0, 100.0) and run["finished"]
    # the graphs are stored once, by fingerprint, and read back equal
    assert store.graph(run["model_fp"]).number_of_nodes() == g.number_of_nodes()
    assert store.graph(run["topology_fp"][:12]).number_of_edges() == 3
    assert store.trial_counts() == {rid: 5}


def test_a_non_finite_score_is_stored_as_a_failure(store):
    rid = add_run(store, model(CNN), cluster(2), {"streams": 1})
    store.add_trial(rid, index=0, technique="pbt", config={}, iterations=1, score=float("nan"))
    (t,) = store.trials(rid)
    assert t["score"] is None and "nan" in t["error"]


def test_queries_filter_and_order(store):
    cnn, tr = model(CNN), model(TRANSFORMER)
    a = add_run(store, cnn, cluster(2), {"streams": 2}, 10.0, job="a")
    b = add_run(store, cnn, cluster(2), {"streams": 4}, 30.0, job="b")
    c = add_run(store, tr, cluster(2), {"streams": 8}, 50.0, job="c")
    d = add_run(store, cnn, cluster(2), None, None, job="d", status="failed")
    assert [r["id"] for r in store.runs()] == [d, c, b, a]
    assert [r["id"] for r in store.runs(status="failed")] == [d]
    assert [r["id"] for r in store.runs(job="b")] == [b]
    fp = store.run(a)["model_fp"]
    assert [r["id"] for r in store.runs(model=fp[:8])] == [d, b, a]
    assert [r["id"] for r in store.best(model=fp)] == [b, a]
    assert [r["id"] for r in store.best(like=c)] == [c]
    assert [r["id"] for r in store.best()] == [c, b, a]
    assert [r["id"] for r in store.runs(limit=2)] == [d, c]


def test_bad_input_gives_clear_errors(store):
    with pytest.raises(StoreError, match="no run 42"):
        store.run(42)
    with pytest.raises(StoreError, match="no run 42"):
        store.add_trial(42, index=0, technique="grid", config={}, iterations=1, score=1.0)
    with pytest.raises(StoreError, match="no runs in"):
        store.run("latest")
    with pytest.raises(StoreError, match="a number or 'latest'"):
        store.run("newest")
    rid = add_run(store, model(CNN), cluster(2), {"streams": 1})
    with pytest.raises(StoreError, match="status"):
        store.finish_run(rid, status="done", best_config=None, best_score=None)
    with pytest.raises(StoreError, match="age"):
        store.prune("a while")


def test_prune_deletes_old_runs_trials_and_orphan_graphs(tmp_path):
    path = tmp_path / "p.db"
    with Store(path) as s:
        old = add_run(s, model(TRANSFORMER), cluster(5), {"streams": 1})
        s.add_trial(old, index=0, technique="grid", config={}, iterations=1, score=1.0)
        new = add_run(s, model(CNN), cluster(2), {"streams": 2})
        s.add_trial(new, index=0, technique="grid", config={}, iterations=1, score=1.0)
    long_ago = (datetime.now(timezone.utc) - timedelta(days=40)).isoformat(timespec="milliseconds")
    con = sqlite3.connect(path)
    con.execute("update runs set created = ? where id = ?", [long_ago, old])
    con.commit()
    con.close()
    with Store(path) as s:
        assert s.prune("30d", dry_run=True) == 1 and len(s.runs()) == 2
        assert s.prune("30d") == 1
        assert [r["id"] for r in s.runs()] == [new]
        assert s.connection.read("select count(*) n from trials")[0]["n"] == 1
        assert s.connection.read("select count(*) n from graphs")[0]["n"] == 2  # the new run's two graphs
        assert s.prune(timedelta(days=30)) == 0


# ------------------------------------------------------- foreign and corrupt files
def _refused(path, match):
    before = path.read_bytes()
    with pytest.raises(StoreError, match=match):
        Store(path)
    assert path.read_bytes() == before, "the file was modified"


def test_a_text_file_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 100)
    _refused(path, "not an SQLite file")


def test_a_foreign_sqlite_database_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("create table users (name text)")
    con.execute("insert into users values ('ada')")
    con.commit()
    con.close()
    _refused(path, "not an autotune one")
    con = sqlite3.connect(path)
    assert con.execute("pragma journal_mode").fetchone()[0] == "delete"
    con.close()


@pytest.fixture(scope="module")
def healthy_bytes(tmp_path_factory):
    """The bytes of a store with enough rows to span many pages (built once)."""
    path = tmp_path_factory.mktemp("healthy") / "h.db"
    with Store(path) as s:
        for i in range(12):
            rid = add_run(s, model(CNN if i % 2 else TRANSFORMER), cluster(2 + i % 4), {"streams": i + 1})
            for j in range(3):
                s.add_trial(rid, index=j, technique="grid", config={"streams": j + 1, "pad": "x" * 3000},
                            iterations=2, score=float(j))
    return path.read_bytes()


@pytest.mark.parametrize("damage", ["truncate", "scribble"])
def test_a_corrupt_store_is_refused_and_left_alone(tmp_path, healthy_bytes, damage):
    path = tmp_path / "broken.db"
    data = healthy_bytes
    assert len(data) > 8 * 4096
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        page = 4096
        path.write_bytes(data[: 2 * page] + bytes(range(256)) * (4 * page // 256) + data[6 * page:])
    _refused(path, "corrupt")


def test_missing_file_or_folder(tmp_path):
    with pytest.raises(StoreError, match="no autotune database"):
        Store(tmp_path / "absent.db", create=False)
    assert not (tmp_path / "absent.db").exists()
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "nowhere" / "a.db")
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with Store(empty) as s:  # an empty file is a new database
        assert s.runs() == []


def test_reading_never_turns_an_empty_file_into_a_store(tmp_path):
    """``create=False`` (the read commands) refuses a 0-byte file and an SQLite file
    without tables, and leaves both byte for byte as they were (no -wal/-shm either)."""
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(StoreError, match=r"empty \(0 bytes\), not an autotune database"):
        Store(empty, create=False)
    blank = tmp_path / "blank.db"
    con = sqlite3.connect(blank)
    con.execute("create table t (x)")
    con.execute("drop table t")
    con.commit()
    con.close()
    before = blank.read_bytes()
    assert before[:16] == b"SQLite format 3\x00"
    with pytest.raises(StoreError, match=r"empty SQLite database \(no tables\)"):
        Store(blank, create=False)
    assert empty.read_bytes() == b"" and blank.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blank.db", "empty.db"]
    with Store(blank) as s:  # writers (create=True) still start a store in it
        assert s.runs() == []


def test_query_reads_and_refuses_to_write(store):
    assert store.query("select count(*) n from runs") == [{"n": 0}]
    with pytest.raises(StoreError, match="for reading"):
        store.query("delete from runs")


def test_tuning_costs_are_this_hosts_newest_first(store):
    """What a search cost earlier runs on this machine (the next run's SearchCosts): this
    host's runs with a cost, newest first; another host's runs and runs without a cost left
    out."""
    import sqlalchemy as sa

    from autotune.schedule.stakes import SearchCosts
    from autotune.store.rows import host

    def run(cost: dict | None) -> int:
        rid = store.start_run(job="j", world=WORLD, backend="gloo", model_graph=model(CNN),
                              topology_graph=cluster(1, 2), space_facts={})
        store.finish_run(rid, best_config=None, best_score=None, tuning_cost=cost)
        return rid

    old = {"iterations": 20, "overhead_s": 1.0, "setup_s": 0.2, "loading_s": 1.5}
    new = {"iterations": 10, "overhead_s": 0.9, "setup_s": 0.1, "loading_s": 2.0}
    run(old), run(None), run(new)
    elsewhere = run({"iterations": 5, "overhead_s": 9.0, "setup_s": 9.0, "loading_s": 9.0})
    store.connection.write(lambda c: c.execute(
        sa.text("update runs set owner_host = 'elsewhere' where id = :i"), {"i": elsewhere}))
    costs = store.tuning_costs(host())
    assert costs == [new, old]
    measured = SearchCosts.from_cost(costs[0])
    assert measured.measured and measured.fixed_s == pytest.approx(2.1)
    assert measured.per_iteration_s == pytest.approx(0.08)
    # a process that imported the search's libraries pays the setup only
    assert SearchCosts.from_cost(costs[0], libraries_loaded=True).fixed_s == pytest.approx(0.1)
    # a run that ran no trial, or did not measure its start, measured nothing
    assert SearchCosts.from_cost({"iterations": 0, "setup_s": 0.1}) is None
    assert SearchCosts.from_cost({"iterations": 4, "overhead_s": 0.3}) is None
    assert store.tuning_costs("elsewhere")[0]["setup_s"] == 9.0
