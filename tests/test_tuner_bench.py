"""The tuner benchmark judges a change on held-out seeds and paired against the code before
it (issue 63): ``--first-seed`` picks the seeds, ``--against`` brings earlier results'
tuner runs in as method ``before``, paired by objective and seed (the measured tables'
priors on the recorded host calibrations, the same in every launch), and ``--join`` reports
on the runs of several launches (other seeds, other methods) as one table."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "tuner_bench.py"
SMALL = ["--suite", "measured", "--scenarios", "measured-small", "--methods", "tuner",
         "--no-warm", "--workers", "1", "--seeds", "1"]


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *SMALL, *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def tuner_at_3(tmp_path_factory) -> Path:
    """The tuner's run on measured-small at seed 3: one launch, read by the tests below."""
    out = tmp_path_factory.mktemp("tuner_bench") / "tuner.json"
    done = _bench("--first-seed", "3", "--json", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_the_tuner_races_past_the_budget_as_a_sessions_and_the_stock_methods_do_not():
    """The benchmark's ``tuner`` is the Tuner a session makes: its race may run past the
    budget (``OVERTIME``); a stock method stops at the budget; ``--tuner-options`` rules."""
    from autotune.leader.tuners import OVERTIME

    bench = _module()
    sc = bench.OBJECTIVES[bench.SUITES["unseen"][0]]
    assert OVERTIME > 0
    assert bench._tuner(sc, "tuner", 0, 100, {}).confirming.overtime == round(OVERTIME * 100)
    assert bench._tuner(sc, "bayes", 0, 100, {}).confirming.overtime == 0
    assert bench._tuner(sc, "tuner", 0, 100, {"overtime": 0}).confirming.overtime == 0


def test_a_trial_clearly_slow_is_cut_short_as_a_sessions_and_a_race_trial_never():
    """The benchmark runs a trial as a session's schedule does: one clearly slow on its
    switch iteration ends there, scored at the bound; one clearly slow on its first scored
    iteration ends after it; the race's trials, and all with ``cut_short=None``, run whole."""
    import random

    import numpy as np

    from autotune.tuning.confirm import CONFIRM
    from autotune.tuning.trial import Trial

    bench = _module()
    sc = bench.OBJECTIVES[bench.SUITES["unseen"][0]]
    tuner = bench._tuner(sc, "bayes", 0, 100, {})
    best = sc.optimum[0]
    first = tuner.ask()
    tuner.tell(first, sc.throughput(first.config))
    trial = tuner.ask()
    tuner.tell(trial, sc.throughput(best))  # the optimum held: the bar is half its score
    held = tuner.best[1]
    assert held == pytest.approx(sc.throughput(best))
    rng = random.Random(0)
    sample = [sc.space.sample(rng) for _ in range(300)]
    slow = min(sample, key=sc.throughput)
    assert sc.throughput(slow) < 0.2 * held  # far under the bar even with the switch's margin
    middling = next(c for c in sample if 0.3 * held < sc.throughput(c) < 0.45 * held)

    def run(config, technique="bayes", iterations=4, cut_short=0.5):
        t = Trial(99, config, iterations, technique, None)
        return bench._measure(sc, tuner, t, np.random.default_rng(1), np.random.default_rng(2),
                              cut_short)

    score, used, measured = run(slow)
    assert (used, measured) == (1, 0)  # ended on its switch, nothing scored
    assert score == pytest.approx(2 * sc.throughput(slow), rel=0.25)  # the switch's bound
    # not slow enough for the switch's margin, under the bar on its first scored iteration
    assert run(middling)[1:] == (2, 1)
    assert run(best)[1:] == (4, 3)  # a fast one runs whole
    assert run(slow, technique=CONFIRM)[1:] == (4, 3)  # the race is never cut
    assert run(slow, cut_short=None)[1:] == (4, 3)


def test_earlier_runs_join_as_before_paired_by_objective_and_seed(tmp_path, capsys, tuner_at_3):
    first = tuner_at_3
    runs = json.loads(first.read_text())["runs"]
    assert [(r["method"], r["seed"]) for r in runs] == [("tuner", 3)]
    # the best configuration the search tried, beside the kept one (which it tried too)
    assert 0 <= runs[0]["tried_regret"] <= runs[0]["regret"]
    # the iterations it ran past the budget, racing near-ties as a session's Tuner does
    assert 0 <= runs[0]["overtime"] <= 100
    # and where it went in the choice: kept (then its regret is the kept one's), or not
    fate = runs[0]["tried_fate"]
    assert fate in {"kept", "not raced", "dropped", "raced", "no race"}, fate
    assert fate != "kept" or runs[0]["tried_regret"] == runs[0]["regret"]
    # each predictor judged by its predictions: the share of new configurations it placed
    # on the right side of those measured before (item 4)
    assert set(runs[0]["placed"]) == {"prior", "bayes"}
    assert all(0.5 < v <= 1 for v in runs[0]["placed"].values()), runs[0]["placed"]
    # beside the runs within 1 %, how often the table itself reproduces that verdict at its
    # optimum (measured-small's optimum is far ahead of the rest: always)
    resolution = json.loads(first.read_text())["suites"]["measured"]["table_resolution"]
    assert resolution == {"measured-small": _module().OBJECTIVES[runs[0]["si"]].resolution()}
    assert resolution["measured-small"]["within"] == 1.0

    # the measured table's prior on the recorded host calibrations, by default, every one
    # of them in the results; the run on seed 3 on the (3 mod n)-th
    bench = _module()
    recorded = bench._recorded_hosts(sorted(bench.HOSTS.glob("*.json")))
    hosts = json.loads(first.read_text())["host_calibrations"]
    assert len(recorded) >= 3 and hosts == [{"measured-small": h["measured-small"]}
                                            for h in recorded]
    assert runs[0]["host"] == 3 % len(hosts)

    second = tmp_path / "second.json"
    done = _bench("--first-seed", "3", "--against", str(first), "--json", str(second))
    assert done.returncode == 0, done.stderr
    out = json.loads(second.read_text())
    assert out["host_calibrations"] == hosts  # paired on the same prior
    by = {r["method"]: r for r in out["runs"]}
    assert set(by) == {"tuner", "before"} and by["before"]["seed"] == 3
    # the same code on the same noise stream: the same kept configuration
    assert by["before"]["regret"] == by["tuner"]["regret"] and by["before"]["best"] == by["tuner"]["best"]
    assert "before" in out["methods"]
    assert out["suites"]["measured"]["wilcoxon"]["before"] == {
        "n": 1, "p": 1.0, "tuner_better": 0, "tuner_worse": 0}

    capsys.readouterr()
    with pytest.raises(SystemExit) as missing:  # refused before anything runs: in-process
        bench.main([*SMALL, "--first-seed", "4", "--against", str(first),
                    "--json", str(tmp_path / "x.json")])
    assert missing.value.code == 2
    assert "no tuner run of measured-small at seed 4" in capsys.readouterr().err


def test_host_calibrations_are_recorded_timed_or_taken_from_results(tmp_path, capsys):
    """``--record-host`` times this machine's rates for the measured tables and writes them;
    ``--host-from`` takes that file or earlier results (one calibration or several), and
    refuses one lacking a table, naming it; ``--host-timed`` times them at the launch."""
    bench = _module()
    out = tmp_path / "hosts" / "now.json"
    assert bench.main(["--suite", "measured", "--scenarios", "measured-small,measured-cap",
                       "--record-host", str(out)]) == 0
    recorded = json.loads(out.read_text())
    (host,) = recorded["host_calibrations"]
    assert set(host) == {"measured-small", "measured-cap"}
    assert json.loads(host["measured-small"])["constants"]["cpu_sum_gbps"] > 0
    older = tmp_path / "older_results.json"  # results written with one calibration
    older.write_text(json.dumps({"host_calibration": {"measured-small": "{}"}}))
    assert bench._recorded_hosts([out, older]) == [host, {"measured-small": "{}"}]

    chosen = [i for i in bench.SUITES["measured"]
              if bench.OBJECTIVES[i].name in ("measured-small", "measured-lossy")]
    with pytest.raises(ValueError, match="none for measured-lossy"):
        bench._hosts(chosen, [out])
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"host_calibrations": []}))
    with pytest.raises(ValueError, match="no host calibration in .*empty.json"):
        bench._hosts(chosen, [empty])
    (timed,) = bench._hosts(chosen, None)
    assert set(timed) == {"measured-small", "measured-lossy"}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        bench.main([*SMALL, "--host-from", str(out), "--host-timed"])
    assert exit_.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_launches_join_into_one_table_only_where_every_method_ran_the_tuners_seeds(
        tmp_path, capsys, tuner_at_3):
    tuner, bayes, later = tuner_at_3, tmp_path / "bayes.json", tmp_path / "later.json"
    assert _bench("--first-seed", "3", "--methods", "bayes", "--json", str(bayes)).returncode == 0
    results = json.loads(tuner.read_text())  # a tuner run at seed 4 that Bayes lacks
    results["runs"] = [{**r, "seed": 4} for r in results["runs"]]
    later.write_text(json.dumps(results))
    bench = _module()

    out = tmp_path / "joined.json"
    assert bench.main(["--suite", "measured", "--join", str(tuner), str(bayes), str(tuner),
                       "--json", str(out)]) == 0
    joined = json.loads(out.read_text())
    assert joined["methods"] == ["tuner", "bayes"] and joined["seeds"] == 1
    assert sorted((r["method"], r["seed"]) for r in joined["runs"]) == [("bayes", 3), ("tuner", 3)]
    regret = {r["method"]: r["regret"] for r in joined["runs"]}
    table = joined["suites"]["measured"]
    assert table["median_regret"] == regret  # one run each: its regret is the median
    assert table["wilcoxon"]["bayes"]["n"] == 1

    # the tuner ran seed 4 and Bayes did not: no table over unequal seeds
    for refused, why in (([str(tuner), str(bayes), str(later)], "no bayes run of measured-small at seed 4"),
                         ([str(tuner), "--seeds", "2"], "the runs its results hold")):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            bench.main(["--suite", "measured", "--join", *refused, "--json", str(out)])
        assert exit_.value.code == 2 and why in capsys.readouterr().err


