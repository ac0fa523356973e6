"""Accelerate with autotune: a classifier of scikit-learn's bundled handwritten digits
(1,797 real 8x8 scans, no download), trained with gradient accumulation; DDP's
communication is tuned by one session around the loop. The two new lines are marked.

    torchrun --standalone --nproc-per-node 2 examples/train_accelerate.py --steps 200

``accelerator.prepare(model)`` returns Accelerate's DDP model; ``autotune.session(ddp)``
tunes how DDP's buckets cross the wire. ``session.step()`` goes inside
``accelerator.accumulate()``: a micro-step (its backward ran inside DDP's ``no_sync()``)
returns at once and is not counted, so autotune's iterations are the steps that
synchronise (``accelerator.sync_gradients``), which the last line of output shows.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import DataLoader

import autotune
from digits import classifier, digits  # examples/ is on the script's path


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200,
                   help="optimizer steps, each over --accum micro-batches")
    p.add_argument("--budget", type=int, default=60, help="iterations spent on trials")
    p.add_argument("--total-steps", type=int, default=None,
                   help="the job's length autotune sizes its search to (default: --steps)")
    p.add_argument("--db", default=None, help="results store (default ./autotune.db)")
    p.add_argument("--batch", type=int, default=16, help="micro-batch size per process")
    p.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    accelerator = Accelerator(gradient_accumulation_steps=args.accum, cpu=True)
    dataset = digits()
    model = classifier()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, drop_last=True)
    ddp, opt, loader = accelerator.prepare(model, opt, loader)  # ddp: DistributedDataParallel

    micro = synced = 0
    # new line 1: DDP's communication is tuned while it trains
    with autotune.session(ddp, budget=args.budget, db=args.db, job="train_accelerate",
                          total_steps=args.total_steps or args.steps,
                          samples_per_step=args.batch * args.accum) as session:
        while synced < args.steps:
            for x, y in loader:
                with accelerator.accumulate(ddp):
                    loss = nn.functional.cross_entropy(ddp(x), y)
                    accelerator.backward(loss)
                    session.step()  # new line 2: counts only the steps that synchronise
                    opt.step()
                    opt.zero_grad()
                micro += 1
                synced += accelerator.sync_gradients
                if accelerator.sync_gradients and accelerator.is_main_process and synced % 50 == 0:
                    print(f"step {synced:4d}  loss {loss.item():.4f}", flush=True)
                if synced == args.steps:
                    break

    if accelerator.is_main_process:
        from autotune.units import fmt_config

        with torch.no_grad():
            x, y = dataset.tensors
            accuracy = (ddp.module(x).argmax(1) == y).float().mean().item()
        print(f"accuracy on all {len(y)} digits: {accuracy:.3f}", flush=True)
        print(f"kept configuration: {fmt_config(session.best)}", flush=True)
        print(f"iterations counted: {session.iteration} (synchronising steps {synced}, "
              f"micro-steps {micro})", flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
