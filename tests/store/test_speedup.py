"""One definition of a speed-up (issue 28, :mod:`autotune.speedup`): the ratio of means with
its propagated spread, refused under 4 scored iterations a side; the store's iteration
counts (schema v6, old runs unknown); ``db runs``/``db show``/``report --json`` showing
the same one; the Optuna export's times, metric name and kept trial."""

from __future__ import annotations

import json
import math
from datetime import datetime

import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.reports.report import report_json
from autotune.speedup import MIN_ITERATIONS, Speedup, measure, measure_times
from autotune.store import Store, StoreError, schema
from store_helpers import CNN, OLD_FINISHED_RUN, WORLD, cluster, model, old_store


def run_cli(*args: str) -> str:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return r.output


# ------------------------------------------------------------------ the definition
def test_the_ratio_of_means_with_its_spread_propagated_to_first_order():
    s = Speedup.of(best=(6000.0, 120.0, 12), reference=(4000.0, 40.0, 8))
    assert s.ratio == pytest.approx(1.5)
    assert s.spread == pytest.approx(1.5 * math.hypot(120 / 6000, 40 / 4000))
    assert s.shown() == "1.50x ± 0.03 (12 vs 8 iterations)"
    assert s.as_json() == {"ratio": pytest.approx(1.5), "spread": pytest.approx(s.spread),
                           "best_iterations": 12, "reference_iterations": 8,
                           "simulated": False, "refused": None}


@pytest.mark.parametrize("n_best, n_ref", [(1, 12), (12, 3), (MIN_ITERATIONS - 1, 40)])
def test_a_speed_up_over_fewer_than_4_iterations_is_refused(n_best, n_ref):
    # the reported case: 6,209 ± 0 samples/s over 1 iteration, headlined as 1.62x
    s = Speedup.of(best=(6209.0, 0.0, n_best), reference=(3833.0, 41.0, n_ref))
    assert s.ratio is None and s.spread is None and s.refused == "n<4"
    assert s.shown() == f"– (n<4: {n_best} vs {n_ref} iterations)"
    assert s.shown(counts=False) == "– (n<4)" and "1.62" not in s.shown()
    j = s.as_json()
    assert j["ratio"] is None and (j["best_iterations"], j["reference_iterations"]) == (n_best, n_ref)
    assert Speedup.of((6209.0, 0.0, 4), (3833.0, 41.0, 4)).ratio == pytest.approx(6209 / 3833)


def test_unknown_counts_are_refused_and_simulated_ones_are_marked_without_counts():
    old = Speedup.of_run({"best_score": 30.0, "default_score": 20.0})
    assert old.ratio is None and old.refused == "n unknown" and old.shown(counts=False) == "– (n?)"
    sim = Speedup.of_run({"best_score": 30.0, "best_spread": 1.0, "best_iterations": 2,
                          "default_score": 20.0, "default_iterations": 2, "simulated": True})
    assert sim.ratio == pytest.approx(1.5) and sim.refused is None and sim.spread is None
    assert sim.shown() == "1.50x (simulated)"
    assert sim.as_json()["best_iterations"] is None and sim.as_json()["simulated"] is True
    assert Speedup.of((30.0, 1.0, 8), (None, None, 0)).shown() == ""  # no default measured
    assert Speedup.of((30.0, 1.0, 8), (0.0, 0.0, 8)).ratio is None


def test_measure_gives_mean_spread_and_count():
    assert measure([]) == (None, None, 0)
    assert measure([2.0]) == (2.0, 0.0, 1)
    mean, sd, n = measure_times([0.5, 0.25])
    assert (mean, n) == (3.0, 2) and sd == pytest.approx(math.sqrt(2))


# ------------------------------------------------------------------ the store
def _run(store: Store, *, best_n: int | None, default_n: int | None, simulated: bool = False,
         trials: int = 4) -> int:
    rid = store.start_run(job="j", world=WORLD, backend="gloo", model_graph=model(CNN),
                          topology_graph=cluster(2), space_facts={}, simulated=simulated)
    for i in range(trials):
        store.add_trial(rid, number=i, technique="grid", config={"streams": 1 + i},
                        iterations=3, score=100.0 + 10 * i, wall_time=0.5 + i)
    store.finish_run(rid, best_config={"streams": trials}, best_score=6209.0, best_spread=80.0,
                     default_score=3833.0, default_spread=41.0, best_iterations=best_n,
                     default_iterations=default_n)
    return rid


