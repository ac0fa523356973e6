"""A store a team shares (issue 42): PostgreSQL's own cases (credentials, a server that
cannot be reached, a database that is not ours, values bound as parameters), a session
whose store is down, and SQLite refused on a network file system."""

from __future__ import annotations

# own world: a job whose store goes down, as a user launches it

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.store import Store, StoreError, StoreUnreachable
from autotune.store import mounts
from autotune.store.connection import CONNECT_TIMEOUT_S
from postgres_server import PASSWORD
from store_helpers import CNN, WORLD, add_run, cluster, model
import zygote

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _every_text(store: Store) -> str:
    """Every value of every table, as text."""
    out = []
    for table in ("meta", "runs", "trials", "graphs", "calibrations"):
        out += [json.dumps(r, default=str) for r in store.connection.read(f"select * from {table}")]
    return "\n".join(out)


# ------------------------------------------------------------------ credentials
def test_the_password_is_never_shown_or_stored(postgres, tmp_path):
    url = postgres.database()
    with Store(url) as store:
        add_run(store, model(CNN), cluster(2), {"streams": 2}, job="secret-check")
        assert PASSWORD not in repr(store) and PASSWORD not in store.name
        assert store.name.startswith("postgresql://") and "***" in store.name
        assert PASSWORD not in _every_text(store)
    outputs = {}
    for args in (["db", "runs"], ["db", "show", "1"], ["db", "show", "99"], ["db", "best"],
                 ["report", "1"]):
        outputs[" ".join(args)] = r = CliRunner().invoke(cli, [*args, "--db", url]).output
        assert PASSWORD not in r, (args, r)
    assert "no run 99 in postgresql://autotune_test:***@" in outputs["db show 99"]
    assert "secret-check" in outputs["db runs"] and "secret-check" in outputs["db show 1"]


def test_the_password_may_come_from_the_environment_or_a_password_file(postgres, tmp_path,
                                                                       monkeypatch):
    url = postgres.database()
    bare = url.replace(f":{PASSWORD}@", "@")
    assert PASSWORD not in bare
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    with pytest.raises(StoreUnreachable, match="cannot (log in to|reach) the store") as err:
        Store(bare)
    assert PASSWORD not in str(err.value)
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    with Store(bare) as store:
        assert store.runs() == []
    monkeypatch.delenv("PGPASSWORD")
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"{postgres.host}:{postgres.port}:*:autotune_test:{PASSWORD}\n")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    with Store(bare) as store:
        assert store.runs() == []


def test_messages_hide_every_form_of_password(tmp_path):
    from autotune.store.location import shown

    assert shown("postgresql://u:pw1@h/db") == "postgresql://u:***@h/db"
    assert "pw2" not in shown("postgresql://h/db?password=pw2")
    assert "pw3" not in shown("postgresql://u:pw3@h:notaport/db")
    assert "pw4" not in shown("postgresql://u:pw4@x@h/db")  # an unescaped @ in it
    for bad in ("postgresql://u:pw5@h:notaport/db", "postgresql+asyncpg://u:pw5@h/db",
                "mysql://u:pw5@h/db"):
        with pytest.raises(StoreError) as err:
            Store(bad)
        assert "pw5" not in str(err.value)
    # a file name with URL characters is that file, not a URL's query
    odd = tmp_path / "a?mode=ro%41.db"
    Store(odd).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a?mode=ro%41.db"]


def test_a_wrong_password_or_a_dead_server_is_unreachable_quickly(postgres):
    url = postgres.database()
    wrong = url.replace(PASSWORD, "not-the-password")
    with pytest.raises(StoreUnreachable, match="cannot log in to the store") as err:
        Store(wrong)
    assert "not-the-password" not in str(err.value) and PASSWORD not in str(err.value)
    began = time.monotonic()
    with pytest.raises(StoreUnreachable, match="cannot reach the store postgresql://") as err:
        Store(f"postgresql://someone:{PASSWORD}@127.0.0.1:1/nothing")
    assert PASSWORD not in str(err.value)
    assert time.monotonic() - began < CONNECT_TIMEOUT_S + 5


# ------------------------------------------------------------------ not ours, never touched
def test_a_database_that_is_not_autotunes_is_left_untouched(postgres):
    url = postgres.database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("create table orders (id integer primary key, what text)")
        conn.execute("insert into orders values (1, 'tea')")
    with pytest.raises(StoreError, match="PostgreSQL database but not an autotune one"):
        Store(url)
    r = CliRunner().invoke(cli, ["db", "prune", "--older-than", "0s", "--yes", "--db", url])
    assert r.exit_code == 1 and "not an autotune one" in r.output
    with psycopg.connect(url) as conn:
        tables = {r[0] for r in conn.execute(
            "select tablename from pg_tables where schemaname = 'public'")}
        assert tables == {"orders"}
        assert conn.execute("select what from orders").fetchall() == [("tea",)]


def test_reading_never_makes_a_store_of_an_empty_database(postgres):
    url = postgres.database()
    r = CliRunner().invoke(cli, ["db", "runs", "--db", url])
    assert r.exit_code == 1 and "empty PostgreSQL database (no tables)" in r.output
    with psycopg.connect(url) as conn:
        assert conn.execute("select count(*) from pg_tables where schemaname = 'public'"
                            ).fetchone()[0] == 0


# ------------------------------------------------------------------ parameters, not text
@pytest.mark.parametrize("job", ["x'; drop table runs; --", "100% of ?s and ''quotes''",
                                 'say "hi" %s %(x)s $1'])
