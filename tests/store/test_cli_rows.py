"""Rows a person reads without a manual (issue 49): ``db runs`` explains its world column,
one figure for the default and one for the kept configuration in every table, an
aborted run's figures shown as partial (no ``± 0`` from one iteration), what
``transport=pushpull servers=0`` means, and a goodput score never ranked against a
throughput one (``db best``, warm start)."""

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


def test_goodput_runs_have_their_own_unit_in_best_and_warm_start(tmp_path):
    """A run scored by goodput is stored in ``goodput samples/s``: ``db best`` shows it in
    a table of its own, and a throughput job never warm-starts from it. A store from
    before (schema 11) gets the unit from its trials' efficiencies."""
    import sqlite3

    from autotune.store.warmstart import warm_start_configs
    from autotune.tuning.space import SearchSpace

    path = tmp_path / "kinds.db"
    space = SearchSpace.build(allow_lossy=True)
    lossless = {**ON_WORKERS, "transport": "allreduce", "streams": 3}
    lossy = {**lossless, "compression": "fp16"}
    with Store(path) as s:
        for unit, config, score in (("samples/s", lossless, 1_000.0),
                                    ("goodput samples/s", lossy, 9_000.0)):
            rid = s.start_run(job="j", world=WORLD, backend="gloo", model_graph=model(CNN),
                              topology_graph=cluster(2), space_facts=dict(space.facts),
                              unit=unit)
            s.add_trial(rid, number=0, technique="grid", config=config, iterations=3,
                        score=score, efficiency=0.9 if unit != "samples/s" else None,
                        throughput=score / 0.9 if unit != "samples/s" else None)
            s.finish_run(rid, best_config=config, best_score=score, default_score=score)
        for unit, kept in (("samples/s", lossless), ("goodput samples/s", lossy)):
            warm = warm_start_configs(s, model(CNN), cluster(2), space, unit=unit,
                                      machines=WORLD["machines"])
            assert [c["compression"] for c in warm] == [kept["compression"]], (unit, warm)
    out = run("db", "best", "--db", path)
    tables = out.split("best configurations")
    assert len(tables) == 3, out  # one per unit
    assert "9,000" in out and "goodput samples/s" in out
    # schema 11: the unit was samples/s; the migration reads it from the efficiencies
    with sqlite3.connect(path) as con:
        con.execute("alter table runs drop column continues")
        con.execute("alter table runs drop column cause")
        con.execute("alter table runs drop column ddp")
        con.execute("update runs set unit = 'samples/s'")
        con.execute("update meta set value = '11' where key = 'schema_version'")
    with Store(path) as s:
        assert [r["unit"] for r in s.runs()] == ["goodput samples/s", "samples/s"]
