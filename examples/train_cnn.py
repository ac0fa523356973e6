"""A small ResNet-style network on synthetic images, trained under autotune.session().

    autotune launch --workers 4 --servers 2 examples/train_cnn.py --steps 200

The images are noise plus a class-dependent pattern, so the network can learn them.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import autotune


class Residual(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


def make_model(classes: int = 10, width: int = 32) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
        Residual(width), nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU(),
        Residual(2 * width), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, classes),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--db", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    classes = 10
    model = make_model(classes)
    patterns = torch.randn(classes, 3, 16, 16)  # same on every rank (same seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rank = int(os.environ.get("RANK", 0))
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank + 1)

    with autotune.session(model, budget=args.budget, db=args.db, samples_per_step=args.batch,
                          job="train_cnn") as session:
        for step in range(args.steps):
            y = torch.randint(classes, (args.batch,), generator=gen)
            x = patterns[y] + torch.randn(args.batch, 3, 16, 16, generator=gen)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            session.step()
            opt.step()
            opt.zero_grad(set_to_none=False)
            if rank == 0 and (step % 50 == 0 or step == args.steps - 1):
                print(f"step {step:4d}  loss {loss.item():.3f}", flush=True)
    if rank == 0:
        from autotune.units import fmt_config

        print(f"kept configuration: {fmt_config(session.best)}", flush=True)


if __name__ == "__main__":
    main()