def test_values_are_bound_never_formatted(store, job):
    rid = add_run(store, model(CNN), cluster(2), {"streams": 2}, job=job)
    assert store.run(rid)["job"] == job
    assert [r["job"] for r in store.runs(job=job)] == [job]
    # a literal % and ? in the SQL itself, beside bound values
    rows = store.query("select job, '50% ?' as lit from runs where job = ? and id = ?",
                       [job, rid])
    assert rows == [{"job": job, "lit": "50% ?"}]
    assert len(store.runs()) == 1


# ------------------------------------------------------------------ a session whose store is down
@pytest.mark.slow
def test_a_session_whose_store_is_down_trains_warns_once_and_keeps_its_run_locally(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch, autotune\n"
        "m = torch.nn.Linear(8, 2)\n"
        "opt = torch.optim.SGD(m.parameters(), 0.1)\n"
        f"with autotune.session(m, db='postgresql://u:{PASSWORD}@127.0.0.1:1/x') as session:\n"
        "    for i in range(6):\n"
        "        opt.zero_grad(); m(torch.randn(4, 8)).sum().backward(); session.step(); opt.step()\n"
        "print('TRAINED', flush=True)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "default"}

    def train() -> str:
        proc = zygote.run([sys.executable, "-m", "autotune.cli", "launch", "--workers",
                               "1", str(script)], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path, env=env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0 and "TRAINED" in out, out[-3000:]
        return out

    out = train()
    assert out.count("cannot reach the store postgresql://u:***@127.0.0.1:1/x") == 1, out
    assert PASSWORD not in out
    assert "recorded in ./autotune.db instead" in out
    with Store(tmp_path / "autotune.db", create=False) as local:
        assert [r["status"] for r in local.runs()] == ["finished"]
    # a store that cannot be used at all (a file that is not autotune's) does not stop it
    # either: it warns, and the file is left as it was
    foreign = tmp_path / "foreign.db"
    foreign.write_text("not a database")
    script.write_text(script.read_text().replace(
        f"postgresql://u:{PASSWORD}@127.0.0.1:1/x", str(foreign)))
    out = train()
    assert "foreign.db is not an autotune database" in out and "not recorded" in out, out
    assert foreign.read_text() == "not a database"


# ------------------------------------------------------------------ network file systems
def test_an_sqlite_store_on_a_network_file_system_is_refused_unless_forced(tmp_path,
                                                                          monkeypatch):
    # this machine's own table: the test directory is on a local file system
    assert mounts.fs_type(tmp_path) not in (None, *mounts.NETWORK_FS)
    assert mounts.network_fs(tmp_path) is None
    # the same directory as an NFS client sees it (a mount table in the kernel's format)
    share = tmp_path / "share"
    share.mkdir()
    table = tmp_path / "mountinfo"
    table.write_text(Path(mounts.MOUNTINFO).read_text() +
                     f"900 27 0:99 / {str(share).replace(' ', chr(92) + '040')} rw,relatime "
                     "shared:1 - nfs4 fileserver:/export/team rw,vers=4.2\n")
    monkeypatch.setattr(mounts, "MOUNTINFO", str(table))
    assert mounts.network_fs(share / "sub") == "nfs4" and mounts.network_fs(tmp_path) is None
    with pytest.raises(StoreError, match=r"network file system \(nfs4\).*postgresql") as err:
        Store(share / "runs.db")
    assert "\n" not in str(err.value) and not (share / "runs.db").exists()
    r = CliRunner().invoke(cli, ["db", "runs", "--db", str(share / "runs.db")])
    assert r.exit_code == 1 and "AUTOTUNE_DB_ALLOW_NETWORK_FS=1" in r.output
    with Store(share / "runs.db", allow_network_fs=True) as store:
        assert store.runs() == []
    monkeypatch.setenv("AUTOTUNE_DB_ALLOW_NETWORK_FS", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Store(share / "runs.db").close()


def test_world_is_stored_as_given_on_both_databases(store):
    rid = add_run(store, model(CNN), cluster(2), {"streams": 2})
    assert store.run(rid)["world"] == WORLD


# ------------------------------------------------------------------ one schema, plain SQLite
def test_both_databases_have_one_schema_and_sqlite_stays_plain(postgres, tmp_path):
    import sqlalchemy as sa
    import sqlite_utils

    path = tmp_path / "plain.db"
    stores = [Store(path), Store(postgres.database())]
    try:
        columns = []
        for store in stores:
            add_run(store, model(CNN), cluster(2), {"streams": 2}, job="plain")
            inspector = sa.inspect(store.connection.engine)
            columns.append({t: [c["name"] for c in inspector.get_columns(t)]
                            for t in ("meta", "runs", "trials", "graphs", "calibrations")})
            indexes = {i["name"] for i in inspector.get_indexes("runs")}
            assert {"runs_finished", "runs_created", "runs_job"} <= indexes
        assert columns[0] == columns[1]
        assert "kept_from" in columns[0]["runs"] and "number" in columns[0]["trials"]
    finally:
        for store in stores:
            store.close()
    # the SQLite file is plain SQLite: sqlite-utils (and so Datasette) reads it
    db = sqlite_utils.Database(path)
    assert {"meta", "runs", "trials", "graphs", "calibrations"} <= set(db.table_names())
    assert [r["job"] for r in db.query("select job from runs")] == ["plain"]
    assert db["runs"].count == 1 and db["graphs"].count == 2
