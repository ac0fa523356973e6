"""Rank program for tests/workload/test_workload.py, started by ``autotune launch`` (3
processes, gloo): :func:`autotune.workload.time_ddp` over a group of ranks 0 and 1 (rank 2
stays out, as a selftest's servers do), on the fixed-value emulated job, then over the
whole world on a job whose gradients are its input (``3 (rank + 1)``). Each rank writes
``rank{RANK}.json`` into the directory given as its argument."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BWD_S = 0.02


def main(out: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    from autotune.workload import SyntheticJob, check_average, sleepy_model, time_ddp

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
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
    (out / f"rank{rank}.json").write_text(json.dumps(res))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