def _module():
    """``benchmarks/tuner_bench.py`` imported (its joins run nothing: no process needed)."""
    spec = importlib.util.spec_from_file_location("tuner_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # (it puts benchmarks/ on the path for its own imports)
    return module


def test_a_targets_figure_comes_with_its_interval_over_the_seeds():
    """The same code's median regret on the measured tables moved 2x between two launches
    of 16 seeds (4.36 % on seeds 16-31, 2.26 % on 32-63): each target's figure is printed
    with its seed bootstrap interval, so a miss or a hit inside it is read as undecided."""
    import io

    from rich.console import Console

    bench = _module()

    def runs(tuner_over_stock):
        out = []
        for seed, factor in enumerate(tuner_over_stock):
            for name, stock in (("a", 0.04), ("b", 0.08)):
                base = {"scenario": name, "seed": seed, "iterations_to_95": 30,
                        "tuning_cost": 0.2, "cpu_s": 0.1}
                out += [{**base, "method": "tpe", "regret": stock * (1 + seed / 100)},
                        {**base, "method": "tuner", "regret": stock * (1 + seed / 100) * factor}]
        return out

    def report(rs):
        console = Console(file=io.StringIO(), width=200)
        out = bench._report("measured", rs, ["tuner", "tpe"], 10, console)
        return out, console.file.getvalue()

    # the tuner at half the stock method's regret on every seed: no spread at all
    out, text = report(runs([0.5] * 10))
    assert out["ratio_vs_best_stock"] == pytest.approx(0.5)
    assert out["ratio_vs_best_stock_interval"] == pytest.approx([0.5, 0.5])
    assert "0.50x, 95 % interval over seeds 0.50-0.50x" in text
    # half on some seeds, twice on the others: the interval holds both sides of 1
    out, text = report(runs([0.5, 2.0] * 5))
    lo, hi = out["ratio_vs_best_stock_interval"]
    assert lo < 1 < hi and lo <= out["ratio_vs_best_stock"] <= hi
    # a stock method at 0 % on some seeds: the ratio there is unbounded, and so is the
    # interval's upper bound (not NaN, which numpy's interpolation between two makes)
    zero = runs([0.5, 2.0] * 5)
    for r in zero:
        if r["method"] == "tpe" and r["seed"] % 2:
            r["regret"] = 0.0
    _, text = report(zero)
    assert "-infx" in text and "nan" not in text
    # the share within 1 %: none of the runs, whatever the seeds drawn
    assert out["within_1pct_interval"] == [0.0, 0.0] and "0 %, 95 % interval over seeds 0-0 %" in text
    # runs written before they recorded the best configuration tried: no figure for it
    assert out["median_tried_regret"] == {"tuner": None, "tpe": None}
    assert "tried_lost_in_the_choice" not in out
    # where the best configurations tried went, counted where the choice lost > 1 %
    rs = runs([0.5] * 4)
    for r, fate, tried in zip([r for r in rs if r["method"] == "tuner"],
                              ["not raced", "not raced", "dropped", "kept", "raced",
                               "raced", "kept", "not raced"],
                              [0.0, 0.0, 0.0, None, 0.05, 0.0, None, 0.0]):
        r.update(tried_fate=fate, tried_regret=r["regret"] if tried is None else tried)
    out, text = report(rs)
    assert out["tried_lost_in_the_choice"] == {"not raced": 3, "dropped": 1, "raced": 1}
    assert "where it went: not raced 3, dropped 1, raced 1" in text