def test_a_v5_store_migrates_to_v6_with_unknown_counts(tmp_path):
    path = tmp_path / "v5.db"
    old_store(path, 5, OLD_FINISHED_RUN)
    with Store(path) as s:
        assert s.schema_version == schema.SCHEMA_VERSION >= 6
        old = s.run(1)
        assert old["best_iterations"] is None and old["default_iterations"] is None
        assert Speedup.of_run(old).refused == "n unknown"  # never a bare 1.62x
        rid = _run(s, best_n=12, default_n=12)
        assert (s.run(rid)["best_iterations"], s.run(rid)["default_iterations"]) == (12, 12)
        with pytest.raises(StoreError, match="best_iterations is a number of iterations"):
            s.finish_run(rid, best_config=None, best_score=None, best_iterations=2.5)
    (old_row,) = [ln for ln in run_cli("db", "runs", "--db", str(path)).splitlines()
                  if "│ old " in ln]
    assert "– (n?)" in old_row and "1.62x" not in old_row


def test_db_runs_show_and_report_show_the_same_speed_up(tmp_path):
    path = tmp_path / "s.db"
    with Store(path) as s:
        good = _run(s, best_n=12, default_n=9)
        short = _run(s, best_n=1, default_n=12)
        run, trials = s.run(good), s.trials(good)
        short_run = s.run(short)
    want = Speedup.of_run(run)
    assert want.ratio == pytest.approx(6209 / 3833)
    runs = {r["id"]: r for r in json.loads(run_cli("db", "runs", "--db", str(path), "--json"))}
    shown = json.loads(run_cli("db", "show", str(good), "--db", str(path), "--json"))
    best = json.loads(run_cli("db", "best", "--db", str(path), "--json"))
    for doc in (runs[good], shown, next(r for r in best if r["id"] == good),
                report_json(run, trials), json.loads(run_cli("report", str(good), "--db",
                                                             str(path), "--json"))):
        assert doc["speedup_over_default"] == want.as_json()
    assert want.shown() in run_cli("db", "show", str(good), "--db", str(path))
    assert f"{want.ratio:.2f}x" in run_cli("db", "runs", "--db", str(path))
    # the short one: refused everywhere, with its counts
    assert runs[short]["speedup_over_default"]["ratio"] is None
    assert report_json(short_run, [])["speedup_over_default"]["best_iterations"] == 1
    assert "– (n<4: 1 vs 12 iterations)" in run_cli("db", "show", str(short), "--db", str(path))


# ------------------------------------------------------------------ Optuna
def test_the_optuna_export_has_real_times_the_metric_name_and_the_kept_trial(tmp_path):
    optuna = pytest.importorskip("optuna")
    path = tmp_path / "s.db"
    with Store(path) as s:
        rid = _run(s, best_n=12, default_n=12, trials=5)
        # the kept configuration measured again later, lower than trial 3's single value
        s.add_trial(rid, number=5, technique="confirm", config={"streams": 5}, iterations=3,
                    score=120.0, wall_time=2.0)
        s.add_trial(rid, number=6, technique="grid", config={"streams": 9}, iterations=3,
                    score=None, error="timed out", wall_time=1.25)
        trials = s.trials(rid)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    run_cli("db", "export", str(rid), "--db", str(path), "--optuna", url)
    study = optuna.load_study(study_name=f"autotune-run-{rid}", storage=url)
    got = study.get_trials(deepcopy=False)
    assert len(got) == len(trials) == 7
    for t, stored in zip(got, trials):
        finish = datetime.fromisoformat(stored["created"]).astimezone().replace(tzinfo=None)
        assert t.datetime_complete == finish  # recorded when it finished
        assert t.datetime_start < t.datetime_complete
        assert t.duration.total_seconds() == pytest.approx(stored["wall_time"], abs=1e-3)
    assert [t.datetime_start for t in got] != [got[0].datetime_start] * 7  # not one export time
    assert study.metric_names == ["throughput (samples/s)"]
    assert study.user_attrs["autotune_kept_trials"] == [4, 5]  # streams=5, kept
    assert study.user_attrs["autotune_kept_trial"] == 4 and got[5].user_attrs["autotune_kept"]
    assert "best_trial" in study.user_attrs["autotune_kept_note"]
    assert study.user_attrs["speedup_over_default"]["ratio"] == pytest.approx(6209 / 3833)
    assert study.best_trial.number == 4  # here the same; the note says why it may not be
