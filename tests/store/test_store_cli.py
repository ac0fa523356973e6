"""``autotune db ...`` and ``autotune report`` through click's CliRunner."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.store import Store
from autotune.store.sqltext import sql
from autotune.store.summary import summarize
from store_helpers import CNN, TRANSFORMER, WORLD, cluster, model
import zygote

TECHNIQUES = ["grid", "bayes", "pbt", "hyperband"]


def _fill(store: Store, job: str, g, t, scores: list[float | None]) -> int:
    rid = store.start_run(job=job, world=WORLD, backend="gloo", model_graph=g, topology_graph=t,
                          space_facts={"k_max": 0})
    best, best_cfg = None, None
    for i, s in enumerate(scores):
        cfg = {"streams": 1 + i % 8, "chunk_bytes": 1 << (18 + i % 6), "transport": "allreduce"}
        store.add_trial(rid, index=i, technique=TECHNIQUES[i % 4], config=cfg, iterations=3, score=s,
                        error=None if s is not None else "diverged", wall_time=0.1 * i)
        if s is not None and (best is None or s > best):
            best, best_cfg = s, cfg
    store.finish_run(rid, status="finished", best_config=best_cfg, best_score=best,
                     default_score=scores[0], best_iterations=6, default_iterations=6)
    return rid


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def db(request, tmp_path_factory):
    """Three runs, in an SQLite file and in a PostgreSQL database: every command on both."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("cli") / "runs.db"
    else:
        path = request.getfixturevalue("postgres").database()
    return _three_runs(path)


def _three_runs(path):
    with Store(path) as s:
        _fill(s, "cnn-a", model(CNN), cluster(2), [10.0, 12.0, None, 15.0, 11.0, 16.0, 14.0, 9.0])
        _fill(s, "cnn-b", model(CNN), cluster(2), [10.0, 13.0, 11.0])
        _fill(s, "bert", model(TRANSFORMER), cluster(4), [50.0, 40.0, 70.0, 65.0])
    return path


def run(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_runs_table_and_json(db):
    r = run("db", "runs", "--db", db)
    assert r.exit_code == 0, r.output
    assert "cnn-a" in r.output and "bert" in r.output and "1.60x" in r.output
    r = run("db", "runs", "--db", db, "--json")
    rows = json.loads(r.output)
    assert [x["job"] for x in rows] == ["bert", "cnn-b", "cnn-a"]
    assert [x["trials"] for x in rows] == [4, 3, 8]
    rows = json.loads(run("db", "runs", "--db", db, "--json", "--job", "bert").output)
    assert [x["job"] for x in rows] == ["bert"]


def test_show_and_trials(db):
    r = run("db", "show", "1", "--db", db)
    assert r.exit_code == 0 and "kept configuration" in r.output and "cnn-a" in r.output
    shown = json.loads(run("db", "show", "1", "--db", db, "--json").output)
    assert shown["best_score"] == 16.0 and shown["trials"] == 8 and shown["best_config"]["streams"] == 6
    trials = json.loads(run("db", "trials", "1", "--db", db, "--json").output)
    assert [t["score"] for t in trials] == [10.0, 12.0, None, 15.0, 11.0, 16.0, 14.0, 9.0]
    r = run("db", "trials", "1", "--db", db)
    assert "diverged" in r.output and "hyperband" in r.output


def test_best_by_model_and_like(db):
    rows = json.loads(run("db", "best", "--db", db, "--json").output)
    assert [x["job"] for x in rows] == ["bert", "cnn-a", "cnn-b"]
    fp = rows[1]["model_fp"]
    rows = json.loads(run("db", "best", "--db", db, "--json", "--model", fp[:10]).output)
    assert [x["job"] for x in rows] == ["cnn-a", "cnn-b"]
    rows = json.loads(run("db", "best", "--db", db, "--json", "--like", "3").output)
    assert [x["job"] for x in rows] == ["bert"]
    r = run("db", "best", "--db", db)
    assert r.exit_code == 0 and "streams=6" in r.output


def test_similar(db):
    near = json.loads(run("db", "similar", "1", "--db", db, "--json", "-k", "2").output)
    assert [(x["job"], x["distance"]) for x in near][0] == ("cnn-b", 0.0)
    assert near[1]["job"] == "bert" and near[1]["distance"] > 0
    assert "distance" in run("db", "similar", "1", "--db", db).output


def test_export_csv_and_json(db, tmp_path):
    r = run("db", "export", "1", "--db", db, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.output)))
    assert len(rows) == 8 and rows[5]["score"] == "16.0" and rows[5]["config.streams"] == "6"
    assert rows[2]["score"] == "" and rows[2]["error"] == "diverged"
    out = tmp_path / "run1.json"
    r = run("db", "export", "1", "--db", db, "--format", "json", "--out", out)
    data = json.loads(out.read_text())
    assert data["run"]["job"] == "cnn-a" and len(data["trials"]) == 8


