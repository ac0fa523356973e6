"""Per-rank script for tests/session/test_faults.py: a session under ``autotune launch`` (2 workers +
1 server) while a process is killed or stopped.

    autotune launch -n 2 -k 1 tests/fault_worker.py SCENARIO OUTDIR

Scenarios (the leader, rank 0, sends the signal through the pid each rank left in the
rendezvous store, once the next iteration's configuration is known):

* ``kill_server_pushpull``: SIGKILL the server while the session tries push/pull through it;
* ``kill_server_allreduce``: SIGKILL it while the kept configuration is all-reduce;
* ``stop_server``: SIGSTOP it (no heartbeat, no error from the network) under all-reduce;
* ``kill_worker`` / ``stop_worker``: SIGKILL / SIGSTOP worker 1.

Each worker writes ``OUTDIR/rank<r>.json``: per-step times, the final parameters, what the
session recorded, and the fault it raised, if any.
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
STEPS, LR, TIMEOUT = 16, 0.1, 6.0
AT = 7  # the step after which the signal is sent


def make_model() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))


def batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(11 + rank)
    w = torch.linspace(-1, 1, 8)
    out = []
    for _ in range(STEPS):
        x = torch.randn(16, 8, generator=g)
        out.append((x, torch.tanh(x @ w).unsqueeze(1)))
    return out


def flat(model: nn.Module) -> list[float]:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def signal_rank(rank: int, sig: int) -> None:
    store = dist.distributed_c10d._get_default_store()
    os.kill(int(store.get(f"autotune/pid/{rank}").decode()), sig)


def main(scenario: str, out: str) -> None:
    import autotune
    from autotune.runtime import RuntimeFault

    torch.set_num_threads(1)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    # push/pull: tune (the push/pull seed comes right after the default's warm-up and
    # trial); all-reduce: no tuning, the default is kept
    tune = scenario == "kill_server_pushpull"
    rec: dict = {"steps": [], "configs": [], "fault": None}
    fired = False
    t_fault = None
    try:
        with autotune.session(model, budget=12 if tune else 0, db=os.path.join(out, "t.db"),
                              timeout=TIMEOUT, verbose=False, seed=1, spend=None) as session:
            for step, (x, y) in enumerate(batches(RANK)):
                t0 = time.monotonic()
                nn.functional.mse_loss(model(x), y).backward()
                session.step()
                opt.step()
                opt.zero_grad()
                rec["steps"].append(time.monotonic() - t0)
                rec["configs"].append(dict(session.config))
                pushpull = session.config["transport"] == "pushpull"
                if not fired and step >= (4 if tune else AT) and (pushpull or not tune):
                    fired = True
                    rec["fired_at"] = step
                    target, sig = {
                        "kill_server_pushpull": (2, signal.SIGKILL),
                        "kill_server_allreduce": (2, signal.SIGKILL),
                        "stop_server": (2, signal.SIGSTOP),
                        "kill_worker": (1, signal.SIGKILL),
                        "stop_worker": (1, signal.SIGSTOP),
                    }[scenario]
                    if RANK == 0:
                        time.sleep(0.5)  # rank 1 is in the next sync or backward by now
                        signal_rank(target, sig)
                    t_fault = time.monotonic()
        rec["history"] = [dict(technique=h.technique, config=h.config, error=h.error,
                               score=h.score) for h in session.history]
        rec["lost_servers"] = list(session.rt.lost_servers)
    except RuntimeFault as e:
        rec.update(fault=str(e), rank=e.rank, recoverable=e.recoverable,
                   seconds=time.monotonic() - (t_fault or time.monotonic()))
    rec["final"] = flat(model)
    with open(os.path.join(out, f"rank{RANK}.json"), "w") as f:
        json.dump(rec, f)
    if rec["fault"]:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
