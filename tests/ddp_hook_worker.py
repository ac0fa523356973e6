"""Per-rank code of tests/runtime/test_ddp_hook.py: real DDP (gloo, CPU) with and
without :class:`~autotune.runtime.ddp.ddp_hook.CommHookState`, as cases of the shared worlds
(tests/worlds.py)::

    world(2).run("ddp_hook_worker:cases", mode="all")
    world(3).run("ddp_hook_worker:cases", mode="parity")

``parity``: the same training (unseeded per-rank start, per-rank data, ``no_sync``
micro-batches, ``find_unused_parameters=True`` with one unused layer, small DDP buckets)
under plain DDP and under DDP + the hook (the runtime of each case joined for it),
switching the configuration every iteration through lossless ones (streams 1..4,
chunk_bytes 4 KiB..4 MiB); once more with host staging copying (``copy_cpu``), and once
with DDP's ``gradient_as_bucket_view`` (``.grad`` is the bucket's memory). ``all``
adds: top-k with error feedback switching ratio mid-training and then to ``none``; a
check on the transport alone of what leaving the codec adds (the residual bounded by the
gradient's norm, issue 62); the misuse cases. Each rank returns what it saw.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from autotune.runtime.ddp.ddp_hook import CommHookState

RANK = int(os.environ.get("RANK", 0))
KiB, MiB = 1024, 1024 * 1024
STEPS = 12
LR = 0.02
# (streams, chunk_bytes) per iteration: several chunks per bucket, 1..4 streams
LOSSLESS = [(1, 4 * KiB), (2, 16 * KiB), (3, 64 * KiB), (4, 4 * MiB), (2, 4 * KiB),
            (4, 256 * KiB), (1, 1 * MiB), (3, 4 * KiB), (4, 8 * KiB)]


class Net(nn.Module):
    def __init__(self, unused: bool = True) -> None:
        super().__init__()
        self.a = nn.Linear(16, 256)
        self.bn = nn.BatchNorm1d(256)
        self.b = nn.Linear(256, 256)   # 257 KiB: most of the larger bucket
        self.c = nn.Linear(256, 1)
        if unused:
            self.unused = nn.Linear(4, 4)  # never in forward: find_unused_parameters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.tanh(self.b(torch.relu(self.bn(self.a(x))))))


def batches(steps: int, micro: int) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    g = torch.Generator().manual_seed(7 + RANK)
    w = torch.linspace(-1, 1, 16)
    out = []
    for _ in range(steps):
        mb = []
        for _ in range(micro):
            x = torch.randn(16, 16, generator=g) * (1 + 0.25 * RANK)  # ranks see different data
            mb.append((x, torch.tanh(x @ w).unsqueeze(1)))
        out.append(mb)
    return out


def make_ddp(unused: bool = True, views: bool = False) -> DDP:
    """DDP over :class:`Net`; with its unused layer, ``find_unused_parameters`` (then DDP
    never rebuilds its buckets); without, DDP rebuilds them after the first step."""
    torch.manual_seed(1000 + RANK)  # unseeded across ranks: DDP's broadcast matters
    return DDP(Net(unused), find_unused_parameters=unused, bucket_cap_mb=0.1,
               gradient_as_bucket_view=views)


def train(ddp: DDP, steps: int, micro: int, before_step: Any = None) -> list[float]:
    """SGD; all micro-batches but the last inside ``no_sync``; the losses per step."""
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    losses = []
    for it, mb in enumerate(batches(steps, micro)):
        if before_step is not None:
            before_step(it)
        for x, y in mb[:-1]:
            with ddp.no_sync():
                nn.functional.mse_loss(ddp(x), y).backward()
        x, y = mb[-1]
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return losses


def state(ddp: DDP) -> dict[str, list[float]]:
    return {k: v.detach().double().reshape(-1).tolist()
            for k, v in ddp.module.state_dict().items()}


def runtime(copy_cpu: bool = False) -> Any:
    from autotune.runtime import Runtime

    return Runtime.bootstrap(timeout=60, max_streams=4, copy_cpu=copy_cpu)


def stop(rt: Any) -> None:
    rt.sync(stop=True) if RANK == 0 else rt.sync()
    rt.shutdown()


def parity(copy_cpu: bool = False, views: bool = False) -> dict:
    plain = make_ddp(views=views)
    train(plain, STEPS, 2)
    hooked = make_ddp(views=views)
    rt = runtime(copy_cpu)
    t = CommHookState.install(hooked, rt)
    seen = []

    def switch(it: int) -> None:
        s, c = LOSSLESS[it % len(LOSSLESS)]
        seen.append(dict(t.sync({"streams": s, "chunk_bytes": c} if RANK == 0 else None)))

    train(hooked, STEPS, 2, switch)
    d = t.describe()
    stop(rt)
    return {"ddp": state(plain), "hook": state(hooked),
            "configs": len({json.dumps(c, sort_keys=True) for c in seen}),
            "buckets": d["buckets"], "rounds": d["rounds"], "handed": d["handed"],
            "averaged_again": d["averaged_again"]}


def lossy() -> dict:
    """top-k 1% with error feedback from the first step (DDP rebuilds its buckets after
    it), then top-k 10%, then none."""
    ddp = make_ddp(unused=False)
    rt = runtime()
    t = CommHookState.install(ddp, rt)
    topk = {"compression": "topk", "chunk_bytes": 64 * KiB, "streams": 2,
            "compress_min_bytes": 16 * KiB}
    out: dict[str, Any] = {}

    def held() -> float:
        return sum(rt.residual_norms.values())

    def switch(it: int) -> None:
        cfg = None
        if it == 0:
            cfg = dict(topk, topk_ratio=0.01)
        elif it == 15:
            out["before"] = held()
            cfg = dict(topk, topk_ratio=0.1)
        elif it == 28:
            out["before_none"] = held()
            cfg = {"streams": 3, "chunk_bytes": 32 * KiB}
        t.sync(cfg if RANK == 0 else None)
        if it == 15:
            out["after_switch"] = held()
        elif it == 16:
            out["after_one"] = held()
        elif it == 29:
            out["after_none"] = held()

    out["losses"] = train(ddp, 30, 1, switch)
    out["handed"] = t.describe()["handed"]
    stop(rt)
    return out


class Flat(nn.Module):
    """One parameter of ``n`` elements whose gradient is the forward's input."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(n))

    def forward(self, grad: torch.Tensor) -> torch.Tensor:
        return (self.w * grad).sum()


