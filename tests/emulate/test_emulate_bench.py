"""The pieces of the emulated-cluster benchmarks that run without root: the command-line
parsers and the optimum (their emulated-compute job is autotune.workload's, tested in
tests/workload/). The benchmarks themselves need root and minutes; see
benchmarks/RESULTS.md."""

from __future__ import annotations

# own world: the benchmarks' own jobs on emulated hosts

import json
import os
import sys
from pathlib import Path

import pytest

import zygote

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import benchlib  # noqa: E402
from goodput_bench import optimum, parse_settings  # noqa: E402
from userclock import hook  # noqa: E402
from userclock.iteration import parse_fixed  # noqa: E402
from userclock.tuning import parse_size  # noqa: E402


def test_parsers():
    assert parse_settings("1x4M, 4x256K,2x64k") == [(1, 4 << 20), (4, 256 << 10), (2, 64 << 10)]
    assert parse_size("16M") == 16 << 20 and parse_size("256k") == 256 << 10
    assert parse_fixed("ar:1x4M,pp4:1x64K,pp0:2x1M") == [
        {"transport": "allreduce", "streams": 1, "chunk_bytes": 4 << 20},
        {"transport": "pushpull", "streams": 1, "chunk_bytes": 64 << 10, "servers": 4},
        {"transport": "pushpull", "streams": 2, "chunk_bytes": 1 << 20, "servers": 0},
    ]
    with pytest.raises(ValueError):
        parse_settings("1x4Q")


def test_optimum_is_the_papers_formulas():
    n, M, B = 4, 64 << 20, 24e6
    assert optimum("allreduce", n, 0, M, B) == pytest.approx(2 * 3 * M / (4 * B))
    assert optimum("pushpull", n, 0, M, B) == pytest.approx(2 * 3 * M / (4 * B))
    for k in (1, 2, 4):
        assert optimum("pushpull", n, k, M, B) == pytest.approx(
            2 * n * (n - 1) * M / ((n * n + k * n - 2 * k) * B))
    assert optimum("pushpull", n, 4, M, B) == pytest.approx(M / B)


@pytest.mark.root
@pytest.mark.serial  # a rate, measured: alone on the machine
@pytest.mark.timeout(180)
def test_measure_B_under_a_flow_cap_is_the_nic_rate_and_one_flow_the_cap():
    run = zygote.run([sys.executable, str(ROOT / "tests" / "measure_b_job.py"), "200mbit",
                      "50mbit"], cwd=ROOT, capture_output=True, text=True, timeout=150,
                     env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(run.stdout.splitlines()[-1])
    link = out["link"]
    nic = 200e6 / 8
    # several flows fill the NIC (payload is at most 0.956 of it); one flow gets the cap
    assert 0.75 * nic <= link["B"] <= nic, link
    assert link["flow_B"] <= 0.3 * nic, link
    assert link["nic"]["streams"] == 16
    assert "one flow" in out["described"]


def test_hook_case_parses_its_cases_and_sums_them_up():
    assert hook.parse_cases("uncapped, capped") == ["capped", "uncapped"]
    with pytest.raises(ValueError):
        hook.parse_cases("capped,cloud")
    M, B = 24 << 20, 48e6
    link = {"B": B, "flow_B": B / 4}
    run = {"bytes": M, "best": {"transport": "allreduce", "streams": 4, "chunk_bytes": 1 << 20},
           "tuning_s": 30.0}
    case = {"link": link, "servers": 0, "flow_cap": "100mbit",
            "runs": [dict(run, ddp_times_s=[3.6, 3.7, 3.5], kept_times_s=[1.0, 1.1, 0.9]),
                     dict(run, ddp_times_s=[3.6], kept_times_s=[1.2])]}
    row = hook.summarize_case("capped", case, 4, 0.05)
    assert row["ddp_s"] == pytest.approx(3.6) and row["hook_s"] == pytest.approx(1.1)
    assert row["ratios"] == pytest.approx([3.6, 3.0]) and row["ratio_spread"] == [3.0, 3.6]
    assert row["met"] and row["optimum_s"] == pytest.approx(1.5 * M / B + 0.05)
    assert row["ddp_bound_s"] == pytest.approx(1.5 * M / (B / 4) + 0.05)
    servers = dict(case, servers=4, flow_cap=None,
                   runs=[dict(run, ddp_times_s=[1.0], kept_times_s=[0.98])])
    row = hook.summarize_case("servers", servers, 4, 0.05)
    assert not row["met"] and "of BytePS's optimum" in row["why_missed"]
    assert row["byteps_optimum_s"] < row["optimum_s"]
    assert row["hook_of_byteps"] == pytest.approx(row["byteps_optimum_s"] / 0.98)
    # intra: the hook against the native runtime on the same job (native/hook >= 1)
    intra = dict(case, flow_cap=None, machines=2,
                 runs=[dict(run, ddp_times_s=[1.0], kept_times_s=[0.9], native_times_s=[0.8],
                            native_best=run["best"])])
    row = hook.summarize_case("intra", intra, 4, 0.05)
    assert row["hook_vs_native"] == pytest.approx(0.8 / 0.9) and not row["met"]
    assert "native runtime" in row["why_missed"]
    assert row["intra_optimum_s"] == pytest.approx(M / B + 0.05)  # the ring of 2 machines


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_hook_case_runs_end_to_end(tmp_path):
    """The hook case, tiny, as a user runs it: 2 workers (+ 2 server hosts, which the
    hook's push/pull may use), ResNet-50 at 1/8 width (2 MiB), 4 tuning iterations; every
    10th step's average and the last checked exactly (~30 s)."""
    out = tmp_path / "hook.json"
    run = zygote.run([sys.executable, str(ROOT / "benchmarks" / "clock_bench.py"), "hook",
                      "--workers", "2", "--model", "resnet50/8", "--budget", "4", "--measure",
                      "2", "--repeats", "1", "--cases", "servers,uncapped", "--fwd-ms", "5",
                      "--bwd-ms", "15", "--json", str(out)], cwd=ROOT, capture_output=True,
                     text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    res = json.loads(out.read_text())
    assert [r["case"] for r in res["rows"]] == ["servers", "uncapped"]
    for r in res["rows"]:
        assert r["ddp_s"] > 0 and r["hook_s"] > 0 and r["kept_iterations"] == [2]
        assert r["speedup_vs_ddp"] == pytest.approx(r["ddp_s"] / r["hook_s"], rel=0.5)
    assert res["raw"]["servers"]["runs"][0]["world"] == 4
    assert 0 < res["rows"][0]["hook_of_byteps"]
    assert "BytePS optimum with them" in run.stdout  # the servers case's line
