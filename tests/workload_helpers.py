"""Rank code for tests/workload/test_workload.py, a case of the shared 3-rank world
(tests/worlds.py, gloo): :func:`autotune.workload.time_ddp` over a group of ranks 0 and 1 (rank 2
stays out, as a selftest's servers do), on the fixed-value emulated job, then over the
whole world on a job whose gradients are its input (``3 (rank + 1)``). Each rank returns
what it saw."""

from __future__ import annotations

BWD_S = 0.02


def time_pair_and_world(out: str) -> dict:
    import torch
    import torch.distributed as dist
    from torch import nn

    from autotune.workload import SyntheticJob, check_average, sleepy_model, time_ddp

    rank, world = dist.get_rank(), dist.get_world_size()
    pair = dist.new_group([0, 1])
    shapes = [("a", (300, 20)), ("b", (20,)), ("c", (7, 5, 3)), ("d", (1000,))]
    res: dict = {"rank": rank}
    if rank < 2:
        model = sleepy_model(shapes, 0.0, BWD_S, rank + 1)
        seen: list[int] = []

        def after(i: int) -> None:
            check_average(model, 1.5, f"pair, iteration {i}")
            seen.append(i)

        res["pair_times"] = time_ddp(model, 1, 3, process_group=pair, after=after)
        res["pair_after"] = seen
    module = nn.Module()
    module.w = nn.Parameter(torch.zeros(64, 32))
    module.b = nn.Parameter(torch.zeros(32, dtype=torch.float64))
    job = SyntheticJob(module, compute_s=0.03, backward_fraction=0.5)
    # 3 (rank + 1): DDP divides by the world size before summing, so these stay exact
    res["world_times"] = time_ddp(job, 0, 2, x=torch.tensor(3.0 * (rank + 1)), init_sync=True)
    check_average(job, 3 * (world + 1) / 2, "world")
    res["world_grad_dtypes"] = [str(p.grad.dtype) for p in module.parameters()]
    dist.barrier()
    return res
