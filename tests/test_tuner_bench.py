"""The tuner benchmark judges a change on held-out seeds and paired against the code before
it (issue 63): ``--first-seed`` picks the seeds, ``--against`` brings earlier results'
tuner runs in as method ``before``, paired by objective and seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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

    second = tmp_path / "second.json"
    done = _bench("--first-seed", "3", "--against", str(first), "--json", str(second))
    assert done.returncode == 0, done.stderr
    out = json.loads(second.read_text())
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
