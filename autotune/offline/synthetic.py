"""A synthetic training step with a real model's gradients and emulated compute.

:class:`SyntheticJob` wraps a model (a zoo model or a user's) and, instead of running
its forward pass, produces one gradient per parameter of exactly the parameter's shape,
in the order a real backward pass would (the reverse of registration order, what DDP
and :func:`autotune.zoo.gradient_shapes` assume). Compute is emulated by sleeping:
``(1 - backward_fraction) * compute_s`` in ``forward``, and the rest spread over the
backward pass in proportion to each gradient's bytes, so gradients become ready at the
pace they would on the real device and communication can overlap them as it would.
Sleeping gives the CPU to the communication threads, as a GPU computing would.

The gradient of every parameter is filled with ``x`` (the input, e.g. ``rank + 1``), so
averaged gradients are checkable. The parameters' values are never read: the model can
be allocated with ``to_empty`` (no initialisation cost).

Works under :func:`autotune.session` (its hooks see the gradients as they are produced)
and under ``DistributedDataParallel`` (the reference), on the same parameters.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch import nn


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
        # An expanded scalar: no work here; AccumulateGrad writes the full .grad, as the
        # device would.
        return None, (grad * x).to(ctx.dtype).expand(ctx.shape), None


class SyntheticJob(nn.Module):
    """``loss = job(x); loss.backward()`` gives every trainable parameter of ``model`` a
    gradient equal to ``x`` (a 0-d tensor), in backward-ready order, taking about
    ``compute_s`` seconds in all (see the module docstring)."""

    def __init__(self, model: nn.Module, compute_s: float = 0.0,
                 backward_fraction: float = 2 / 3) -> None:
        super().__init__()
        if compute_s < 0:
            raise ValueError(f"compute time must be >= 0, got {compute_s}")
        if not 0.0 <= backward_fraction <= 1.0:
            raise ValueError(f"backward_fraction must be in [0, 1], got {backward_fraction}")
        self.model = model
        self.compute_s = float(compute_s)
        self.backward_fraction = float(backward_fraction)
        self._params = [p for p in model.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError(f"{type(model).__name__} has no trainable parameters")
        total = sum(p.numel() * p.element_size() for p in self._params)
        bwd = self.compute_s * self.backward_fraction
        self._delays = [bwd * p.numel() * p.element_size() / total for p in self._params]

    @property
    def forward_s(self) -> float:
        return self.compute_s * (1.0 - self.backward_fraction)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.forward_s > 0:
            time.sleep(self.forward_s)
        loss = x.new_zeros(())
        # Built in registration order: backward visits the last term first, so the last
        # registered parameter's gradient is ready first.
        for p, seconds in zip(self._params, self._delays):
            loss = loss + _LayerBackward.apply(x, p, seconds)
        return loss


def materialize(model: nn.Module) -> nn.Module:
    """A meta-device model given CPU storage without initialising it (zeros), in place."""
    model.to_empty(device="cpu")
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            t.zero_()
    return model


def gradient_bytes(model: nn.Module) -> int:
    """Bytes of one full set of ``model``'s gradients."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


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
