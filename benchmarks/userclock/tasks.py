"""The training jobs of the user's clock, each a model, its optimizer, its batches and its loss.

* ``gpt``: the zoo's small GPT-2 (2 layers, d = 128, 4 heads, byte vocabulary, context 64;
  438 K parameters, 1.75 MB of gradients) on the bytes of the Python standard library's
  own top-level ``.py`` files (every 10th held out), GPT-2's initialisation, AdamW;
* ``cnn``: a small CNN (3 conv, 2 linear, He initialisation; 227 K parameters) on
  scikit-learn's bundled digits (``examples/digits.py``; 297 held out), SGD with momentum;
* ``mlp``: a tiny MLP (332 KiB), SGD on random data: a step of a few milliseconds, where
  whatever a session adds to a step shows;
* ``sleepy``: a zoo model's gradient shapes with emulated compute
  (:func:`autotune.workload.sleepy_model`: the forward sleeps, the backward yields the
  gradients in ready order); every gradient is ``rank + 1``, so the average is known
  exactly (``exact``), and there is no update.

A task is built from ``(seed, rank, workers, batch, **options)``: the seed gives the same
initial weights on every rank and in every arm, and each rank its own data order.
``val_loss()`` (gpt, cnn) evaluates the model on the held-out data.
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BATCH = 32  # samples a worker and step, every task's default


def stdlib_corpus() -> tuple[bytes, bytes, list[str]]:
    """The Python standard library's top-level ``.py`` files, sorted by name: every 10th
    (index 9, 19, ...) is the validation text, the rest the training text."""
    root = os.path.dirname(os.__file__)
    files = sorted(glob.glob(os.path.join(root, "*.py")))
    if len(files) < 20:
        raise RuntimeError(f"only {len(files)} .py files under {root}: no corpus")
    train, val = [], []
    for i, f in enumerate(files):
        with open(f, "rb") as fh:
            (val if i % 10 == 9 else train).append(fh.read())
    return b"\n".join(train), b"\n".join(val), [os.path.basename(f) for f in files]


class GPTTask:
    """Next-byte prediction on the standard library's sources."""

    ctx = 64
    val_windows = 64
    exact = None

    def __init__(self, seed: int, rank: int, world: int, batch: int = BATCH) -> None:
        import torch

        from autotune.zoo.text import GPT2

        train, val, _ = stdlib_corpus()
        self.train = torch.frombuffer(bytearray(train), dtype=torch.uint8).long()
        v = torch.frombuffer(bytearray(val), dtype=torch.uint8).long()
        starts = torch.linspace(0, len(v) - self.ctx - 2, self.val_windows).long()
        self.val = torch.stack([v[s:s + self.ctx + 1] for s in starts.tolist()])
        self.batch = batch
        self.gen = torch.Generator().manual_seed(seed * 1000 + rank + 1)  # each rank its own
        torch.manual_seed(seed)  # the same initial weights on every rank and arm
        self.model = GPT2(layers=2, hidden=128, heads=4, vocab=256, positions=self.ctx)
        for m in self.model.modules():  # GPT-2's initialisation (the zoo builds for shapes)
            if isinstance(m, torch.nn.Embedding):
                torch.nn.init.normal_(m.weight, std=0.02)

    def optimizer(self) -> Any:
        import torch

        return torch.optim.AdamW(self.model.parameters(), lr=3e-3, betas=(0.9, 0.95),
                                 weight_decay=0.01)

    def next_batch(self) -> tuple[Any, Any]:
        import torch

        s = torch.randint(len(self.train) - self.ctx - 1, (self.batch,), generator=self.gen)
        seq = torch.stack([self.train[i:i + self.ctx + 1] for i in s.tolist()])
        return seq[:, :-1], seq[:, 1:]

    @staticmethod
    def loss(net: Any, x: Any, y: Any) -> Any:
        from torch.nn import functional as F

        logits = net(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def val_loss(self) -> float:
        import torch

        with torch.no_grad():
            return float(self.loss(self.model, self.val[:, :-1], self.val[:, 1:]))


class CNNTask:
    """scikit-learn's digits, a small CNN."""

    held_out = 297
    exact = None

    def __init__(self, seed: int, rank: int, world: int, batch: int = BATCH) -> None:
        import torch
        from torch import nn

        sys.path.insert(0, str(EXAMPLES))
        from digits import digits

        x, y = digits().tensors
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
        x = x[order].view(-1, 1, 8, 8)
        y = y[order]
        self.val = (x[:self.held_out], y[:self.held_out])
        self.x = x[self.held_out:][rank::world]  # this worker's shard
        self.y = y[self.held_out:][rank::world]
        self.batch = batch
        self.gen = torch.Generator().manual_seed(seed * 1000 + rank + 1)
        self.perm = torch.randperm(len(self.y), generator=self.gen)
        self.pos = 0
        torch.manual_seed(seed)
        w = 32
        self.model = nn.Sequential(
            nn.Conv2d(1, w, 3, padding=1), nn.ReLU(),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * w, 4 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(4 * w * 4, 256), nn.ReLU(), nn.Linear(256, 10))
        for m in self.model.modules():  # He et al. 2015, for the ReLUs
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def optimizer(self) -> Any:
        import torch

        return torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def next_batch(self) -> tuple[Any, Any]:
        import torch

        if self.pos + self.batch > len(self.perm):  # a new epoch of this shard
            self.perm = torch.randperm(len(self.y), generator=self.gen)
            self.pos = 0
        idx = self.perm[self.pos:self.pos + self.batch]
        self.pos += self.batch
        return self.x[idx], self.y[idx]

    @staticmethod
    def loss(net: Any, x: Any, y: Any) -> Any:
        from torch.nn import functional as F

        return F.cross_entropy(net(x), y)

    def val_loss(self) -> float:
        import torch

        with torch.no_grad():
            return float(self.loss(self.model, *self.val))


class MLPTask:
    """A tiny model (an MLP of 332 KiB, 3 layers): random inputs and labels, SGD with
    momentum."""

    exact = None

    def __init__(self, seed: int, rank: int, world: int, batch: int = BATCH) -> None:
        import torch

        torch.manual_seed(seed)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
            torch.nn.ReLU(), torch.nn.Linear(256, 10))
        self.gen = torch.Generator().manual_seed(seed * 1000 + rank + 1)
        self.batch = batch

    def optimizer(self) -> Any:
        import torch

        return torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)

    def next_batch(self) -> tuple[Any, Any]:
        import torch

        return (torch.randn(self.batch, 64, generator=self.gen),
                torch.randint(10, (self.batch,), generator=self.gen))

    @staticmethod
    def loss(net: Any, x: Any, y: Any) -> Any:
        from torch.nn import functional as F

        return F.cross_entropy(net(x), y)


