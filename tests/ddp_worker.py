"""Per-rank code for tests/session/test_ddp_parity.py and test_faults.py: the same training
under real DDP and under ``autotune.session()``.

    world(2).run("ddp_worker:parity")     # a case of the shared 2-rank world (worlds.py)
    torchrun --nproc-per-node 3 tests/ddp_worker.py server0 OUTDIR   # rank 0 is a server
    world(2).run("ddp_worker:restart", db=DB, env={"TORCHELASTIC_RESTART_COUNT": "1"})

``parity``: every scenario runs first under DDP, then under a session that tunes (several
configuration switches) on the same per-rank initialisation and data; then the misuse
cases; each rank returns what it saw.
``server0``: rank 0 becomes a Summation Service server (``AUTOTUNE_ROLE``), the workers are
ranks 1 and 2, so the leader is rank 1.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

import torch
import tuner_libs  # noqa: F401,E402 - the first trial waits for no import (tests/tuner_libs.py)
import torch.nn as nn

RANK = int(os.environ.get("RANK", 0))
STEPS = 30
LR = 0.05


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))


def bn_net() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 1))


def wide() -> nn.Module:
    """1 MiB of gradients: a bucket is cut into many 64 KiB chunks over several streams."""
    return nn.Sequential(nn.Linear(8, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(),
                         nn.Linear(512, 1))


class Unused(nn.Module):
    """A parameter that gets no gradient: DDP needs ``find_unused_parameters=True``."""

    def __init__(self) -> None:
        super().__init__()
        self.used = mlp()
        self.unused = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


class Tied(nn.Module):
    """One weight used twice (an embedding and its output layer share it)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.mid = nn.Linear(8, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.mid(torch.tanh(self.inp(x))))
        return self.out(torch.tanh(nn.functional.linear(x, self.inp.weight)))


class Sometimes(nn.Module):
    """A layer its forward skips on every other call, after using it in the first."""

    def __init__(self) -> None:
        super().__init__()
        self.used = mlp()
        self.extra = nn.Linear(1, 1)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = self.used(x)
        return self.extra(y) if self.calls % 2 else y


def data(rank: int, steps: int, micro: int = 1) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    g = torch.Generator().manual_seed(7 + rank)
    w = torch.linspace(-1, 1, 8)
    out = []
    for _ in range(steps):
        mb = []
        for _ in range(micro):
            x = torch.randn(16, 8, generator=g) * (1 + rank)  # ranks see different statistics
            mb.append((x, torch.tanh(x @ w).unsqueeze(1)))
        out.append(mb)
    return out


def state(model: nn.Module) -> dict[str, list[float]]:
    return {k: v.detach().double().reshape(-1).tolist() for k, v in model.state_dict().items()}


def train(build: Callable[[], nn.Module], micro: int, wrap: str, **kw: Any) -> dict:
    """Unseeded start: each rank initialises its own model differently."""
    torch.manual_seed(1000 + RANK)
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    batches = data(RANK, STEPS, micro)
    loss = nn.functional.mse_loss

    def loop(forward: Callable, no_sync: Callable, step: Callable[[], None]) -> None:
        """The same loop for both: micro-batches but the last inside no_sync()."""
        for mb in batches:
            for x, y in mb[:-1]:
                with no_sync():
                    loss(forward(x), y).backward()
            x, y = mb[-1]
            loss(forward(x), y).backward()
            step()
            opt.step()
            opt.zero_grad()

    unused = isinstance(model, Unused)  # (Tied: DDP needs nothing)
    if wrap == "ddp":
        ddp = nn.parallel.DistributedDataParallel(model, find_unused_parameters=unused)
        loop(ddp, ddp.no_sync, lambda: None)
        return state(model)
    import autotune

    configs = set()
    if wrap == "hook":  # keep DDP: autotune.session(ddp_model) tunes its comm hook
        ddp = nn.parallel.DistributedDataParallel(model, find_unused_parameters=unused)
        with autotune.session(ddp, **{"budget": 16, "store": False, "verbose": False,
                                      "timeout": 60, "warmup": 1, "spend": None, **kw}) as session:
            def hook_step() -> None:
                session.step()
                configs.add(json.dumps(session.config, sort_keys=True))

            loop(ddp, session.no_sync, hook_step)
        return dict(state(model), _configs=len(configs), _history=len(session.history))
    with autotune.session(model, **{"budget": 12, "store": False, "verbose": False,
                                    "timeout": 60, "spend": None, **kw}) as session:
        def step() -> None:
            session.step()
            configs.add(json.dumps(session.config, sort_keys=True))

        loop(model, session.no_sync, step)
    return dict(state(model), _configs=len(configs))


