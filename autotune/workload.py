"""The one measurement workload: a training job with a real model's gradients and emulated
compute, DDP's time on it (the reference), and the analytic optimum to compare with.

* :class:`SyntheticJob` wraps a model (a zoo model, a user's, or parameters of given
  shapes) and, instead of running its forward pass, produces one gradient per trainable
  parameter of exactly its shape and dtype, in the order a real backward pass would (the
  reverse of registration order, what DDP and :func:`autotune.zoo.gradient_shapes`
  assume). Compute is emulated by sleeping: the forward's share before the backward,
  the backward's spread over the gradients (in proportion to their bytes, or evenly per
  tensor), so gradients become ready at the pace they would on the device and
  communication overlaps them as in a real job. Sleeping gives the CPU to the
  communication threads, as a GPU computing would. Every gradient is one known value
  (the input ``x``, e.g. ``rank + 1``, or a fixed ``value``), so averages are checkable
  (:func:`check_average`).
* :func:`sleepy_model` is that job on fresh parameters of a zoo model's shapes
  (:func:`model_shapes`), with a given forward and backward time.
* :func:`time_ddp` is the one DDP timing loop: the slowest worker's time per iteration of
  ``torch.nn.parallel.DistributedDataParallel`` (gloo) on a module; :func:`ddp_step_s`
  its timed iteration, for loops that alternate two DDP models (``autotune selftest
  --ddp``).
* :func:`gradient_bytes` is the size of one set of gradients; :func:`optimum_s` the
  fastest an iteration can be (BytePS's formulas); :func:`measure_compute_ms` a zoo
  model's real compute time on this CPU, to emulate; :func:`materialize` gives a
  meta-device model storage.

Used by ``make demo`` (:mod:`autotune.demo`), the benchmarks (benchmarks/benchlib.py),
``autotune tune`` (:mod:`autotune.offline`) and ``autotune selftest``
(:mod:`autotune.selftest`). It lives at the package root, not in :mod:`autotune.emulate`,
because only some of its users run on the emulated cluster. Imports torch.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from autotune.errors import AutotuneError
from autotune.sim.formulas import allreduce_time, byteps_time

__all__ = ["AverageError", "SPREADS", "SyntheticJob", "WorkloadError", "check_average",
           "ddp_step_s", "gradient_bytes", "materialize", "measure_compute_ms",
           "model_shapes", "optimum_s", "sleepy_model", "time_ddp"]

Shapes = Sequence[tuple[str, tuple[int, ...]]]
#: how the backward's time is spread over the gradients: by their bytes, or evenly
SPREADS = ("bytes", "tensors")


class WorkloadError(AutotuneError, ValueError):
    """A workload that cannot be built as asked (negative times, no trainable parameters,
    an unknown spread)."""


class AverageError(AutotuneError, RuntimeError):
    """Gradients that should hold the exact average over the workers do not."""


# ---- the job ----------------------------------------------------------------------------

class _LayerBackward(torch.autograd.Function):
    """Stands for one layer's backward: sleeps, then yields the gradient of ``p``
    (every element ``x`` times the incoming gradient)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: torch.Tensor, seconds: float) -> torch.Tensor:
        ctx.seconds = seconds
        ctx.shape = p.shape
        ctx.dtype = p.dtype
        ctx.save_for_backward(x)
        return x.new_zeros(())

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor, None]:
        if ctx.seconds > 0:
            time.sleep(ctx.seconds)
        (x,) = ctx.saved_tensors
        # An expanded scalar: no work here, and a new tensor every time (writing .grad
        # never alters the next gradient); AccumulateGrad writes the full .grad, as the
        # device would.
        return None, (grad * x).to(ctx.dtype).expand(ctx.shape), None


