"""The tuner benchmark judges a change on held-out seeds and paired against the code before
it (issue 63): ``--first-seed`` picks the seeds, ``--against`` brings earlier results'
tuner runs in as method ``before``, paired by objective and seed (``--host-from``: on the
same prior), and ``--join`` reports on the runs of several launches (other seeds, other
methods) as one table."""

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


def test_earlier_runs_join_as_before_paired_by_objective_and_seed(tmp_path):
    first = tmp_path / "first.json"
    assert _bench("--first-seed", "3", "--json", str(first)).returncode == 0
    runs = json.loads(first.read_text())["runs"]
    assert [(r["method"], r["seed"]) for r in runs] == [("tuner", 3)]
    # each predictor judged by its predictions: the share of new configurations it placed
    # on the right side of those measured before (item 4)
    assert set(runs[0]["placed"]) == {"prior", "bayes"}
    assert all(0.5 < v <= 1 for v in runs[0]["placed"].values()), runs[0]["placed"]

    # the measured table's prior on this machine's rates, timed once for the launch
    host = json.loads(first.read_text())["host_calibration"]
    assert set(host) == {"measured-small"} and json.loads(host["measured-small"])["constants"]

    second = tmp_path / "second.json"
    done = _bench("--first-seed", "3", "--against", str(first), "--host-from", str(first),
                  "--json", str(second))
    assert done.returncode == 0, done.stderr
    out = json.loads(second.read_text())
    assert out["host_calibration"] == host  # paired on the same prior
    by = {r["method"]: r for r in out["runs"]}
    assert set(by) == {"tuner", "before"} and by["before"]["seed"] == 3
    # the same code on the same noise stream: the same kept configuration
    assert by["before"]["regret"] == by["tuner"]["regret"] and by["before"]["best"] == by["tuner"]["best"]
    assert "before" in out["methods"]
    assert out["suites"]["measured"]["wilcoxon"]["before"] == {
        "n": 1, "p": 1.0, "tuner_better": 0, "tuner_worse": 0}

    missing = _bench("--first-seed", "4", "--against", str(first), "--json", str(tmp_path / "x.json"))
    assert missing.returncode == 2
    assert "no tuner run of measured-small at seed 4" in missing.stderr


def test_launches_join_into_one_table_only_where_every_method_ran_the_tuners_seeds(tmp_path, capsys):
    tuner, bayes, later = tmp_path / "tuner.json", tmp_path / "bayes.json", tmp_path / "later.json"
    assert _bench("--first-seed", "3", "--json", str(tuner)).returncode == 0
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
