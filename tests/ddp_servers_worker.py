"""Per-rank script for tests/session/test_ddp_servers.py: DDP on the workers' group with
Summation Service servers and several workers per machine, autotune's hook running the
native runtime's push/pull and intra-machine step (``autotune.session(ddp_model)``).

    autotune launch -n 2 -k 1 tests/ddp_servers_worker.py parity OUTDIR pushpull
    autotune launch -n 4 -k 1 -m 2 tests/ddp_servers_worker.py parity OUTDIR intra
    autotune launch -n 2 -k 1 tests/ddp_servers_worker.py kill_server OUTDIR pushpull

``parity``: the same training (each rank its own initialisation and data) first under
plain DDP, then under a session whose every trial is a configuration of the given
``family`` (``pushpull``: push/pull through 0 or 1 servers, any streams and chunks;
``intra``: intra ``root``/``scatter``, all-reduce or push/pull; ``server``: push/pull
through the server only), switching each few iterations. ``kill_server``: the same, and rank 0 kills the server (SIGKILL) once
push/pull runs; training goes on. Each worker writes ``OUTDIR/rank<r>.json``: both final
states, the configurations that ran, the trials, the servers lost.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch
import tuner_libs  # noqa: F401,E402 - the first trial waits for no import (tests/tuner_libs.py)
import torch.distributed as dist
import torch.nn as nn

RANK = int(os.environ.get("RANK", 0))
STEPS = 24
LR = 0.05
FAMILIES = {
    "pushpull": {"transport": ["pushpull"], "chunk_bytes": [4 << 10, 16 << 10, 64 << 10]},
    "intra": {"intra": ["root", "scatter"], "chunk_bytes": [4 << 10, 16 << 10, 64 << 10]},
    "server": {"transport": "pushpull", "servers": 1},
    # everything fixed, no search: settled after its measured iterations, then quiet
    "kept": {"transport": "pushpull", "servers": 1, "streams": 2, "chunk_bytes": 16 << 10},
}
LONGER = {"kept": 40}  # steps of a family that needs more than STEPS


def build() -> nn.Module:
    torch.manual_seed(1000 + RANK)  # unseeded start: DDP broadcasts rank 0's
    return nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.BatchNorm1d(64),
                         nn.Tanh(), nn.Linear(64, 1))


def batches(steps: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7 + RANK)
    w = torch.linspace(-1, 1, 8)
    out = []
    for _ in range(steps):
        x = torch.randn(16, 8, generator=g) * (1 + RANK)
        out.append((x, torch.tanh(x @ w).unsqueeze(1)))
    return out


def state(model: nn.Module) -> list[float]:
    return [v for t in model.state_dict().values() for v in t.detach().double().reshape(-1).tolist()]


def train(group, family: str | None, kill: bool = False, steps: int = STEPS) -> dict:
    import autotune

    model = build()
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group,
                                              bucket_cap_mb=0.01)  # several buckets
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    rec: dict = {"configs": []}
    if family is None:
        for x, y in batches(steps):
            nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
            opt.zero_grad()
        rec["state"] = state(model)
        return rec
    fired = False
    with autotune.session(ddp, budget=0 if family == "kept" else STEPS, store=False,
                          verbose=False, timeout=60, warmup=1, fixed=FAMILIES[family], seed=3,
                          spend=None) as session:
        for step, (x, y) in enumerate(batches(steps)):
            nn.functional.mse_loss(ddp(x), y).backward()
            session.step()
            opt.step()
            opt.zero_grad()
            rec["configs"].append(dict(session.config))
            if kill and not fired and step >= 3 and session.config["transport"] == "pushpull":
                fired = True
                rec["fired_at"] = step
                if RANK == 0:
                    store = dist.distributed_c10d._get_default_store()
                    server = session.rt.info.servers[0]
                    time.sleep(0.3)  # the other worker is in its next backward by now
                    os.kill(int(store.get(f"autotune/pid/{server}").decode()), signal.SIGKILL)
    rec["history"] = [dict(config=h.config, error=h.error, score=h.score) for h in session.history]
    rec["lost_servers"] = list(session.rt.lost_servers)
    rec["handed"] = session.hooked.hook.buckets.handed
    rec["averaged_again"] = session.hooked.hook.buckets.averaged_again
    rec["buckets"] = len(session.hooked.hook.buckets.sizes)
    rec["background"] = session.rt._sync.background  # syncs that did not wait
    rec["state"] = state(model)
    return rec


def main(scenario: str, out: str, family: str) -> None:
    import autotune

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    group = autotune.workers_group()
    assert autotune.workers_group() is group  # once joined, the same group (no new join)
    steps = LONGER.get(family, STEPS)
    result = {"ddp": train(group, None, steps=steps)}
    result["session"] = train(group, family, kill=scenario == "kill_server", steps=steps)
    with open(os.path.join(out, f"rank{RANK}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
