"""Rows a person reads without a manual (issue 49): ``db runs`` explains its world column,
one figure for the default and one for the kept configuration in every table, an
aborted run's figures shown as partial (no ``± 0`` from one iteration), and what
``transport=pushpull servers=0`` means."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.store import Store
from store_helpers import CNN, WORLD, cluster, model

ON_WORKERS = {"streams": 2, "chunk_bytes": 1 << 20, "transport": "pushpull", "servers": 0,
              "intra": "flat", "reduce_root": 0, "compression": "none"}


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "rows.db"
    with Store(path) as s:
        done = s.start_run(job="done", world=WORLD, backend="gloo", model_graph=model(CNN),
                           topology_graph=cluster(2), space_facts={}, unit="samples/s")
        s.add_trial(done, number=0, technique="default", config={"streams": 1},
                    iterations=3, score=3_225.0)
        s.add_trial(done, number=1, technique="grid", config=ON_WORKERS, iterations=3,
                    score=4_100.0)
        s.finish_run(done, best_config=ON_WORKERS, best_score=4_050.0, default_score=3_295.0,
                     best_spread=120.0, default_spread=562.0, best_iterations=20,
                     default_iterations=9)
        stopped = s.start_run(job="stopped", world=WORLD, backend="gloo",
                              model_graph=model(CNN), topology_graph=cluster(2),
                              space_facts={}, unit="samples/s")
        s.add_trial(stopped, number=0, technique="default", config={"streams": 1},
                    iterations=1, score=3_632.0)
        s.finish_run(stopped, status="aborted", best_config={"streams": 1},
                     best_score=3_632.0, default_score=3_632.0, best_spread=0.0,
                     default_spread=0.0, best_iterations=1, default_iterations=1)
    return path


def run(*args: object) -> str:
    r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False,
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return r.output


def test_db_runs_explains_world_and_marks_partial_figures(db):
    assert "2w/1s/1m = 2 worker processes, 1" in " ".join(run("db", "runs", "--help").split())
    out = run("db", "runs", "--db", db)
    assert "world: workers/servers/machines" in out
    stopped = next(line for line in out.splitlines() if "stopped" in line)
    assert "3,632*" in stopped and "aborted" in stopped
    done = next(line for line in out.splitlines() if "│ done" in line)
    assert "4,050" in done and "*" not in done
    assert "partial, the run did not finish" in out


def test_an_aborted_runs_figure_says_partial_and_one_iteration_has_no_spread(db):
    out = run("db", "show", "2", "--db", db)
    assert "3,632 samples/s (1 iteration; partial: the run is aborted)" in out
    assert "± 0" not in out and "(1 iterations" not in out


def test_the_default_and_kept_figures_are_the_same_in_every_table(db):
    shown = run("db", "show", "1", "--db", db)
    kept, default = "4,050 ± 120 samples/s (20 iterations)", "3,295 ± 562 samples/s (9 iterations)"
    assert kept in shown and default in shown
    trials = " ".join(run("db", "trials", "1", "--db", db).split())
    assert f"kept {kept}, default {default}" in trials
    # the trial's own score stays its own, and is said to be
    assert "3,225" in trials and "a trial's score is over its own iterations only" in trials


def test_pushpull_without_servers_says_the_workers_sum(db):
    for command in (("db", "trials", "1"), ("db", "show", "1")):
        out = " ".join(run(*command, "--db", db).split())
        assert "push/pull through Summation Services on the workers themselves" in out
