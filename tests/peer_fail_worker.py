"""Per-rank script for tests/session/test_peer_failure.py: a session (native, or inside
DDP) under ``autotune launch -n 2`` in which worker 1's own code raises
``RuntimeError("boom")`` at step 5, inside the ``with`` block; then its connections
close and it takes ``SLOW_EXIT`` seconds more to exit (as a big process's teardown may),
so that the survivors exit before it does.

    autotune launch -n 2 tests/peer_fail_worker.py {native,ddp} DB
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

import autotune

FAIL_AT = 5
SLOW_EXIT = 3.0


def main() -> None:
    mode, db = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model: nn.Module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    if mode == "ddp":
        dist.init_process_group("gloo", timeout=timedelta(seconds=30))
        model = nn.parallel.DistributedDataParallel(model)
    with autotune.session(model, budget=10, db=db, timeout=30, job="peer_fail",
                          warmup=1, trial_iterations=2, spend=None) as session:
        for step in range(20):
            model(torch.randn(8, 16)).sum().backward()
            if rank == 1 and step == FAIL_AT:
                raise RuntimeError("boom")
            session.step()
    print(f"rank {rank}: finished", flush=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        if os.environ.get("RANK") == "1":
            if dist.is_initialized():
                dist.destroy_process_group()
            time.sleep(SLOW_EXIT)