def test_clear_errors_for_missing_foreign_and_unknown(db, tmp_path):
    absent = tmp_path / "absent.db"
    r = run("db", "runs", "--db", absent)
    assert r.exit_code == 1 and "no autotune database" in r.output and not absent.exists()
    foreign = tmp_path / "foreign.db"
    foreign.write_text("hello")
    r = run("db", "runs", "--db", foreign)
    assert r.exit_code == 1 and "not an autotune database" in r.output
    assert foreign.read_text() == "hello"
    r = run("db", "show", "99", "--db", db)
    assert r.exit_code == 1 and "no run 99" in r.output


READ_COMMANDS = [["db", "runs"], ["db", "show", "1"], ["db", "trials", "1"], ["db", "best"],
                 ["db", "similar", "1"], ["db", "export", "1"],
                 ["db", "prune", "--older-than", "30d"], ["report", "1", "--out", "r.png"]]


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_an_empty_or_missing_file_is_refused_and_never_created(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    r = run(*command, "--db", empty)
    assert r.exit_code == 1, r.output
    assert "empty.db is empty (0 bytes), not an autotune database" in r.output
    r = run(*command, "--db", tmp_path / "absent.db")
    assert r.exit_code == 1 and "no autotune database at" in r.output
    assert empty.read_bytes() == b""
    assert [p.name for p in tmp_path.iterdir()] == ["empty.db"]  # no -wal, -shm, r.png, absent.db


def _as_other_user(*args) -> tuple[int, str]:
    """Run ``autotune ARGS`` so that file permissions apply: as ``nobody`` when we are root
    (root ignores them), else in this process."""
    if os.geteuid() != 0:
        r = run(*args)
        return r.exit_code, r.output
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
           "-m", "autotune.cli", *map(str, args)]
    p = zygote.run(cmd, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "HOME": tempfile.gettempdir()})
    return p.returncode, p.stdout + p.stderr


@pytest.fixture
def shared_dir():
    """A directory another user can reach (pytest's tmp_path is private to root)."""
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None or zygote.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "true"],
                capture_output=True).returncode != 0:
            pytest.skip("as root this needs setpriv to drop to another user")
    path = Path(tempfile.mkdtemp(prefix="autotune-ro-"))
    path.chmod(0o777)
    yield path
    for p in [path, *path.rglob("*")]:
        p.chmod(0o777 if p.is_dir() else 0o666)
    shutil.rmtree(path)


