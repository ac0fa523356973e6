"""Per-rank code for tests/session/test_session.py: :func:`case` runs one training job in
the shared 2-rank world (tests/worlds.py) and returns what the rank saw; run as a script
under `autotune launch` (for the jobs with servers or several machines), it does the same
and writes ``$OUT/rank<r>.json``.
"""

from __future__ import annotations

import hashlib
import weakref
import json
import os
import sys

import torch
import tuner_libs  # noqa: F401,E402 - the first trial waits for no import (tests/tuner_libs.py)
import torch.distributed as dist
import torch.nn as nn

import autotune

RANK = int(os.environ.get("RANK", 0))
LR = 0.1


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))


def batches(seed: int, rank: int, steps: int):
    g = torch.Generator().manual_seed(seed * 100 + rank)
    w = torch.linspace(-1, 1, 16)
    out = []
    for _ in range(steps):
        x = torch.randn(32, 16, generator=g)
        out.append((x, torch.tanh(x @ w / 2).unsqueeze(1)))
    return out


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train_ddp(seed: int, steps: int) -> torch.Tensor:
    model = make_model(seed)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x, y in batches(seed, RANK, steps):
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
    return flat(model)


def count_collectives(session) -> dict:
    """Count the session's own collectives (its per-iteration reduce, and putting a
    configuration in force), each still run as it is."""
    calls = {"n": 0}
    for name in ("worker_sum", "put_in_force"):
        def counted(*a, _real=getattr(session.hooked, name), **k):
            calls["n"] += 1
            return _real(*a, **k)
        setattr(session.hooked, name, counted)
    return calls


def train_session(data_seed: int, steps: int, wrap_ddp: bool = False, **kw):
    """The session's training job; ``wrap_ddp``: inside DDP (``session(ddp_model)``)."""
    model = make_model(data_seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    net = nn.parallel.DistributedDataParallel(model) if wrap_ddp else model
    losses, sums, configs, settled, collectives, hooked = [], [], [], [], [], []
    kw.setdefault("spend", None)  # the search is what these tests look at, whole
    with autotune.session(net, **kw) as session:
        calls = count_collectives(session)
        default = dict(session.space.default())
        ddps: list = []
        for x, y in batches(data_seed, RANK, steps):
            before = calls["n"]
            loss = nn.functional.mse_loss(net(x), y)
            loss.backward()
            session.step()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
            sums.append(hashlib.sha256(flat(model).numpy().tobytes()).hexdigest())
            configs.append(dict(session.config))
            settled.append(session.settled)
            collectives.append(calls["n"] - before)
            # whether DDP's comm hook is registered (else DDP's built-in all-reduce runs)
            hooked.append(session.hooked.hook.hooked and bool(session.ddp._comm_hooks))
            if not any(r() is session.ddp for r in ddps):
                ddps.append(weakref.ref(session.ddp))
        # the DDPs built over the model that are still alive (no garbage collection run):
        # one built anew must free the last, whose reducer would all-reduce again
        alive = sum(r() is not None for r in ddps)
    hist = [dict(index=r.index, technique=r.technique, config=r.config, iterations=r.iterations,
                 score=r.score, error=r.error) for r in session.history]
    numbers = {}
    if session.ledger is not None:  # the leader: what "best" and "default" mean
        numbers = dict(best_score=session.best_score, best_spread=session.best_spread,
                       default_score=session.default_score, default_spread=session.default_spread,
                       unit=session.unit, measured_best=session.ledger.measured(session.best),
                       measured_default=session.ledger.measured(session.space.default()))
    schedule = session.schedule  # the leader's
    numbers["warmup_s"] = ((schedule.warmup_times, schedule.probe_times) if schedule  # the cap
                           else ([], []))                                             # probe's evidence
    return model, dict(losses=losses, sums=sums, configs=configs, history=hist,
                       settled=settled, collectives=collectives, hooked=hooked,
                       ddps=len(ddps), alive=alive,
                       default=default,
                       best=session.best, tuning_iterations=session.tuning_iterations, **numbers)


def case(out: str, steps: int = 60, budget: int = 40, ddp: bool = False,
         fixed: dict | None = None, wrap_ddp: bool = False) -> dict:
    """Plain DDP first (``ddp``), then the session, in this process's world (the session
    makes one where there is none, and joins one as it is); ``fixed``: knobs the user pins;
    ``wrap_ddp``: the session inside DDP."""
    torch.set_num_threads(1)
    result: dict = {}
    if ddp:
        if not dist.is_initialized():
            dist.init_process_group("gloo")
        result["ddp"] = train_ddp(1, steps).tolist()
    model, result["session"] = train_session(1, steps, budget=budget, db=os.path.join(out, "t.db"),
                                             seed=3, verbose=RANK == 0, timeout=60,
                                             trial_iterations=4,  # long enough to cut short
                                             fixed=fixed, wrap_ddp=wrap_ddp)
    result["session"]["final"] = flat(model).tolist()
    return result


def loss_mean(out: str) -> dict:
    """Issue 62: the loss each worker passes to ``session.step(loss=...)`` reaches the
    leader's schedule as the mean over the workers, through the session's own iteration
    all-reduce (its meter, over the real process group); a worker that passes none, or a
    loss that is not finite, makes it None; a loss that is not a number is a usage error."""
    model = make_model(0)
    (x, y), = batches(0, RANK, 1)
    seen = {}
    with autotune.session(model, budget=0, verbose=False, store=False) as session:
        torch.nn.functional.mse_loss(model(x), y).backward()
        session.step(loss=torch.tensor(float(RANK + 1)))
        seen["mean"] = session.meter.reduce(0.1, 0.0, 0.0, False, float(RANK + 1))[4]
        seen["one_missing"] = session.meter.reduce(0.1, 0.0, 0.0, False,
                                                 None if RANK else 2.0)[4]
        seen["nan"] = session.meter.reduce(0.1, 0.0, 0.0, False,
                                         float("nan") if RANK else 2.0)[4]
        try:
            torch.nn.functional.mse_loss(model(x), y).backward()
            session.step(loss="low")
        except autotune.UsageError as e:
            seen["error"] = str(e)
    return seen


def main(out: str) -> None:
    result = case(out, int(os.environ.get("SESSION_STEPS", "60")),
                  int(os.environ.get("SESSION_BUDGET", "40")),
                  os.environ.get("SESSION_DDP") == "1",
                  json.loads(os.environ.get("SESSION_FIXED", "null")))
    with open(os.path.join(out, f"rank{RANK}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
