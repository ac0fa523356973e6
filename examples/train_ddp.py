"""Keep DDP, add autotune: the MLP of train_mlp.py under DistributedDataParallel, with its
communication tuned through autotune's comm hook. The changed lines are marked.

    autotune launch --workers 4 examples/train_ddp.py --steps 300
    autotune launch --workers 2 --servers 1 examples/train_ddp.py   # + a Summation Service
    torchrun --nproc-per-node 4 examples/train_ddp.py --steps 300
    torchrun --nproc-per-node 8 examples/train_ddp.py --device cuda     # one GPU per rank: NCCL
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import autotune
from train_mlp import make_model, parse_args, pick_device  # examples/ is on the script's path


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])

    torch.set_num_threads(1)
    dev = pick_device(args.device)
    # NCCL where every rank has a GPU of its own; gloo on CPU, or where ranks share a GPU
    own_gpu = dev.type == "cuda" and int(os.environ.get("LOCAL_WORLD_SIZE", 1)) <= torch.cuda.device_count()
    dist.init_process_group("nccl" if own_gpu else "gloo")
    torch.manual_seed(args.seed)
    # DDP as ever (its start, buffers, no_sync, buckets), on the workers' group: the job's
    # Summation Service servers, if any, are not DDP's (without servers: the world)
    model = DDP(make_model().to(dev), device_ids=[dev.index] if dev.type == "cuda" else None,
                process_group=autotune.workers_group())
    teacher = torch.nn.Linear(64, 1).to(dev)  # the same target function on every rank (same seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rank = dist.get_rank()
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank + 1)

    # the one new line: DDP's communication is tuned while it trains
    with autotune.session(model, budget=args.budget, db=args.db, samples_per_step=args.batch,
                          total_steps=args.total_steps or args.steps,
                          job="train_ddp") as session:
        for step in range(args.steps):
            x = torch.randn(args.batch, 64, generator=gen).to(dev)
            with torch.no_grad():
                y = torch.tanh(teacher(x))
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()  # DDP averages the gradients, through autotune's hook
            session.step()
            opt.step()
            opt.zero_grad(set_to_none=False)
            if rank == 0 and (step % 50 == 0 or step == args.steps - 1):
                print(f"step {step:4d}  loss {loss.item():.4f}", flush=True)
    if rank == 0:
        from autotune.units import fmt_config

        print(f"kept configuration: {fmt_config(session.best)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