def test_a_read_only_file_or_directory_says_read_only(tmp_path, shared_dir):
    db = _three_runs(tmp_path / "runs.db")

    def copy(to: Path) -> Path:
        to.mkdir(mode=0o777)
        to.chmod(0o777)
        src, dst = sqlite3.connect(db), sqlite3.connect(to / "runs.db")
        src.backup(dst)
        src.close()
        dst.close()
        return to / "runs.db"

    # a read-only file in a writable directory: reading works, writing says read-only
    ro_file = copy(shared_dir / "file")
    ro_file.chmod(0o444)
    before = ro_file.read_bytes()
    code, out = _as_other_user("db", "runs", "--json", "--db", ro_file)
    assert code == 0 and len(json.loads(out)) == 3, out
    code, out = _as_other_user("db", "prune", "--older-than", "0s", "--yes", "--db", ro_file)
    assert code == 1 and "runs.db is read-only here" in out and "corrupt" not in out, out
    assert ro_file.read_bytes() == before
    # a read-only directory: SQLite cannot even make its -shm file beside it to read
    ro_dir = copy(shared_dir / "dir")
    before = ro_dir.read_bytes()
    ro_dir.chmod(0o644)
    ro_dir.parent.chmod(0o555)
    code, out = _as_other_user("db", "runs", "--db", ro_dir)
    assert code == 1 and "runs.db is read-only here" in out and "corrupt" not in out, out
    assert f"its directory {ro_dir.parent}" in out and "Traceback" not in out
    assert ro_dir.read_bytes() == before and sorted(os.listdir(ro_dir.parent)) == ["runs.db"]


def test_db_defaults_to_the_environment(db, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(db))
    assert len(json.loads(run("db", "runs", "--json").output)) == 3


def test_prune(store_at):
    path = store_at
    with Store(path) as s:
        _fill(s, "old", model(CNN), cluster(2), [1.0])
        _fill(s, "new", model(CNN), cluster(2), [1.0])
        s.connection.write(lambda c: sql(
            c, "update runs set created = ? where job = 'old'",
            [(datetime.now(timezone.utc) - timedelta(days=45)).isoformat(timespec="milliseconds")]))
    assert "would delete 1 run" in run("db", "prune", "--db", path, "--older-than", "30d", "--dry-run").output
    r = run("db", "prune", "--db", path, "--older-than", "30d", "--json", "--yes")
    assert json.loads(r.output) == {"runs": 1, "dry_run": False}
    assert [x["job"] for x in json.loads(run("db", "runs", "--db", path, "--json").output)] == ["new"]
    r = run("db", "prune", "--db", path, "--older-than", "soon")
    assert r.exit_code == 2 and "30d" in r.output


# ------------------------------------------------------------------ report
def test_summary_counts_new_bests_per_technique():
    trials = [{"technique": t, "score": s} for t, s in
              [("grid", 1.0), ("bayes", 3.0), ("grid", 2.0), ("pbt", None), ("bayes", 4.0), ("pbt", 5.0)]]
    s = summarize(trials)
    assert s["trials"] == {"grid": 2, "bayes": 2, "pbt": 2}
    assert s["new_bests"] == {"bayes": 2, "grid": 1, "pbt": 1}
    assert s["best_so_far"] == [1.0, 3.0, 3.0, 3.0, 4.0, 5.0]
    assert s["new_best_at"] == [0, 1, 4, 5] and s["failed"] == 1


def test_report_png_and_html(db, tmp_path):
    png = tmp_path / "r.png"
    r = run("report", "1", "--db", db, "--out", png)
    assert r.exit_code == 0, r.output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    page = tmp_path / "r.html"
    assert run("report", "1", "--db", db, "--out", page).exit_code == 0
    text = page.read_text()
    assert "data:image/png;base64," in text and "hyperband" in text and "diverged" in text
    r = run("report", "1", "--db", db, "--out", tmp_path / "r.pdf")
    assert r.exit_code == 2 and ".png or an .html" in r.output


def test_export_help_says_what_json_does():
    """Issue 28: ``db export`` has no table; its --json help says what it does."""
    out = CliRunner().invoke(cli, ["db", "export", "--help"], terminal_width=200).output
    line = " ".join(out.split("--json", 2)[-1].split())
    assert "instead of a table" not in out
    assert "--format json" in line and "standard output" in line and "--out" in line
