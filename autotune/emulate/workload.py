"""A communication-bound training job for the emulated cluster: real gradient shapes,
emulated compute, and the analytic optimum to compare with.

:func:`model_shapes` gives a zoo model's gradient shapes in ready order;
:func:`sleepy_model` is a module with parameters of those shapes whose forward and
backward *sleep* for the compute time (the backward yields the gradients one by one in
ready order, so communication overlaps it as in a real job), and whose gradients are
known exactly; :func:`optimum_s` is the fastest an iteration of it can be on ``n`` workers
and ``k`` servers at ``B`` bytes/s (BytePS's formulas); :func:`time_ddp` times DDP on a
job, the reference they are all compared with. Used by ``make demo``
(:mod:`autotune.demo`), the benchmarks (benchmarks/benchlib.py), and ``time_ddp`` also
by the ``autotune tune`` job (:mod:`autotune.offline.worker`).
"""

from __future__ import annotations

from typing import Callable

from autotune.sim.formulas import allreduce_time, byteps_time


def model_shapes(name: str) -> list[tuple[str, tuple[int, ...]]]:
    """Gradient shapes in ready order of a zoo model; ``resnet50/16`` is ResNet-50 with
    base width 16 (a quarter of the channels: the same 161 tensors, 7.6 MiB)."""
    from autotune import zoo

    base, _, width = name.partition("/")
    return zoo.gradient_shapes(base, **({"base_width": int(width)} if width else {}))


def sleepy_model(shapes: list[tuple[str, tuple[int, ...]]], fwd_s: float, bwd_s: float,
                 value: float):
    """An ``nn.Module`` with real parameters of ``shapes`` (ready order) whose forward
    sleeps ``fwd_s`` and whose backward produces the gradients one by one in ready order,
    sleeping ``bwd_s / len(shapes)`` before each (emulated compute that communication can
    overlap, as in a real backward). Every gradient is ``value`` everywhere, so the
    average over workers is known exactly. Call it with any tensor; it returns a scalar."""
    import time

    import torch
    from torch import nn

    step = bwd_s / max(1, len(shapes))

    class Layer(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, p, g):  # noqa: D401 - autograd API
            ctx.g = g
            return x.clone()

        @staticmethod
        def backward(ctx, grad_out):
            time.sleep(step)
            return grad_out, ctx.g, None

    class Sleepy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # registered in forward order = reverse ready order, like a real network
            self.params = nn.ParameterList(nn.Parameter(torch.zeros(s))
                                           for _, s in reversed(shapes))
            self.grads = [torch.full(s, float(value)) for _, s in reversed(shapes)]
            for p in self.params:  # accumulate into .grad; never alias self.grads
                p.grad = torch.zeros_like(p)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            time.sleep(fwd_s)
            y = x.sum().reshape(1)
            for p, g in zip(self.params, self.grads):
                y = Layer.apply(y, p, g)
            return y.sum()

    return Sleepy()


def check_average(model, want: float, what: str) -> None:
    """Every averaged gradient of a :func:`sleepy_model` is exactly ``want`` (the mean
    of the workers' fills, rank + 1); raise naming ``what`` otherwise."""
    bad = sum(1 for p in model.params if not bool((p.grad == want).all()))
    if bad:
        raise AssertionError(f"{what}: wrong averaged gradients in {bad} tensors")


def time_ddp(module, warmup: int, iterations: int, *, bucket_cap_mb: float = 25.0,
             x=None, init_sync: bool = False,
             after: Callable[[int], None] | None = None) -> list[float]:
    """DDP (the initialised gloo world) on ``module``, called with ``x`` (default
    ``torch.ones(1)``): the slowest worker's time of each of ``iterations`` iterations
    after ``warmup``. Each iteration starts with a barrier (the part of a session's
    per-iteration sync); ``after(i)`` runs after iteration ``i``, its gradients in
    ``.grad``."""
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(module, bucket_cap_mb=bucket_cap_mb, init_sync=init_sync)
    x = torch.ones(1) if x is None else x
    times = []
    for i in range(warmup + iterations):
        module.zero_grad(set_to_none=False)
        dist.barrier()
        t0 = time.perf_counter()
        ddp(x).backward()
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if i >= warmup:
            times.append(float(t))
        if after is not None:
            after(i)
    return times


def optimum_s(n: int, k: int, M: float, B: float, fwd_s: float) -> float:
    """The analytic optimum of one iteration: the forward, then communication with the
    backward fully overlapped (BytePS OSDI 2020: push/pull with the optimal split over
    ``k`` servers, ``byteps_time``; ring all-reduce, ``allreduce_time``, for ``k = 0``)."""
    comm = byteps_time(n, k, M, B) if k > 0 else allreduce_time(n, M, B)
    return comm + fwd_s


def gradient_bytes(shapes: list[tuple[str, tuple[int, ...]]]) -> int:
    """float32 bytes of all gradients of ``shapes``."""
    total = 0
    for _, shape in shapes:
        n = 1
        for d in shape:
            n *= d
        total += 4 * n
    return total
