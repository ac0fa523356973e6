"""The user's clock's one rank program (``benchmarks/userclock/rank.py``, issue 60), run for
real: two ranks on loopback (``autotune launch``), every kind of arm in one world, the
averages checked exactly where the task knows them, a timed arm that stops on rank 0's
clock, and servers (``python -m autotune.server``, as ``autotune launch -k`` starts them)
that serve a group of runtime arms, or a session."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

import zygote

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import clock_bench  # noqa: E402

pytestmark = pytest.mark.slow

# own world: the benchmark's own rank program, launched as its cases launch it (a script
# under `autotune launch`, servers that are `python -m autotune.server`), three launches

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "clock_bench.py"
MARK = "BENCH "
SLEEPY = {"name": "sleepy", "zoo": "resnet50/8", "fwd_ms": 0.0, "bwd_ms": 0.0}


def _run(spec: dict, workers: int = 2, servers: int = 0) -> list[dict]:
    cmd = [sys.executable, "-m", "autotune.cli", "launch", "-n", str(workers),
           "-k", str(servers), str(SCRIPT), "--rank", json.dumps(spec)]
    proc = zygote.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                      text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if MARK in ln]
    assert len(lines) == 1, log[-4000:]  # rank 0 alone reports
    return json.loads(lines[0].split(MARK, 1)[1])["arms"]


def test_every_kind_of_arm_in_one_world_gives_the_exact_average():
    ar2 = {"transport": "allreduce", "streams": 2, "chunk_bytes": 64 << 10}
    ar1 = {"transport": "allreduce", "streams": 1, "chunk_bytes": 1 << 20}
    session = {"store": False, "budget": 0, "timeout": 60}
    arms = _run({"task": SLEEPY, "workers": 2, "timeout": 60, "arms": [
        {"label": "ddp", "kind": "ddp", "bucket_mb": 1.0, "steps": 12},
        {"label": "native", "kind": "native", "options": session, "steps": 12},
        {"label": "hook", "kind": "hook", "options": session, "steps": 12},
        {"label": "ar2", "kind": "runtime", "config": ar2, "steps": 12},
        {"label": "ar1", "kind": "runtime", "config": ar1, "steps": 12},
        {"label": "best", "kind": "runtime", "config": "best", "steps": 10}]})
    assert [a["label"] for a in arms] == ["ddp", "native", "hook", "ar2", "ar1", "best"]
    for a in arms:  # the exact average was checked at steps 10 and 12 on both ranks
        assert a["steps"] == (10 if a["label"] == "best" else 12)
        assert len(a["step_s"]) == a["steps"] and all(t > 0 for t in a["step_s"])
        assert a["wall_s"] >= sum(a["step_s"]) and a["start_s"] >= 0
    assert arms[0]["bucket_mb"] == 1.0
    for a in arms[1:3]:  # budget 0: the session ran DDP's default, never a trial
        assert a["tuning_iterations"] == 0 and not any(a["tuning"]) and a["history"] == []
    ran = {json.dumps(arms[i]["config"], sort_keys=True) for i in (3, 4)}
    assert json.dumps(arms[5]["config"], sort_keys=True) in ran
    for i, want in ((3, ar2), (4, ar1)):
        assert {k: arms[i]["config"][k] for k in want} == want


def test_a_timed_arm_stops_on_rank_0s_clock_and_its_copies_are_evaluated():
    arms = _run({"task": {"name": "cnn", "seed": 1}, "workers": 2, "timeout": 60, "arms": [
        {"label": "ddp", "kind": "ddp", "seconds": 1.5, "snapshots": 4}]})
    a, = arms
    assert a["end_s"][-1] >= 1.5 and a["end_s"][-2] < 1.5  # stopped at the first step past it
    times = [t for t, _, _ in a["curve"]]
    assert times[0] == 0.0 and times == sorted(times) and len(times) >= 3
    assert all(math.isfinite(loss) for _, _, loss in a["curve"])
    assert a["curve"][-1][2] < a["curve"][0][2]  # it learnt


def test_servers_serve_a_group_of_runtime_arms_and_a_session():
    pp = {"transport": "pushpull", "servers": 1, "streams": 2, "chunk_bytes": 256 << 10}
    ar = {"transport": "allreduce", "streams": 1, "chunk_bytes": 1 << 20}
    arms = _run({"task": SLEEPY, "workers": 2, "timeout": 60, "arms": [
        {"label": "pp", "kind": "runtime", "config": pp, "steps": 10},
        {"label": "ar", "kind": "runtime", "config": ar, "steps": 10},
        {"label": "best", "kind": "runtime", "config": "best", "steps": 10}]}, servers=1)
    assert [a["steps"] for a in arms] == [10, 10, 10]
    assert {k: arms[0]["config"][k] for k in pp} == pp
    assert arms[2]["config"] in (arms[0]["config"], arms[1]["config"])
    session, = _run({"task": SLEEPY, "workers": 2, "timeout": 60, "arms": [
        {"label": "session", "kind": "native", "steps": 10,
         "options": {"store": False, "budget": 0, "timeout": 60,
                     "fixed": {"transport": "pushpull", "servers": 1}}}]}, servers=1)
    assert session["steps"] == 10
    assert {c["transport"] for _, _, c in session["switches"]} == {"pushpull"}


def test_a_command_without_a_case_is_the_job_case_and_bad_input_is_refused(capsys):
    assert clock_bench.with_case(["--model", "mlp"]) == ["job", "--model", "mlp"]
    assert clock_bench.with_case([]) == ["job"]
    assert clock_bench.with_case(["hook", "--cases", "servers"])[0] == "hook"
    a = clock_bench.parser().parse_args(clock_bench.with_case(["--steps", "50"]))
    assert (a.case, a.steps, a.rate, a.variants) == ("job", 50, "1gbit", "ddp,native,hook")
    for argv, says in ((["--variants", "ddp,nope"], "variants of"),
                       (["accuracy", "--models", "gpt,resnet"], "unknown or no models"),
                       (["iteration", "--buckets", "5,100"], "must include 25"),
                       (["hook", "--cases", "cloud"], "unknown case"),
                       (["retune", "--scenarios", "flood"], "scenarios of")):
        with pytest.raises(SystemExit) as e:
            clock_bench.main(argv)
        assert e.value.code == 2 and says in capsys.readouterr().err, argv
