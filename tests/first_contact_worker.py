"""A 1-worker job for tests/session/test_first_contact.py (issue 38): ``python
first_contact_worker.py native|ddp OUT_DIR`` in a world of one process (``autotune launch
--workers 1``). Before training, ``step()`` with no backward must be a UsageError that
leaves the session usable; then it trains ``STEPS`` iterations, each of ``MICRO``
micro-batches, all but the last inside ``no_sync()``, with ``step()`` after every one (as
under Accelerate's ``accumulate()``), and writes what it saw to OUT_DIR/result.json."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import autotune

STEPS, MICRO = 12, 3


def main() -> None:
    kind, out = sys.argv[1], Path(sys.argv[2])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                                 torch.nn.Linear(32, 1))
    if kind == "ddp":
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen: dict = {"kind": type(None).__name__}
    with autotune.session(model, budget=8, db=out / "one.db", job=f"one-{kind}") as session:
        seen["kind"] = type(session).__name__
        try:
            session.step()
        except autotune.UsageError as e:
            seen["early_step"] = str(e)
        steps = 0
        for _ in range(STEPS):
            for m in range(MICRO):
                x = torch.randn(8, 16)
                last = m == MICRO - 1
                with contextlib.nullcontext() if last else session.no_sync():
                    torch.nn.functional.mse_loss(model(x), x[:, :1]).backward()
                session.step()
                steps += 1
            opt.step()
            opt.zero_grad()
        seen.update(iterations=session.iteration, step_calls=steps, leader=session.is_leader,
                    best=session.best, trials=len(session.history))
    (out / "result.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
