"""Schema v5 (issue 28): a run's owner (host, pid), ``abandoned`` runs (running, owner
gone on this host), closing and pruning them."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

from click.testing import CliRunner

from autotune.cli import cli
from autotune.store import Store, schema
from autotune.store.rows import host
from autotune.store.sqltext import sql
from store_helpers import CNN, WORLD, cluster, model, old_store
import zygote


def _start(s: Store, job: str = "j") -> int:
    return s.start_run(job=job, world=WORLD, backend="gloo", model_graph=model(CNN),
                       topology_graph=cluster(2), space_facts={})


def _dead_pid() -> int:
    p = zygote.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _owned(path, rid: int, pid: int, where: str | None = None) -> None:
    with Store(path) as s:
        s.connection.write(lambda c: sql(c, "update runs set owner_pid = ?, owner_host = ? "
                                            "where id = ?", [pid, where or host(), rid]))


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_a_run_records_its_owner(store_at):
    with Store(store_at) as s:
        r = s.run(_start(s))
    assert r["owner_host"] == host() and r["owner_pid"] == os.getpid()
    assert r["status"] == "running"


def test_a_v4_store_migrates_to_v5_with_no_owner(tmp_path):
    path = tmp_path / "v4.db"
    old_store(path, 4, "insert into runs (id, created, status, job, model_fp, topology_fp, "
              "simulated, world, space_facts) values (1, '2024-01-01T00:00:00.000+00:00', "
              "'running', 'old', 'aa', 'bb', 0, '{}', '{}')")
    with Store(path) as s:
        assert s.schema_version == schema.SCHEMA_VERSION >= 5
        r = s.run(1)
        # no owner recorded: never judged abandoned
        assert r["owner_host"] is None and r["owner_pid"] is None and r["status"] == "running"
        assert s.runs(status="abandoned") == []
        rid = _start(s)
        assert s.run(rid)["owner_pid"] == os.getpid()
    con = sqlite3.connect(path)
    assert dict(con.execute("select key, value from meta"))["schema_version"] == str(schema.SCHEMA_VERSION)
    con.close()


def test_a_running_run_whose_owner_is_gone_shows_abandoned(store_at):
    path = store_at
    with Store(path) as s:
        alive, dead, remote, done = (_start(s, j) for j in ("alive", "dead", "remote", "done"))
        s.add_trial(dead, number=0, technique="grid", config={}, iterations=2, score=1.0)
        s.finish_run(done, best_config=None, best_score=None)
    _owned(path, dead, _dead_pid())
    _owned(path, remote, _dead_pid(), where="some-other-host")
    _owned(path, done, _dead_pid())
    with Store(path) as s:
        assert {r["job"]: r["status"] for r in s.runs()} == {
            "alive": "running", "dead": "abandoned", "remote": "running", "done": "finished"}
        assert [r["id"] for r in s.runs(status="abandoned")] == [dead]
        assert [r["id"] for r in s.runs(status="running")] == [remote, alive]
        assert s.run(dead)["status"] == "abandoned"
    out = run("db", "runs", "--db", path, "--status", "abandoned", "--json")
    assert out.exit_code == 0 and [r["id"] for r in json.loads(out.output)] == [dead]
    assert "abandoned" in run("db", "runs", "--db", path).output
    # closing keeps the trials and sets a finish time
    out = run("db", "close", "--db", path, "--abandoned", "--json")
    assert json.loads(out.output) == [{"run": dead, "was": "abandoned", "status": "aborted",
                                       "closed": True}]
    with Store(path) as s:
        r = s.run(dead)
        assert r["status"] == "aborted" and r["finished"] and len(s.trials(dead)) == 1
        assert s.close_run(done) == "finished"  # a closed run is left as it is
    out = run("db", "close", "--db", path, str(done))
    assert "already finished" in out.output
    assert run("db", "close", "--db", path).exit_code == 2


def test_prune_by_status(store_at):
    path = store_at
    with Store(path) as s:
        keep, gone = _start(s, "keep"), _start(s, "gone")
        s.add_trial(gone, number=0, technique="grid", config={}, iterations=2, score=1.0)
    _owned(path, gone, _dead_pid())
    assert "would delete 1 run abandoned" in run(
        "db", "prune", "--db", path, "--status", "abandoned", "--dry-run").output
    out = run("db", "prune", "--db", path, "--status", "abandoned", "--yes", "--json")
    assert json.loads(out.output) == {"runs": 1, "dry_run": False}
    with Store(path) as s:
        assert [r["id"] for r in s.runs()] == [keep]
        assert s.query("select count(*) n from trials") == [{"n": 0}]
    assert run("db", "prune", "--db", path).exit_code == 2
    out = run("db", "prune", "--db", path, "--status", "running", "--older-than", "1d", "--yes")
    assert "deleted 0 runs older than 1d and running" in out.output
