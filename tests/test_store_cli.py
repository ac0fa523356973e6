"""``autotune db ...`` and ``autotune report`` through click's CliRunner."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.store import Store
from autotune.store.report import summarize
from store_helpers import CNN, TRANSFORMER, WORLD, cluster, model

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
                     default_score=scores[0])
    return rid


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "runs.db"
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
    assert r.exit_code == 0 and "best configuration" in r.output and "cnn-a" in r.output
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


def test_db_defaults_to_the_environment(db, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(db))
    assert len(json.loads(run("db", "runs", "--json").output)) == 3


def test_prune(tmp_path):
    path = tmp_path / "p.db"
    with Store(path) as s:
        _fill(s, "old", model(CNN), cluster(2), [1.0])
        _fill(s, "new", model(CNN), cluster(2), [1.0])
    con = sqlite3.connect(path)
    con.execute("update runs set created = ? where job = 'old'",
                [(datetime.now(timezone.utc) - timedelta(days=45)).isoformat(timespec="milliseconds")])
    con.commit()
    con.close()
    assert "would delete 1 run" in run("db", "prune", "--db", path, "--older-than", "30d", "--dry-run").output
    r = run("db", "prune", "--db", path, "--older-than", "30d", "--json")
    assert json.loads(r.output) == {"runs": 1, "dry_run": False}
    assert [x["job"] for x in json.loads(run("db", "runs", "--db", path, "--json").output)] == ["new"]
    r = run("db", "prune", "--db", path, "--older-than", "soon")
    assert r.exit_code == 1 and "30d" in r.output


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
