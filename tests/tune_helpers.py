"""Helpers for tests/offline/test_tune.py: a small model factory for ``autotune tune --model
tune_helpers:tiny``, and (run as a script under ``autotune launch``) a plain user training
loop with ``autotune.session`` on that model, the "later real job" that should start warm."""

from __future__ import annotations

import json
import os
import sys

import torch
import tuner_libs  # noqa: F401,E402 - the first trial waits for no import (tests/tuner_libs.py)
from torch import nn


def tiny() -> nn.Module:
    """A small MLP (about 1.1 M parameters, 4.4 MB of gradients in 6 tensors)."""
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 768), nn.ReLU(),
                         nn.Linear(768, 64))


def main(dbs: list[str], out: str, steps: int) -> None:
    """Train ``tiny()`` for real (random data) under autotune.session, once per store in
    ``dbs``: the first session scored in samples/s (``samples_per_step``, as the README's
    loop has it), the next ones in it/s; rank 0 writes each session's history to ``out``."""
    import autotune

    torch.manual_seed(0)
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    histories = []
    for i, db in enumerate(dbs):
        with autotune.session(model, budget=steps, db=db, verbose=False, job="user-job",
                              spend=None, samples_per_step=16 if i == 0 else None) as session:
            for _ in range(steps):
                x = torch.randn(16, 256, generator=g)
                model(x).pow(2).mean().backward()
                session.step()
                opt.step()
                opt.zero_grad()
        histories.append([{"technique": r.technique, "config": r.config}
                          for r in session.history])
    if rank == 0:
        with open(out, "w") as f:
            json.dump(histories, f)


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]))
