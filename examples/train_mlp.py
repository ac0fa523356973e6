"""A multi-layer perceptron on a synthetic regression task, trained under autotune.session().

    autotune launch --workers 4 --servers 2 examples/train_mlp.py --steps 300
    autotune launch --workers 2 --servers 1 examples/train_mlp.py --device cuda
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn as nn

import autotune


def make_model(width: int = 512, depth: int = 4) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(64, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def pick_device(name: str) -> torch.device:
    """``cpu``, or ``cuda``: this rank's GPU, ``cuda:(LOCAL_RANK % GPUs)`` (ranks may share one)."""
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: torch sees no CUDA GPU on this machine")
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def parse_args(description: str) -> argparse.Namespace:
    """The options of this example and of train_ddp.py."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--total-steps", type=int, default=None,
                    help="the job's length as the session is told it (default --steps): "
                         "it sizes the search to what the job can pay back")
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--db", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    return ap.parse_args()


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])

    torch.set_num_threads(1)
    dev = pick_device(args.device)
    torch.manual_seed(args.seed)
    model = make_model().to(dev)
    teacher = torch.nn.Linear(64, 1).to(dev)  # the same target function on every rank (same seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rank = int(os.environ.get("RANK", 0))
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank + 1)

    with autotune.session(model, budget=args.budget, db=args.db, samples_per_step=args.batch,
                          total_steps=args.total_steps or args.steps,
                          job="train_mlp") as session:
        for step in range(args.steps):
            x = torch.randn(args.batch, 64, generator=gen).to(dev)
            with torch.no_grad():
                y = torch.tanh(teacher(x))
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            session.step()
            opt.step()
            opt.zero_grad(set_to_none=False)
            if rank == 0 and (step % 50 == 0 or step == args.steps - 1):
                print(f"step {step:4d}  loss {loss.item():.4f}", flush=True)
    if rank == 0:
        from autotune.units import fmt_config

        print(f"kept configuration: {fmt_config(session.best)}", flush=True)


if __name__ == "__main__":
    main()
