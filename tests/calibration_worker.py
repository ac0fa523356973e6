"""Per-rank script for tests/session/test_calibration.py, run under `autotune launch`:
one short tuning session on the store ``$CAL_DB``; the leader writes what its prior started
from and ended with to ``$OUT/calibration.json``."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.nn as nn

import autotune


def main(out: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                          nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(int(os.environ.get("RANK", 0)))
    with autotune.session(model, budget=int(os.environ.get("CAL_BUDGET", "30")),
                          db=os.environ["CAL_DB"], job="calibration", verbose=False) as s:
        for _ in range(int(os.environ.get("CAL_STEPS", "40"))):
            x = torch.randn(16, 64, generator=g)
            nn.functional.mse_loss(model(x), x[:, :1]).backward()
            s.step()
            opt.step()
            opt.zero_grad()
    tuners = s._tuners
    if tuners is not None and tuners.model is not None:
        m = tuners.model
        with open(os.path.join(out, "calibration.json"), "w") as f:
            json.dump({"started": json.loads(m.started_from.to_json()),
                       "ended": json.loads(m.calibration.to_json()),
                       "fits": m.fits, "link": s._link}, f)


if __name__ == "__main__":
    main(sys.argv[1])
