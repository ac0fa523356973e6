"""Per-rank code for tests/session/test_stored_calibration.py, a case of the shared world
of 2 workers on 2 emulated machines (tests/worlds.py): one short tuning session on the
store ``db``; the leader returns what its prior started from and ended with (the other
rank ``None``)."""

from __future__ import annotations

import json
import os

import torch
import torch.nn as nn

import autotune


def job(out: str, db: str, budget: int = 30, steps: int = 40) -> dict | None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                          nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(int(os.environ.get("RANK", 0)))
    with autotune.session(model, budget=budget, db=db, job="calibration", verbose=False,
                          spend=None) as s:
        for _ in range(steps):
            x = torch.randn(16, 64, generator=g)
            nn.functional.mse_loss(model(x), x[:, :1]).backward()
            s.step()
            opt.step()
            opt.zero_grad()
    tuners = s.leader.tuners if s.leader is not None else None
    if tuners is None or tuners.model is None:
        return None
    m = tuners.model
    return {"started": json.loads(m.started_from.to_json()),
            "ended": json.loads(m.calibration.to_json()), "fits": m.fits, "link": s.meter.link}
