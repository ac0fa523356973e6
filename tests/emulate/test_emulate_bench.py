"""The pieces of the emulated-cluster benchmarks that run without root: the emulated-compute
model (gradients in ready order, exact values, overlap-friendly backward) and the
command-line parsers. The benchmarks themselves need root and minutes; see
benchmarks/RESULTS.md."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import benchlib  # noqa: E402
from e2e_bench import parse_fixed  # noqa: E402
from goodput_bench import optimum, parse_settings  # noqa: E402
from tuning_bench import parse_size  # noqa: E402


def test_sleepy_model_yields_gradients_in_ready_order_with_exact_values():
    shapes = benchlib.model_shapes("resnet50/16")
    assert len(shapes) == 161
    model = benchlib.sleepy_model(shapes, fwd_s=0.0, bwd_s=0.05, value=3.0)
    ready: list[tuple[int, float]] = []
    params = list(model.params)
    for i, p in enumerate(params):
        p.register_post_accumulate_grad_hook(
            lambda p, i=i: ready.append((i, time.perf_counter())))
    for _ in range(2):  # .grad accumulates into zeros; the model's own tensors stay intact
        model.zero_grad(set_to_none=False)
        ready.clear()
        t0 = time.perf_counter()
        model(torch.ones(1)).backward()
        assert time.perf_counter() - t0 >= 0.05
        # ready order is the shapes' order: the last registered parameter comes first
        assert [len(params) - 1 - i for i, _ in ready] == list(range(len(shapes)))
        assert [tuple(params[i].shape) for i, _ in ready] == [s for _, s in shapes]
        assert all(bool((p.grad == 3.0).all()) for p in params)
        # gradients arrive spread over the backward, not all at its end
        assert ready[-1][1] - ready[0][1] >= 0.03
    params[0].grad.fill_(7.0)  # writing .grad must not alter the next backward's gradient
    model.zero_grad(set_to_none=False)
    model(torch.ones(1)).backward()
    assert bool((params[0].grad == 3.0).all())


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