def conservation() -> dict:
    """Gradients of known size (one parameter under DDP): with top-k (two ratios, two
    chunk sizes), then ``none``, whose first step has a small gradient: the residual each
    step holds back, what that step adds to the plain average (each rank's residual bounded by its own
    gradient's norm, issue 62: not the whole of it; then cleared), and how far the next
    step is from plain all-reduce."""
    rt = runtime()
    n = 40_000
    ddp = DDP(Flat(n))
    t = CommHookState.install(ddp, rt)
    g = torch.Generator().manual_seed(3 + RANK)
    norms, steps = [], []
    plan = ([{"compression": "topk", "topk_ratio": 0.01, "chunk_bytes": 32 * KiB,
              "compress_min_bytes": 8 * KiB, "streams": 2}] * 3
            + [{"compression": "topk", "topk_ratio": 0.1, "chunk_bytes": 8 * KiB,
                "compress_min_bytes": 8 * KiB, "streams": 3}] * 3
            + [{"streams": 1, "chunk_bytes": 16 * KiB}] * 2)
    for i, cfg in enumerate(plan):
        t.sync(cfg if RANK == 0 else None)
        # the switch to none meets a small gradient: the residual is many times its norm
        grad = torch.randn(n, generator=g) * (0.01 if i == 6 else 1.0)
        ddp.zero_grad()
        ddp(grad).backward()
        want = grad.double().clone()
        dist.all_reduce(want)
        steps.append((ddp.module.w.grad.double() - want / dist.get_world_size(), grad))
        norms.append(sum(rt.residual_norms.values()))
    stop(rt)
    added, grad = steps[6]  # the switch to none: what the residuals added to the average
    bound = torch.tensor([float(grad.norm())], dtype=torch.float64)
    dist.all_reduce(bound)  # each rank adds at most its own gradient's norm
    return {"norms": norms, "added": float(added.norm()),
            "bound": float(bound) / dist.get_world_size(),
            "plain_err": float(steps[7][0].abs().max()),
            "scale": float(steps[7][1].abs().max())}


def misuse() -> dict:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def err(fn: Any) -> str:
        try:
            fn()
            return ""
        except Exception as e:  # noqa: BLE001 - the message is what the test checks
            return f"{type(e).__name__}: {e}"

    rt = runtime()
    out = {"not_ddp": err(lambda: CommHookState.install(Net(), rt))}
    ddp = make_ddp()
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    out["second_hook"] = err(lambda: CommHookState.install(ddp, rt))
    ddp2 = make_ddp()
    t = CommHookState.install(ddp2, rt)
    t.sync()
    out["twice"] = err(lambda: CommHookState.install(ddp2, rt))
    out["streams"] = err(lambda: t.sync({"streams": 5} if RANK == 0 else None))
    out["servers"] = err(lambda: t.sync({"transport": "pushpull", "servers": 1}
                                        if RANK == 0 else None))
    out["config_kept"] = dict(t.config)
    out["limits"] = {"servers": t.limits.servers, "max_streams": t.limits.max_streams}
    train(ddp2, 2, 1, lambda it: t.sync())  # the hook still works after the refusals
    out["averaged_again"] = t.describe()["averaged_again"]
    out["hooked"] = t.hooked
    stop(rt)
    return out


def cases(mode: str, out: str) -> dict:
    result: dict[str, Any] = {"parity": parity()}
    if mode == "all":
        result["staged"] = parity(copy_cpu=True)
        result["views"] = parity(views=True)
        result["lossy"] = lossy()
        result["conservation"] = conservation()
        result["misuse"] = misuse()
    return result
