"""The pieces of the emulated-cluster benchmarks that run without root: the command-line
parsers and the optimum (their emulated-compute job is autotune.workload's, tested in
tests/workload/). The benchmarks themselves need root and minutes; see
benchmarks/RESULTS.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import benchlib  # noqa: E402
from e2e_bench import parse_fixed  # noqa: E402
from goodput_bench import optimum, parse_settings  # noqa: E402
from tuning_bench import parse_size  # noqa: E402


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
@pytest.mark.timeout(180)
def test_measure_B_under_a_flow_cap_is_the_nic_rate_and_one_flow_the_cap():
    from autotune.emulate import Cluster

    with Cluster(hosts=2, rate="200mbit", flow_cap="50mbit") as c:
        link = benchlib.measure_B(c, repeats=3, nbytes=4 << 20)
    nic = 200e6 / 8
    # several flows fill the NIC (payload is at most 0.956 of it); one flow gets the cap
    assert 0.75 * nic <= link["B"] <= nic, link
    assert link["flow_B"] <= 0.3 * nic, link
    assert link["nic"]["streams"] == 16
    assert "one flow" in benchlib.describe_link(link)