def misuse(kind: str) -> str:
    """Run a session the wrong way; the error message (or '' if none)."""
    import autotune

    torch.manual_seed(5)
    model = mlp()
    x, y = data(RANK, 1)[0][0]
    if kind == "sometimes":  # a parameter the forward skips after the first iteration
        model = Sometimes()
    if kind == "dataparallel":
        model = nn.DataParallel(model)
    if kind == "hooked":  # a DDP model that already has a comm hook
        model = nn.parallel.DistributedDataParallel(model)
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        model.register_comm_hook(None, default_hooks.allreduce_hook)
    if kind == "different":
        model = nn.Sequential(nn.Linear(8, 32 + RANK), nn.Tanh(), nn.Linear(32 + RANK, 1))
    try:
        with autotune.session(model, budget=0, store=False, verbose=False, timeout=60) as session:
            for _ in range(3):
                nn.functional.mse_loss(model(x), y).backward()
                if kind == "twice":
                    nn.functional.mse_loss(model(x), y).backward()
                session.step()
                if kind == "replaced":
                    model[2] = nn.Linear(32, 1)
        return ""
    except Exception as e:  # noqa: BLE001 - the message is what the test checks
        return f"{type(e).__name__}: {e}"


def parity(out: str) -> dict:
    """A case of the shared 2-rank world (tests/worlds.py): every scenario, DDP then the
    session, in the world's process group."""
    result = {}
    for name, build, micro in (("unseeded", mlp, 1), ("batchnorm", bn_net, 1),
                               ("no_sync", bn_net, 2), ("unused", Unused, 1),
                               ("tied", Tied, 1)):
        result[name] = {"ddp": train(build, micro, "ddp"), "session": train(build, micro, "session")}
    for name, build, micro, kw in (("hook_unseeded", mlp, 1, {}), ("hook_batchnorm", bn_net, 1, {}),
                                   ("hook_no_sync", bn_net, 2, {}), ("hook_unused", Unused, 1, {}),
                                   ("hook_wide", wide, 1,
                                    {"fixed": {"chunk_bytes": [64 << 10, 256 << 10]}})):
        result[name] = {"ddp": train(build, micro, "ddp"), "session": train(build, micro, "hook", **kw)}
    result["hook_db"] = os.path.join(out, "hook.db")
    result["hook_store"] = train(mlp, 1, "hook", store=True, db=result["hook_db"],
                                 job="hook-store")
    result["misuse"] = {k: misuse(k) for k in ("twice", "replaced", "sometimes", "different",
                                               "dataparallel", "hooked")}
    return result


def plain_loop(model: nn.Module, session: Any, steps: int) -> None:
    """One micro-batch per step, SGD."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for mb in data(RANK, steps):
        x, y = mb[0]
        nn.functional.mse_loss(model(x), y).backward()
        session.step()
        opt.step()
        opt.zero_grad()


def server0(out: str) -> None:
    import autotune

    if RANK == 0:
        os.environ["AUTOTUNE_ROLE"] = "server"
    torch.manual_seed(1000 + RANK)
    model = mlp()
    with autotune.session(model, budget=8, db=os.path.join(out, "t.db"), verbose=False,
                          timeout=60, spend=None) as session:
        plain_loop(model, session, STEPS)
    with open(os.path.join(out, f"rank{RANK}.json"), "w") as f:
        json.dump({"leader": session.is_leader, "history": len(session.history),
                   "tuning_iterations": session.tuning_iterations, "state": state(model)}, f)


def restart(out: str, db: str) -> dict:
    """A short tuning job, a case of the shared 2-rank world; run again on the same ``db``
    with TORCHELASTIC_RESTART_COUNT=1 (the case's env) it must not tune."""
    import autotune

    model = mlp()
    with autotune.session(model, budget=8, db=db, verbose=False,
                          timeout=60, job="restart-test", spend=None) as session:
        plain_loop(model, session, 14)
    return {"history": len(session.history), "tuning": session.tuning_iterations,
            "config": session.config, "best": session.best}


if __name__ == "__main__":
    torch.set_num_threads(1)
    server0(sys.argv[2])
