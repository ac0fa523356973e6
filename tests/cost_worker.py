"""Rank side of tests/session/test_cost_match.py: the same job with tuning off
(``budget=0``) and on, in turn, timed whole; what the tuned run said it cost.

Each run is a fresh session on a fresh copy of one model, ``steps`` iterations of the same
data, timed from the line before ``autotune.session()`` to the line after its ``with``
block, every rank starting together (a barrier). The search's libraries are imported
already (tests/tuner_libs.py), so their import is no cost here; everything else a search
does is: its Tuner, its decisions, its slower trials and their switches, on every rank.
"""

from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import tuner_libs  # noqa: F401 - the search's libraries, imported (module docstring)

import autotune


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1))


def _run(model: nn.Module, way: str, steps: int, budget: int
         ) -> tuple[float, dict | None, dict]:
    """One job, timed whole: its wall seconds, (leader) the cost its session reported,
    and its parts' seconds (the session's start, the loop, its end)."""
    net = nn.parallel.DistributedDataParallel(model) if way == "ddp" else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(dist.get_rank() + 1)
    data = [torch.randn(32, 64, generator=gen) for _ in range(8)]
    dist.barrier()
    started = time.perf_counter()
    session = autotune.session(net, budget=budget, spend=None, store=False, verbose=False,
                               allow_lossy=False, seed=1, trial_iterations=4)
    with session as session:
        entered = time.perf_counter()
        for i in range(steps):
            net(data[i % len(data)]).pow(2).mean().backward()
            session.step()
            opt.step()
            opt.zero_grad()
        looped = time.perf_counter()
    dist.barrier()
    ended = time.perf_counter()
    parts = {"enter": entered - started, "loop": looped - entered, "exit": ended - looped}
    return ended - started, session.tuning_cost, parts


def cost_match(out: str, way: str = "native", steps: int = 100, budget: int = 40,
               repeats: int = 5) -> dict:
    """``repeats`` pairs of runs, untuned then tuned, interleaved: each run's wall time
    and the tuned runs' reported costs (the leader's; None on the other ranks)."""
    torch.set_num_threads(1)
    ref = _model()
    walls: dict[str, list[float]] = {"untuned": [], "tuned": []}
    parts: dict[str, list[dict]] = {"untuned": [], "tuned": []}
    costs: list[dict | None] = []
    for _ in range(repeats):
        for name, tuned in (("untuned", 0), ("tuned", budget)):
            wall, cost, part = _run(copy.deepcopy(ref), way, steps, tuned)
            walls[name].append(wall)
            parts[name].append(part)
            if tuned:
                costs.append(cost)
    return {"walls": walls, "costs": costs, "parts": parts}
