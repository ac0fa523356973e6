"""The one benchmark harness (``benchmarks/bench.py``, issue 60): every benchmark belongs to a
family, takes ``--json`` and the options of its short run; ``list`` shows them; ``run``
runs a family for real, writes each benchmark's JSON and what ran, and says when one
failed."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench  # noqa: E402


def _harness(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "250"})


def _options(path: Path) -> set[str]:
    """The option strings a script's argparse parser is given."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            found |= {a.value for a in node.args
                      if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return found


def test_every_file_in_benchmarks_is_a_benchmark_of_one_family_or_named_as_not_one():
    files = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    keys = [(b.name, b.case) for b in bench.BENCHES]
    assert len(keys) == len(set(keys)), "a benchmark listed twice"
    names = {b.name for b in bench.BENCHES}
    assert not set(names) & set(bench.NOT_BENCHMARKS)
    assert not files - set(names) - set(bench.NOT_BENCHMARKS), \
        f"files in benchmarks/ no family holds: {sorted(files - set(names) - set(bench.NOT_BENCHMARKS))}"
    assert not (set(names) | set(bench.NOT_BENCHMARKS)) - files, "listed, but no such file"
    assert {b.family for b in bench.BENCHES} == set(bench.FAMILIES)


def test_every_benchmark_takes_json_and_the_options_of_its_short_run():
    wrong = {}
    for b in bench.BENCHES:
        options = _options(b.path) | _options(b.doc_path)  # a case's own options too
        missing = {"--json"} | {q for q in b.quick if q.startswith("--")}
        if missing - options:
            wrong[b.key] = sorted(missing - options)
    assert not wrong, f"options a benchmark does not have: {wrong}"


def test_list_shows_every_family_and_benchmark_with_what_it_measures():
    out = _harness("list")
    assert out.returncode == 0, out.stderr
    for family in bench.FAMILIES:
        assert family in out.stdout
    for b in bench.BENCHES:
        assert f"{b.name} {b.case}".strip() in out.stdout
        assert b.what() and b.what()[:30] in out.stdout, b.key


def test_a_family_runs_for_real_and_its_json_and_what_ran_are_written(tmp_path):
    # the short run's arguments, then the ones after "--" (the last of a repeated option
    # wins: 30 runs, not the short run's 100, to keep the test short)
    out = _harness("run", "store", "--quick", "--out", str(tmp_path), "--", "--runs", "30")
    assert out.returncode == 0, out.stderr[-3000:]
    ran = json.loads((tmp_path / "harness.json").read_text())
    assert [r["benchmark"] for r in ran["runs"]] == ["store_bench"]
    row = ran["runs"][0]
    assert row["rc"] == 0 and row["wrote"] and row["wall_s"] > 0 and ran["quick"]
    assert row["command"][-6:] == ["--repeats", "1", "--runs", "30",
                                   "--json", str(tmp_path / "store_bench.json")]
    assert "--runs" in row["command"][:-6] and "100" in row["command"][:-6]
    result = json.loads((tmp_path / "store_bench.json").read_text())
    assert result["database"]["runs"] == 30
    assert set(result["queries"]) == {"exact", "near", "new-cluster", "novel"}


def test_a_benchmark_that_fails_fails_the_run_and_says_so(tmp_path):
    out = _harness("run", "store/store_bench", "--out", str(tmp_path), "--",
                   "--runs", "not-a-number")
    assert out.returncode == 1
    assert "store_bench exited 2" in out.stderr
    row = json.loads((tmp_path / "harness.json").read_text())["runs"][0]
    assert row["rc"] == 2 and not row["wrote"] and "not-a-number" in row["command"]


def test_a_dry_run_prints_the_commands_and_runs_nothing(tmp_path):
    out = _harness("run", "clock", "--quick", "--dry-run", "--out", str(tmp_path / "x"))
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    assert len(lines) == sum(b.family == "clock" for b in bench.BENCHES)
    assert any("clock_bench.py job --model mlp --steps 300 --runs 1 --json" in ln for ln in lines)
    assert any("clock_bench.py accuracy --quick --json" in ln and "accuracy.json" in ln
               for ln in lines)
    assert not (tmp_path / "x").exists()
    # a case by its name, every case of the script by the script's
    one = _harness("run", "clock/iteration", "--quick", "--dry-run", "--out", str(tmp_path))
    line, = [ln for ln in one.stdout.splitlines() if ln.strip()]
    assert f"clock_bench.py iteration --repeats 1 --json {tmp_path / 'iteration.json'}" in line
    every = _harness("run", "clock/clock_bench", "--dry-run")
    assert len([ln for ln in every.stdout.splitlines() if ln.strip()]) == len(lines) == 5


def test_an_unknown_family_or_benchmark_is_an_error_that_lists_the_families():
    for what in ("nope", "clock/nope"):
        out = _harness("run", what, "--dry-run")
        assert out.returncode != 0
        assert f"no benchmark '{what}'" in out.stderr and "runtime, tuner, clock" in out.stderr