class SleepyTask:
    """``zoo`` (a zoo model's name, ``resnet50/16``: base width 16) with emulated compute:
    a forward of ``fwd_ms``, a backward of ``bwd_ms`` yielding the gradients in ready
    order; no data and no update (``zero_grad`` only)."""

    def __init__(self, seed: int, rank: int, world: int, batch: int = BATCH, *,
                 zoo: str = "resnet50/16", fwd_ms: float = 20.0, bwd_ms: float = 60.0) -> None:
        from autotune.workload import model_shapes, sleepy_model

        self.model = sleepy_model(model_shapes(zoo), fwd_ms / 1e3, bwd_ms / 1e3, rank + 1)
        self.exact = (world + 1) / 2  # the mean of rank + 1 over the workers

    def optimizer(self) -> Any:
        return _ZeroGrad(self.model)

    def next_batch(self) -> tuple[Any, None]:
        import torch

        return torch.ones(1), None

    @staticmethod
    def loss(net: Any, x: Any, _y: None) -> Any:
        return net(x)


class _ZeroGrad:
    """No update; ``zero_grad`` zeroes the model's gradients."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def step(self) -> None:
        pass

    def zero_grad(self, set_to_none: bool = False) -> None:
        self.model.zero_grad(set_to_none=set_to_none)


TASKS = {"gpt": GPTTask, "cnn": CNNTask, "mlp": MLPTask, "sleepy": SleepyTask}


def build(spec: dict, rank: int, workers: int) -> Any:
    """The task ``spec`` names (``{"name": ..., "seed": ..., "batch": ..., options}``) on
    worker ``rank`` of ``workers``."""
    spec = dict(spec)
    cls = TASKS[spec.pop("name")]
    return cls(spec.pop("seed", 0), rank, workers, spec.pop("batch", BATCH), **spec)