class SyntheticJob(nn.Module):
    """``loss = job(x); loss.backward()`` gives every trainable parameter of ``model`` a
    gradient of its shape, every element ``value`` (default: the input ``x``, a 0-d
    tensor), in backward-ready order, taking about ``compute_s`` seconds: the forward
    sleeps ``(1 - backward_fraction) * compute_s``, the backward the rest, spread over the
    gradients by their bytes (``spread="bytes"``) or evenly (``"tensors"``). ``model``'s
    own forward is never run and its parameters' values are never read."""

    def __init__(self, model: nn.Module, compute_s: float = 0.0,
                 backward_fraction: float = 2 / 3, *, spread: str = "bytes",
                 value: float | None = None) -> None:
        super().__init__()
        if not compute_s >= 0:
            raise WorkloadError(f"compute time must be >= 0 s, got {compute_s}")
        if not 0.0 <= backward_fraction <= 1.0:
            raise WorkloadError(f"backward_fraction must be in [0, 1], got {backward_fraction}")
        if spread not in SPREADS:
            raise WorkloadError(f"spread must be one of {', '.join(SPREADS)}, got {spread!r}")
        self.model = model
        self.compute_s = float(compute_s)
        self.backward_fraction = float(backward_fraction)
        self.spread = spread
        self.value = None if value is None else torch.tensor(float(value))
        self._params = [p for p in model.parameters() if p.requires_grad]
        if not self._params:
            raise WorkloadError(f"{type(model).__name__} has no trainable parameters")
        bwd = self.compute_s * self.backward_fraction
        if spread == "tensors":
            self._delays = [bwd / len(self._params)] * len(self._params)
        else:
            total = gradient_bytes(self._params)
            self._delays = [bwd * p.numel() * p.element_size() / total if total else 0.0
                            for p in self._params]

    @property
    def forward_s(self) -> float:
        """Seconds the forward sleeps."""
        return self.compute_s * (1.0 - self.backward_fraction)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Through ``model``'s own call, so that its hooks run (a session's DDP applied
        in place prepares the backward there), with the synthetic forward in place of the
        model's for this call only (an instance attribute over the class's ``forward``)."""
        model = self.model
        model.forward = self._synthetic
        try:
            return model(x)
        finally:
            del model.forward

    def _synthetic(self, x: torch.Tensor) -> torch.Tensor:
        if self.forward_s > 0:
            time.sleep(self.forward_s)
        g = self.value if self.value is not None else x
        loss = g.new_zeros(())
        # Built in registration order: backward visits the last term first, so the last
        # registered parameter's gradient is ready first.
        for p, seconds in zip(self._params, self._delays):
            loss = loss + _LayerBackward.apply(g, p, seconds)
        return loss


class _Parameters(nn.Module):
    """Zero float32 parameters of ``shapes`` (ready order), registered in forward order
    (the reverse, like a real network) as ``params``; their ``.grad`` starts as zeros, so
    every backward accumulates into it in place."""

    def __init__(self, shapes: Shapes) -> None:
        super().__init__()
        self.params = nn.ParameterList(nn.Parameter(torch.zeros(s)) for _, s in reversed(shapes))
        for p in self.params:
            p.grad = torch.zeros_like(p)


def sleepy_model(shapes: Shapes, fwd_s: float, bwd_s: float, value: float) -> SyntheticJob:
    """A :class:`SyntheticJob` on new parameters of ``shapes`` (ready order, as
    :func:`model_shapes` gives them) whose forward sleeps ``fwd_s`` and whose backward
    produces the gradients one by one in ready order, sleeping ``bwd_s / len(shapes)``
    before each. Every gradient is ``value`` everywhere, so the average over workers is
    known exactly. Call it with any tensor; it returns a scalar."""
    if not (fwd_s >= 0 and bwd_s >= 0):
        raise WorkloadError(f"compute times must be >= 0 s, got forward {fwd_s}, "
                            f"backward {bwd_s}")
    total = fwd_s + bwd_s
    return SyntheticJob(_Parameters(shapes), total, bwd_s / total if total else 0.0,
                        spread="tensors", value=value)


def model_shapes(name: str) -> list[tuple[str, tuple[int, ...]]]:
    """Gradient shapes in ready order of a zoo model; ``resnet50/16`` is ResNet-50 with
    base width 16 (a quarter of the channels: the same 161 tensors, 7.6 MiB)."""
    from autotune import zoo

    return zoo.gradient_shapes(name)


def materialize(model: nn.Module) -> nn.Module:
    """A meta-device model given CPU storage without initialising it (zeros), in place."""
    model.to_empty(device="cpu")
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            t.zero_()
    return model


def gradient_bytes(of: nn.Module | Iterable[torch.Tensor] | Shapes) -> int:
    """Bytes of one full set of gradients: of a module's trainable parameters or of
    tensors (each in its own dtype), or of ``(name, shape)`` pairs as :func:`model_shapes`
    gives them (float32, the zoo's dtype)."""
    if isinstance(of, nn.Module):
        return sum(p.numel() * p.element_size() for p in of.parameters() if p.requires_grad)
    items = list(of)
    if all(isinstance(t, torch.Tensor) for t in items):
        return sum(t.numel() * t.element_size() for t in items)
    return sum(4 * math.prod(shape) for _, shape in items)


def check_average(model: nn.Module, want: float, what: str) -> None:
    """Every trainable parameter's ``.grad`` of ``model`` (a :class:`SyntheticJob`) is
    exactly ``want`` (the mean of the workers' values, e.g. of ``rank + 1``); raise
    :class:`AverageError` naming ``what`` otherwise."""
    params = [p for p in model.parameters() if p.requires_grad]
    bad = sum(1 for p in params if p.grad is None or not bool((p.grad == want).all()))
    if bad:
        raise AverageError(f"{what}: wrong averaged gradients in {bad} of {len(params)} "
                           f"tensors (want {want:g} everywhere)")


def measure_compute_ms(name: str, batch_size: int = 2, steps: int = 3, **kwargs: Any) -> float:
    """Median forward + backward time (ms) of the zoo model ``name`` on this CPU with
    random inputs of ``batch_size`` (first step not counted)."""
    from autotune import zoo

    model = zoo.build(name, device="cpu", **kwargs)
    inputs = zoo.example_inputs(name, batch_size=batch_size, model=model)
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        zoo.synthetic_loss(model(*inputs)).backward()
        if i:
            times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    return statistics.median(times) * 1e3


# ---- the reference and the optimum -------------------------------------------------------

def time_ddp(module: nn.Module, warmup: int, iterations: int, *, bucket_cap_mb: float = 25.0,
             x: torch.Tensor | None = None, init_sync: bool = False,
             process_group: Any = None, device: torch.device | None = None,
             after: Callable[[int], None] | None = None,
             min_seconds: float = 0.0) -> list[float]:
    """DDP (gloo) on ``module``, called with ``x`` (default ``torch.ones(1)``), over
    ``process_group`` (default: the initialised world; give the workers' group when the
    world has other ranks): the slowest worker's time of each of ``iterations``
    iterations after ``warmup``, and more while those times add up to less than
    ``min_seconds`` (a fast job's few iterations measure noise; at most
    :data:`MAX_TIMED` in all; every rank sees the same times, so all stop together).
    Each iteration starts with a barrier (the part of a session's per-iteration sync)
    and ends when backward returned (DDP has averaged; on a CUDA ``device``, once the
    device is done too). ``after(i)`` runs after iteration ``i``, outside the timed
    window, its averaged gradients in ``.grad``."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = device is not None and device.type == "cuda"
    kwargs: dict[str, Any] = {"device_ids": [device.index]} if cuda else {}
    ddp = DDP(module, bucket_cap_mb=bucket_cap_mb, init_sync=init_sync,
              process_group=process_group, **kwargs)
    x = torch.ones(1) if x is None else x
    times: list[float] = []
    i = 0
    while i < warmup or more_timed(times, iterations, min_seconds):
        t = torch.tensor([ddp_step_s(ddp, x, process_group, device)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=process_group)
        if i >= warmup:
            times.append(float(t))
        if after is not None:
            after(i)
        i += 1
    return times


#: the most timed iterations :func:`more_timed` asks for, however short they are
MAX_TIMED = 10_000


def more_timed(times: list[float], iterations: int, min_seconds: float) -> bool:
    """Whether a timing of ``times`` so far needs another iteration: fewer than
    ``iterations``, or less than ``min_seconds`` in all (under :data:`MAX_TIMED`)."""
    return len(times) < iterations or (sum(times) < min_seconds and len(times) < MAX_TIMED)


def ddp_step_s(ddp: nn.Module, x: torch.Tensor, barrier_group: Any = None,
               device: torch.device | None = None) -> float:
    """One timed iteration of a DDP model (:func:`time_ddp`'s, and ``autotune selftest
    --ddp``'s): its gradients zeroed in place and a barrier on ``barrier_group``
    (untimed), then ``ddp(x).backward()`` until DDP has averaged (on a CUDA ``device``,
    until the device is done too). This worker's seconds."""
    ddp.module.zero_grad(set_to_none=False)
    dist.barrier(group=barrier_group)
    t0 = time.perf_counter()
    ddp(x).backward()
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def optimum_s(n: int, k: int, M: float, B: float, fwd_s: float) -> float:
    """The analytic optimum of one iteration: the forward, then communication with the
    backward fully overlapped (BytePS OSDI 2020: push/pull with the optimal split over
    ``k`` servers, ``byteps_time``; ring all-reduce, ``allreduce_time``, for ``k = 0``)."""
    comm = byteps_time(n, k, M, B) if k > 0 else allreduce_time(n, M, B)
    return comm + fwd_s
