"""Rank side of tests/session/test_many_sessions.py: many sessions, one after another, in
one process (a shared world's rank: the user's world, made before any session).

Each session trains a small MLP for ``steps`` iterations with the tuner on (``budget``
reaches trials, so configurations with groups of their own are tried), every rank on data
of its own. Beside it, a reference copy of the model is trained with the gradients
averaged by ``all_reduce`` on the world: the session must match it to float rounding, the
first time and every later time, on a model that had a session before (``same``) or on a
fresh one. After every session the process's OS threads are counted; after the last, the
CPU this process burns while idle (and, for comparison, before the first session), and
whether the world is still the user's to use.
"""

from __future__ import annotations

import copy
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import autotune


def _threads() -> int:
    return len(os.listdir(f"/proc/{os.getpid()}/task"))


def _idle_cpu(seconds: float = 1.5, windows: int = 2) -> float:
    """Share of one core this process used while it slept, the least of ``windows``
    sleeps of ``seconds``: what is left running burns in every window, a one-off (a late
    flush, the collector) in one (a full run once saw 2.7% after against 1.5% before,
    over one 3-second sleep)."""
    shares = []
    for _ in range(windows):
        cpu, wall = time.process_time(), time.monotonic()
        time.sleep(seconds)
        shares.append((time.process_time() - cpu) / (time.monotonic() - wall))
    return min(shares)


def sessions(out: str, way: str, n: int, same: bool, steps: int = 30,
             budget: int = 12) -> dict:
    torch.manual_seed(0)
    world = dist.get_world_size()
    ref = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    gen = torch.Generator().manual_seed(100 + dist.get_rank())
    threads, diffs, hooks = [], [], []
    model = wrapped = None
    idle_before = _idle_cpu()  # this rank's own harness, before any session
    for s in range(n):
        if model is None or not same:
            model = copy.deepcopy(ref)  # where the reference is now
            wrapped = DDP(model) if way == "ddp" else model
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
        with autotune.session(wrapped, budget=budget, total_steps=steps, store=False,
                              verbose=False, allow_lossy=False) as session:
            for _ in range(steps):
                x = torch.randn(16, 32, generator=gen)
                wrapped(x).pow(2).mean().backward()
                session.step()
                opt.step()
                opt.zero_grad()
                ref(x).pow(2).mean().backward()
                for p in ref.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world
                ref_opt.step()
                ref_opt.zero_grad()
        diffs.append(max(float((a - b).abs().max())
                         for a, b in zip(model.parameters(), ref.parameters())))
        threads.append(_threads())
        hooks.append(sum(len(m._forward_pre_hooks) + len(m._forward_hooks)
                         for m in wrapped.modules()))
    idle = _idle_cpu()
    one = torch.ones(1)
    dist.all_reduce(one)  # the world is the user's still, as it was before the sessions
    return {"threads": threads, "diffs": diffs, "hooks": hooks, "idle_cpu": idle,
            "idle_cpu_before": idle_before,
            "world_sum": float(one), "world": world}
