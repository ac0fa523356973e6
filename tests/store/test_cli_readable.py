"""What a person reads from ``autotune db`` and ``autotune report`` (issue 19): human units,
tables that fit 80 columns, runs of different units never ranked together, usage errors
that exit 2, ``report latest``/``--json``, a prune that asks, the report's figure, and
``db export --optuna``."""

from __future__ import annotations

import io
import json
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.reports import db_command
from autotune.reports.report import TECHNIQUE_COLOURS, figure_png, report_json, technique_colour
from autotune.reports.tables import Column, build
from autotune.store import Store
from autotune.store.summary import summarize
from store_helpers import CNN, TRANSFORMER, WORLD, cluster, model

KEPT = {"streams": 4, "chunk_bytes": 64 << 20, "transport": "pushpull", "servers": 2,
        "intra": "scatter", "reduce_root": 1, "compression": "none"}


def _configs() -> list[dict]:
    out = []
    for i in range(9):
        out.append({"streams": 1 + i % 4, "chunk_bytes": 1 << (20 + i % 7),
                    "transport": ["allreduce", "pushpull"][i % 2], "servers": i % 3,
                    "intra": ["flat", "root", "scatter"][i % 3], "reduce_root": i % 2,
                    "compression": "none"})
    out.append(dict(KEPT))
    return out


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def db(request, tmp_path_factory):
    """Run 1: samples/s, big numbers, a failure, the kept config measured last. Run 2: it/s.
    Run 3: simulated samples/s with a higher score than any. Run 4: a failed 1-trial run.
    In an SQLite file and in a PostgreSQL database: every command on both."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("readable") / "runs.db"
    else:
        path = request.getfixturevalue("postgres").database()
    with Store(path) as s:
        r1 = s.start_run(job="bert-long-job-name", world=WORLD, backend="gloo",
                         model_graph=model(TRANSFORMER), topology_graph=cluster(4),
                         space_facts={"k_max": 2, "workers_per_machine": 2,
                                      "root_candidates": [0, 1], "allow_lossy": False,
                                      "max_streams": 16}, unit="samples/s")
        scores = [310_000.5, 322_000.0, None, 351_000.0, 340_000.0, 362_000.0, 300_000.0,
                  371_000.0, 365_000.0, 390_000.25]
        techs = ["grid", "bayes", "pbt", "hyperband", "grid", "bayes", "pbt", "hyperband",
                 "warm", "bayes"]
        for i, (cfg, sc, tech) in enumerate(zip(_configs(), scores, techs)):
            s.add_trial(r1, number=i, technique=tech, config=cfg, iterations=3, score=sc,
                        error=None if sc is not None else "server lost", wall_time=0.25 * i)
        s.finish_run(r1, best_config=KEPT, best_score=389_500.0, default_score=300_000.0,
                     best_spread=1_250.0, default_spread=900.0, best_iterations=12,
                     default_iterations=9)
        r2 = s.start_run(job="cnn", world=WORLD, backend="gloo", model_graph=model(CNN),
                         topology_graph=cluster(2), space_facts={}, unit="it/s")
        s.add_trial(r2, number=0, technique="grid", config={"streams": 2}, iterations=2, score=4.5)
        s.finish_run(r2, best_config={"streams": 2}, best_score=4.5, default_score=4.0)
        r3 = s.start_run(job="sim", world=WORLD, backend="simulated", model_graph=model(CNN),
                         topology_graph=cluster(8), space_facts={}, simulated=True)
        s.add_trial(r3, number=0, technique="grid", config={"streams": 8}, iterations=2,
                    score=9_900_000.0)
        s.finish_run(r3, best_config={"streams": 8}, best_score=9_900_000.0, default_score=1e6)
        r4 = s.start_run(job="broken", world=WORLD, backend="gloo", model_graph=model(CNN),
                         topology_graph=cluster(2), space_facts={}, unit="it/s")
        s.add_trial(r4, number=0, technique="grid", config={"streams": 1}, iterations=2,
                    score=None, error="timed out")
        s.finish_run(r4, status="failed", best_config=None, best_score=None)
    return path


def run(*args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, **kw)


# ------------------------------------------------------------------ human units
def test_show_trials_and_html_say_mib_not_raw_bytes(db, tmp_path):
    out = run("db", "show", "1", "--db", db).output
    assert "64 MiB" in out and "67108864" not in out
    assert "389,500 ± 1,250 samples/s" in out and "300,000 ± 900 samples/s" in out
    out = run("db", "trials", "1", "--db", db).output
    assert "chunk_bytes=64MiB" in out and "67108864" not in out and "samples/s" in out
    assert "failed" in out and "server lost" in out
    page = tmp_path / "r.html"
    assert run("report", "1", "--db", db, "--out", page).exit_code == 0
    text = page.read_text()
    assert "64 MiB" in text and "67108864" not in text and "389,500 ± 1,250 samples/s" in text


def test_only_the_parameters_that_matter_are_shown(db):
    # the kept config has intra=scatter: reduce_root does not matter, so it is not shown
    out = run("db", "show", "1", "--db", db).output
    kept = out[out.index("kept configuration"):]
    assert "intra" in kept and "scatter" in kept and "reduce_root" not in kept
    assert "servers" in kept  # it matters under transport=pushpull
    out = run("db", "trials", "1", "--db", db, "--json").output
    assert "reduce_root" in out  # machine formats keep everything


def test_machine_formats_keep_raw_numbers_and_name_the_unit(db):
    trials = json.loads(run("db", "trials", "1", "--db", db, "--json").output)
    assert trials[9]["config"]["chunk_bytes"] == 64 << 20 and trials[9]["score"] == 390_000.25
    assert {t["unit"] for t in trials} == {"samples/s"} and trials[0]["number"] == 0
    csv_text = run("db", "export", "1", "--db", db, "--format", "csv").output
    header, first = csv_text.splitlines()[:2]
    assert header.startswith("run,number,technique,iterations,score,unit,")
    assert "config.chunk_bytes" in header and ",samples/s," in first and "310000.5" in first
    shown = json.loads(run("db", "show", "1", "--db", db, "--json").output)
    assert shown["unit"] == "samples/s" and shown["best_spread"] == 1250.0


# ------------------------------------------------------------------ 80 columns
def _lines_fit(text: str, width: int = 80) -> list[str]:
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]
    return lines


def test_db_runs_fits_80_columns_without_splitting_a_number(db, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = run("db", "runs", "--db", db).output
    _lines_fit(out)
    for whole in ("389,500", "9,900,000", "4.5", "1.30x", "9.90x", "failed", "finished"):
        assert whole in out, whole
    assert "not shown at this width" in out  # the columns left out are named
    monkeypatch.setenv("COLUMNS", "200")
    wide = run("db", "runs", "--db", db).output
    assert "not shown" not in wide and "gloo" in wide and "1,000,000" in wide


@pytest.mark.parametrize("command", [["db", "runs"], ["db", "trials", "1"], ["db", "best"],
                                     ["db", "show", "1"], ["db", "similar", "1"]])
def test_every_db_table_fits_80_columns(db, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "80")
    r = run(*command, "--db", db)
    assert r.exit_code == 0, r.output
    _lines_fit(r.output)


def test_a_fitted_table_on_an_80_column_console_keeps_numbers_whole():
    from rich.console import Console

    cols = [Column("id", "num"), Column("job"), Column("notes", "fold"), Column("score", "num"),
            Column("extra", "text", 1), Column("more", "text", 2), Column("most", "text", 3)]
    rows = [[7, "a-rather-long-job-name-that-cannot-fit", "x " * 60, "3,759,123", "e" * 40,
             "m" * 30, "z" * 30]]
    buf = io.StringIO()
    Console(file=buf, width=80).print(build("t", cols, rows, 80))
    text = buf.getvalue()
    _lines_fit(text)
    assert "3,759,123" in text and "a-rather-lo…" in text  # numbers whole, text ellipsized
    assert "not shown at this width: most" in text and "zzz" not in text


# ------------------------------------------------------------------ units never mixed
def test_best_ranks_each_unit_apart(db, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # every column shown, whatever the terminal
    rows = json.loads(run("db", "best", "--db", db, "--json").output)
    # the simulated 9.9M samples/s is not ranked above the measured runs: its own group
    assert [(r["id"], r["unit"]) for r in rows] == [
        (1, "samples/s"), (2, "it/s"), (3, "simulated samples/s")]
    out = run("db", "best", "--db", db).output
    assert out.index("in samples/s") < out.index("in it/s") < out.index("in simulated samples/s")
    rows = json.loads(run("db", "best", "--db", db, "--json", "--unit", "it/s").output)
    assert [r["id"] for r in rows] == [2]
    r = run("db", "best", "--db", db, "--unit", "parsecs")
    assert r.exit_code == 2
    out = run("db", "runs", "--db", db).output
    assert "simulated samples/s" in out and "it/s" in out


# ------------------------------------------------------------------ defects
def test_export_json_with_format_csv_is_a_usage_error_and_help_has_no_markup(db):
    r = run("db", "export", "1", "--db", db, "--json", "--format", "csv")
    assert r.exit_code == 2 and "--json and --format csv" in r.output
    assert json.loads(run("db", "export", "1", "--db", db, "--json").output)["run"]["id"] == 1
    assert run("db", "export", "1", "--db", db, "--json", "--format", "json").exit_code == 0
    for command in (["db", "export"], ["db", "runs"], ["db", "prune"], ["report"], ["db"]):
        text = run(*command, "--help").output
        assert "``" not in text, command


def test_report_latest_and_json(db, tmp_path):
    r = run("report", "latest", "--db", db, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["run"] == 4 and data["failed_trials"] == 1 and data["unit"] == "it/s"
    data = json.loads(run("report", "1", "--db", db, "--json").output)
    assert data["unit"] == "samples/s" and data["trials"] == 10 and data["failed_trials"] == 1
    assert data["kept_at"] == [9] and data["best_spread"] == 1250.0
    assert data["techniques"]["bayes"]["colour"] == TECHNIQUE_COLOURS["bayes"]
    assert data["techniques"]["bayes"]["new_bests"] == 3
    chunk = {p["value"]: p for p in data["parameters"]["chunk_bytes"]}
    assert chunk[64 << 20]["best"] == 390_000.25 and chunk[4 << 20]["succeeded"] == 0
    assert "reduce_root" in data["parameters"]  # varied where intra=root
    png = tmp_path / "latest.png"
    r = run("report", "latest", "--db", db, "--out", png)
    assert r.exit_code == 0 and "run 4" in r.output and png.read_bytes()[:4] == b"\x89PNG"
    r = run("report", "1", "--db", db)  # no --out: a summary in the terminal (issue 28)
    assert r.exit_code == 0 and "run 1: bert-long-job-name" in r.output
    assert "streams=4 chunk_bytes=64MiB transport=pushpull servers=2" in r.output


def _aged_db(tmp_path):
    path = tmp_path / "p.db"
    with Store(path) as s:
        for job in ("old", "new"):
            rid = s.start_run(job=job, world=WORLD, backend="gloo", model_graph=model(CNN),
                              topology_graph=cluster(2), space_facts={})
            s.finish_run(rid, best_config={"streams": 1}, best_score=1.0)
    con = sqlite3.connect(path)
    con.execute("update runs set created = ? where job = 'old'",
                [(datetime.now(timezone.utc) - timedelta(days=45)).isoformat(timespec="milliseconds")])
    con.commit()
    con.close()
    return path


def _jobs(path) -> list[str]:
    return [r["job"] for r in json.loads(run("db", "runs", "--db", path, "--json").output)]


def test_prune_bad_age_exits_2_and_a_real_prune_asks(tmp_path, monkeypatch):
    path = _aged_db(tmp_path)
    r = run("db", "prune", "--db", path, "--older-than", "30")
    assert r.exit_code == 2 and "30d" in r.output and "--older-than" in r.output
    # not a terminal and no --yes: refuses, deletes nothing
    r = run("db", "prune", "--db", path, "--older-than", "30d")
    assert r.exit_code == 1 and "--yes" in r.output and "would delete 1 run" in r.output
    assert _jobs(path) == ["new", "old"]
    monkeypatch.setattr(db_command, "_interactive", lambda: True)
    r = run("db", "prune", "--db", path, "--older-than", "30d", input="n\n")
    assert r.exit_code == 0 and "delete 1 run older than 30d" in r.output
    assert "nothing deleted" in r.output and _jobs(path) == ["new", "old"]
    r = run("db", "prune", "--db", path, "--older-than", "30d", input="y\n")
    assert r.exit_code == 0 and "deleted 1 run" in r.output and _jobs(path) == ["new"]
    monkeypatch.setattr(db_command, "_interactive", lambda: False)
    (tmp_path / "again").mkdir()
    path2 = _aged_db(tmp_path / "again")
    r = run("db", "prune", "--db", path2, "--older-than", "30d", "--yes")
    assert r.exit_code == 0 and _jobs(path2) == ["new"]


# ------------------------------------------------------------------ the figure
def test_a_failed_one_trial_run_says_no_successful_trial(db):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from autotune.reports import report as rep

    with Store(db, create=False) as s:
        run_row, trials = s.run(4), s.trials(4)
    fig, ax = plt.subplots()
    s4 = summarize(trials, run_row)
    rep._curve(ax, plt, run_row, trials, s4, "it/s")
    texts = [t.get_text() for t in ax.texts]
    assert "no successful trial (1 failed)" in texts
    assert ax.get_ylim() == (0.0, 1.0)  # not an empty -0.04..0.04 score axis
    crosses = [c for c in ax.collections if len(c.get_offsets())]
    assert len(crosses) == 1 and tuple(crosses[0].get_facecolor()[0][:3]) == pytest.approx(
        matplotlib_rgb(rep.FAIL_COLOUR))
    plt.close(fig)
    assert figure_png(run_row, trials)[:4] == b"\x89PNG"


def matplotlib_rgb(colour: str) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    return to_rgb(colour)


def test_the_curve_marks_the_kept_configuration_and_colours_are_stable(db):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from autotune.reports import report as rep

    with Store(db, create=False) as s:
        run_row, trials = s.run(1), s.trials(1)
    summary = summarize(trials, run_row)
    assert summary["kept_at"] == [9]
    fig, ax = plt.subplots()
    rep._curve(ax, plt, run_row, trials, summary, "samples/s")
    labels = ax.get_legend_handles_labels()[1]
    assert "kept configuration" in labels and "failed (1)" in labels
    assert any(lbl.startswith("kept: 389,500 ± 1,250 samples/s") for lbl in labels)
    colours = {lbl: tuple(c.get_facecolor()[0][:3]) for c, lbl in zip(ax.collections, labels)
               if lbl in ("grid", "bayes", "pbt", "hyperband", "warm")}
    for tech, rgb in colours.items():
        assert rgb == pytest.approx(matplotlib_rgb(TECHNIQUE_COLOURS[tech])), tech
    plt.close(fig)
    # the same technique gets the same colour whatever else is in the run, unknown ones too
    assert technique_colour("bayes") == TECHNIQUE_COLOURS["bayes"]
    assert technique_colour("my-searcher") == technique_colour("my-searcher")
    assert FAIL_RED not in {technique_colour(t) for t in [*TECHNIQUE_COLOURS, "x", "y", "zz"]}


FAIL_RED = "#d62728"


def test_credit_and_slices_teach_which_technique_and_value(db):
    with Store(db, create=False) as s:
        run_row, trials = s.run(1), s.trials(1)
    summary = summarize(trials, run_row)
    # gains over the first success: bayes 322k-310k + 362k-351k + 390k-371k, ...
    assert summary["gain"]["bayes"] == pytest.approx(12_000 - 0.5 + 11_000 + 19_000.25)
    assert sum(summary["gain"].values()) == pytest.approx(390_000.25 - 310_000.5)
    assert summary["credit"][-1] == summary["gain"]
    data = report_json(run_row, trials)
    assert list(data["parameters"])[:3] == ["streams", "chunk_bytes", "transport"]
    servers = {p["value"]: p["trials"] for p in data["parameters"]["servers"]}
    assert sum(servers.values()) == 5  # only the pushpull trials, where servers matters


# ------------------------------------------------------------------ Optuna
def test_export_to_optuna_loads_back_with_every_trial(db, tmp_path):
    optuna = pytest.importorskip("optuna")
    url = f"sqlite:///{tmp_path / 'study.db'}"
    r = run("db", "export", "1", "--db", db, "--optuna", url)
    assert r.exit_code == 0, r.output
    assert "autotune-run-1" in r.output
    study = optuna.load_study(study_name="autotune-run-1", storage=url)
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    got = study.get_trials(deepcopy=False)
    with Store(db, create=False) as s:
        trials = s.trials(1)
    assert len(got) == len(trials) == 10
    states = [t.state for t in got]
    assert states.count(optuna.trial.TrialState.FAIL) == 1 and states[2] == optuna.trial.TrialState.FAIL
    assert [t.value for t in got] == [t["score"] for t in trials]
    assert got[9].params == {"streams": 4, "chunk_bytes": 64 << 20, "transport": "pushpull",
                             "servers": 2, "intra": "scatter", "compression": "none"}
    assert "reduce_root" in got[1].params and "servers" not in got[0].params  # conditional
    d = got[9].distributions
    assert isinstance(d["chunk_bytes"], optuna.distributions.IntDistribution) and d["chunk_bytes"].log
    assert isinstance(d["transport"], optuna.distributions.CategoricalDistribution)
    assert d["servers"].high == 2  # from the run's space (k_max=2)
    assert got[2].user_attrs["error"] == "server lost" and got[5].user_attrs["technique"] == "bayes"
    assert study.best_value == 390_000.25 and study.user_attrs["unit"] == "samples/s"
    # a second export to the same name is refused clearly; another name works
    r = run("db", "export", "1", "--db", db, "--optuna", url)
    assert r.exit_code == 1 and "already has a study named 'autotune-run-1'" in r.output
    r = run("db", "export", "latest", "--db", db, "--optuna", url, "--study-name", "broken")
    assert r.exit_code == 0
    (t,) = optuna.load_study(study_name="broken", storage=url).get_trials()
    assert t.state == optuna.trial.TrialState.FAIL and t.params == {"streams": 1}
    r = run("db", "export", "1", "--db", db, "--optuna", url, "--format", "csv")
    assert r.exit_code == 2


def test_the_optuna_extra_reads_an_export_as_a_dataframe_and_in_the_dashboard(db, tmp_path):
    """What ``pip install 'autotune[optuna]'`` brings, used as docs/store.md shows."""
    optuna = pytest.importorskip("optuna")
    pytest.importorskip("pandas", reason="pandas comes with the 'optuna' extra")
    dashboard = pytest.importorskip("optuna_dashboard",
                                    reason="optuna-dashboard comes with the 'optuna' extra")
    from wsgiref.util import setup_testing_defaults

    url = f"sqlite:///{tmp_path / 'study.db'}"
    assert run("db", "export", "1", "--db", db, "--optuna", url).exit_code == 0
    study = optuna.load_study(study_name="autotune-run-1", storage=url)
    df = study.trials_dataframe()
    with Store(db, create=False) as s:
        trials = s.trials(1)
    assert len(df) == len(trials) == 10
    assert list(df["user_attrs_technique"]) == [t["technique"] for t in trials]
    # the study names its metric: Optuna calls the column "value_<name>"
    (value,) = [c for c in df.columns if c.startswith("value_")]
    assert df[value].max() == max(t["score"] for t in trials if t["score"] is not None)
    assert int(df["params_chunk_bytes"].iloc[9]) == 64 << 20
    assert list(df["state"]).count("FAIL") == 1
    # the dashboard's own web app lists the study and serves its page
    app = dashboard.wsgi(url)

    def get(path: str) -> tuple[str, bytes]:
        env: dict = {"PATH_INFO": path}
        setup_testing_defaults(env)
        status: list[str] = []
        body = b"".join(app(env, lambda s, h, *a: status.append(s)))
        return status[0], body

    status, body = get("/api/studies")
    assert status.startswith("200")
    (summary,) = json.loads(body)["study_summaries"]
    assert summary["study_name"] == "autotune-run-1" and summary["directions"] == ["maximize"]
    status, body = get(f"/api/studies/{summary['study_id']}")
    assert status.startswith("200") and len(json.loads(body)["trials"]) == 10
