"""The one measurement workload (autotune.workload): the emulated-compute job (gradients in
ready order, exact values, compute spread over the backward), its sizes and errors, and
the DDP timing loop over real processes (gloo, the shared 3-rank world), on a sub-group as
``autotune selftest`` uses it and on the whole world as the demo and ``autotune tune`` do."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

import workload_helpers
from autotune.errors import AutotuneError
from autotune.workload import (AverageError, SyntheticJob, WorkloadError, check_average,
                               gradient_bytes, model_shapes, optimum_s, sleepy_model)


def _ready_order(model: nn.Module, params: list[nn.Parameter], x: torch.Tensor
                 ) -> tuple[list[int], list[float], float]:
    """Indices (registration order) of the gradients as they became ready, their times,
    and the whole backward's seconds."""
    ready: list[tuple[int, float]] = []
    handles = [p.register_post_accumulate_grad_hook(
        lambda p, i=i: ready.append((i, time.perf_counter()))) for i, p in enumerate(params)]
    t0 = time.perf_counter()
    model(x).backward()
    took = time.perf_counter() - t0
    for h in handles:
        h.remove()
    return [i for i, _ in ready], [t for _, t in ready], took


def test_sleepy_model_yields_gradients_in_ready_order_with_exact_values():
    shapes = model_shapes("resnet50/16")
    assert len(shapes) == 161
    model = sleepy_model(shapes, fwd_s=0.0, bwd_s=0.05, value=3.0)
    params = list(model.parameters())
    for _ in range(2):  # .grad accumulates into zeros; the model's own tensors stay intact
        model.zero_grad(set_to_none=False)
        order, times, took = _ready_order(model, params, torch.ones(1))
        assert took >= 0.05
        # ready order is the shapes' order: the last registered parameter comes first
        assert [len(params) - 1 - i for i in order] == list(range(len(shapes)))
        assert [tuple(params[i].shape) for i in order] == [s for _, s in shapes]
        check_average(model, 3.0, "sleepy")
        # gradients arrive spread over the backward, not all at its end
        assert times[-1] - times[0] >= 0.03
    params[0].grad.fill_(7.0)  # writing .grad must not alter the next backward's gradient
    model.zero_grad(set_to_none=False)
    model(torch.ones(1)).backward()
    assert bool((params[0].grad == 3.0).all())


def test_the_job_spreads_the_backward_by_bytes_and_its_gradients_are_the_input():
    """One big and one small tensor: by bytes, nearly all the backward's time comes
    before the big one; evenly per tensor, half. Gradients equal ``x``, in each dtype."""
    module = nn.Module()
    module.big = nn.Parameter(torch.zeros(90_000))
    module.small = nn.Parameter(torch.zeros(10_000, dtype=torch.float64))
    for spread, big_share in (("bytes", 0.8), ("tensors", 0.5)):
        job = SyntheticJob(module, compute_s=0.4, backward_fraction=0.5, spread=spread)
        assert job.forward_s == pytest.approx(0.2)
        params = list(module.parameters())
        module.zero_grad(set_to_none=True)
        order, times, took = _ready_order(job, params, torch.tensor(2.5))
        assert order == [1, 0]  # the last registered first
        assert took >= 0.4
        assert times[1] - times[0] == pytest.approx(0.2 * big_share, abs=0.04)
        assert [p.grad.dtype for p in params] == [torch.float32, torch.float64]
        check_average(job, 2.5, spread)
    assert gradient_bytes(job) == gradient_bytes(params) == 90_000 * 4 + 10_000 * 8


def test_gradient_bytes_agree_for_shapes_modules_and_tensors():
    shapes = model_shapes("resnet50/16")
    model = sleepy_model(shapes, 0.0, 0.0, 1.0)
    expected = sum(4 * torch.Size(s).numel() for _, s in shapes)
    assert gradient_bytes(shapes) == gradient_bytes(model) \
        == gradient_bytes(list(model.parameters())) == expected
    assert 7 << 20 < expected < 8 << 20  # 7.6 MiB, as model_shapes says


def test_errors_are_autotune_errors_naming_their_cause():
    module = nn.Linear(3, 2)
    with pytest.raises(WorkloadError, match="compute time must be >= 0 s, got -1"):
        SyntheticJob(module, compute_s=-1.0)
    with pytest.raises(WorkloadError, match="backward_fraction"):
        SyntheticJob(module, backward_fraction=1.5)
    with pytest.raises(WorkloadError, match="spread must be one of bytes, tensors"):
        SyntheticJob(module, spread="layers")
    frozen = nn.Linear(3, 2).requires_grad_(False)
    with pytest.raises(WorkloadError, match="Linear has no trainable parameters"):
        SyntheticJob(frozen)
    assert issubclass(WorkloadError, AutotuneError) and issubclass(WorkloadError, ValueError)
    job = SyntheticJob(module)
    job(torch.tensor(1.0)).backward()
    with pytest.raises(AverageError, match=r"DDP: wrong averaged gradients in 2 of 2 tensors"):
        check_average(job, 2.0, "DDP")
    assert issubclass(AverageError, AutotuneError) and issubclass(AverageError, RuntimeError)


def test_optimum_is_bytepss_formula_plus_the_forward():
    n, M, B = 4, 64 << 20, 24e6
    assert optimum_s(n, 0, M, B, 0.1) == pytest.approx(2 * 3 * M / (4 * B) + 0.1)
    assert optimum_s(n, 4, M, B, 0.0) == pytest.approx(M / B)


@pytest.mark.slow
def test_time_ddp_on_a_sub_group_and_on_the_world(world) -> None:
    res = world(3).run("workload_helpers:time_pair_and_world")
    pair = [r["pair_times"] for r in res[:2]]
    # the slowest of the pair, each timed iteration (the warm-up not among them)
    assert pair[0] == pair[1] and len(pair[0]) == 3
    assert all(t >= workload_helpers.BWD_S for t in pair[0])
    assert res[0]["pair_after"] == [0, 1, 2, 3] and "pair_times" not in res[2]
    world = [r["world_times"] for r in res]
    assert world[0] == world[1] == world[2] and len(world[0]) == 2
    assert all(t >= 0.03 for t in world[0])
    assert res[0]["world_grad_dtypes"] == ["torch.float32", "torch.float64"]
