"""Per-rank code of tests/runtime/test_ddp_hook.py: real DDP (gloo, CPU) with and
without :class:`~autotune.runtime.ddp_hook.BucketTransport`, as cases of the shared worlds
(tests/worlds.py)::

    world(2).run("ddp_hook_worker:cases", mode="all")
    world(3).run("ddp_hook_worker:cases", mode="parity")

``parity``: the same training (unseeded per-rank start, per-rank data, ``no_sync``
micro-batches, ``find_unused_parameters=True`` with one unused layer, small DDP buckets)
under plain DDP and under DDP + the hook, switching the configuration every iteration
through lossless ones (streams 1..4, chunk_bytes 4 KiB..4 MiB); once more with host
staging copying (``copy_cpu``). ``all`` adds: top-k with error feedback switching ratio
mid-training and then to ``none``; a conservation check on the transport alone (every
gradient produced is delivered once the residual is folded); the misuse cases. Each rank
returns what it saw.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from autotune.runtime.ddp_hook import BucketTransport

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


def make_ddp(unused: bool = True) -> DDP:
    """DDP over :class:`Net`; with its unused layer, ``find_unused_parameters`` (then DDP
    never rebuilds its buckets); without, DDP rebuilds them after the first step."""
    torch.manual_seed(1000 + RANK)  # unseeded across ranks: DDP's broadcast matters
    return DDP(Net(unused), find_unused_parameters=unused, bucket_cap_mb=0.1)


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


def parity(copy_cpu: bool = False) -> dict:
    plain = make_ddp()
    train(plain, STEPS, 2)
    hooked = make_ddp()
    t = BucketTransport.install(hooked, max_streams=4, timeout=60, copy_cpu=copy_cpu)
    seen = []

    def switch(it: int) -> None:
        s, c = LOSSLESS[it % len(LOSSLESS)]
        seen.append(dict(t.set_config({"streams": s, "chunk_bytes": c})))

    train(hooked, STEPS, 2, switch)
    d = t.describe()
    return {"ddp": state(plain), "hook": state(hooked), "groups_made": t.groups_made,
            "configs": len({json.dumps(c, sort_keys=True) for c in seen}),
            "buckets": d["buckets"], "rounds": d["rounds"]}


def lossy() -> dict:
    """top-k 1% with error feedback from the first step (DDP rebuilds its buckets after
    it), then top-k 10%, then none."""
    ddp = make_ddp(unused=False)
    t = BucketTransport.install(ddp, max_streams=4, timeout=60)
    topk = {"compression": "topk", "chunk_bytes": 64 * KiB, "streams": 2,
            "compress_min_bytes": 16 * KiB}
    out: dict[str, Any] = {}

    def switch(it: int) -> None:
        if it == 0:
            t.set_config(dict(topk, topk_ratio=0.01))
        elif it == 15:
            out["before"] = t.describe()["residual_norms"]
            t.set_config(dict(topk, topk_ratio=0.1))
            out["after_switch"] = t.describe()["residual_norms"]
        elif it == 16:
            out["after_one"] = t.describe()["residual_norms"]
        elif it == 28:
            out["before_none"] = t.describe()["residual_norms"]
            t.set_config({"streams": 3, "chunk_bytes": 32 * KiB})
        elif it == 29:
            out["after_none"] = t.describe()["residual_norms"]

    out["losses"] = train(ddp, 30, 1, switch)
    out["resets"] = t.residual_resets
    out["buckets"] = t.describe()["buckets"]
    return out


class FakeBucket:
    """What the transport reads of a ``dist.GradBucket``."""

    def __init__(self, index: int, buffer: torch.Tensor, params: tuple = ()):
        self._index, self._buffer, self._params = index, buffer, list(params)

    def index(self) -> int:
        return self._index

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def parameters(self) -> list:
        return self._params


def conservation() -> dict:
    """Gradients of known size through the transport alone: with top-k (two ratios, two
    chunk sizes), then ``none``, the sum of the averages delivered equals the average of
    every gradient produced, once the residual is folded back."""
    t = BucketTransport(dist.group.WORLD, max_streams=4, timeout=60)
    g = torch.Generator().manual_seed(3 + RANK)
    n = 40_000
    produced = torch.zeros(n, dtype=torch.float64)
    delivered = torch.zeros(n, dtype=torch.float64)
    norms = []
    plan = ([{"compression": "topk", "topk_ratio": 0.01, "chunk_bytes": 32 * KiB,
              "compress_min_bytes": 8 * KiB, "streams": 2}] * 3
            + [{"compression": "topk", "topk_ratio": 0.1, "chunk_bytes": 8 * KiB,
                "compress_min_bytes": 8 * KiB, "streams": 3}] * 3
            + [{"streams": 1, "chunk_bytes": 16 * KiB}] * 2)
    for cfg in plan:
        t.set_config(cfg)
        grad = torch.randn(n, generator=g)
        produced += grad.double()
        buf = grad.clone()
        delivered += t.hook(t, FakeBucket(0, buf)).wait().double()
        norms.append(t.residual_norm(0))
    total = produced.clone()
    dist.all_reduce(total)
    want = total / dist.get_world_size()
    return {"max_err": float((delivered - want).abs().max()),
            "scale": float(want.abs().max()), "norms": norms}


def rebuilt() -> dict:
    """A bucket index that comes back with another size, or other parameters, starts its
    residual afresh (DDP rebuilt its buckets); the same bucket keeps it."""
    t = BucketTransport(dist.group.WORLD, max_streams=4, timeout=60)
    t.set_config({"compression": "topk", "topk_ratio": 0.01, "compress_min_bytes": 4 * KiB,
                  "chunk_bytes": 16 * KiB})
    p, q = torch.zeros(3), torch.zeros(3)
    steps = [(9000, (p,)), (9000, (p,)), (12000, (p,)), (12000, (q,))]
    out = []
    for n, params in steps:
        buf = torch.randn(n, generator=torch.Generator().manual_seed(RANK + n))
        t.hook(t, FakeBucket(5, buf, params)).wait()
        out.append([t.residual_resets, t.residual_norm(5) > 0])
    return {"steps": out}


def misuse() -> dict:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def err(fn: Any) -> str:
        try:
            fn()
            return ""
        except Exception as e:  # noqa: BLE001 - the message is what the test checks
            return f"{type(e).__name__}: {e}"

    out = {"not_ddp": err(lambda: BucketTransport.install(Net()))}
    ddp = make_ddp()
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    out["second_hook"] = err(lambda: BucketTransport.install(ddp))
    ddp2 = make_ddp()
    t = BucketTransport.install(ddp2, max_streams=4, timeout=60)
    out["twice"] = err(lambda: BucketTransport.install(ddp2))
    out["pushpull"] = err(lambda: t.set_config({"transport": "pushpull"}))
    out["streams"] = err(lambda: t.set_config({"streams": 5}))
    out["intra"] = err(lambda: t.set_config({"intra": "root"}))
    out["config_kept"] = dict(t.config)
    out["limits"] = {"servers": t.limits.servers, "wpm": t.limits.workers_per_machine,
                     "max_streams": t.limits.max_streams,
                     "transports": list(t.limits.transports)}
    train(ddp2, 2, 1)  # the hook still works after the refusals
    return out


def cases(mode: str, out: str) -> dict:
    result: dict[str, Any] = {"parity": parity()}
    if mode == "all":
        result["staged"] = parity(copy_cpu=True)
        result["lossy"] = lossy()
        result["conservation"] = conservation()
        result["rebuilt"] = rebuilt()
        result["misuse"] = misuse()
    return result
