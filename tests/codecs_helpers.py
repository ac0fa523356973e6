"""Simulated data-parallel training with compressed gradients, in one process.

``WORKERS`` workers train one MLP replica (replicas stay identical anyway: all apply the
same averaged gradient). Each step every worker draws a fresh batch from its OWN data
distribution (inputs shifted per worker: non-IID shards of a teacher-labelled,
noisy-label classification task), computes its gradient (all workers at once with
``torch.func.vmap``), and the flat gradient is cut into chunks. Each chunk is encoded
with the worker's own :class:`ErrorFeedback` (or plain ``encode`` without feedback),
packed, and the packed payloads are aggregated as the runtime does: summable codecs are
summed as packed buffers (the all-reduce) and decoded once, then ``after_sum``; the
others are decoded one by one and summed (all-gather + decode). The sum / WORKERS is the
gradient of an SGD step (cosine learning-rate decay). The score is the loss on a fixed
held-out set after the last step.

Run as a script to print the convergence table of docs/compression.md:
``.venv/bin/python tests/codecs_helpers.py 0 1 2`` (seeds).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from autotune.runtime.codecs import (
    Context, ErrorFeedback, decode_sum, make_codec, sum_packed, whole,
)

WORKERS = 4
STEPS = 300
BATCH = 32  # per worker per step
LR = 0.5
CHUNK = 4096  # elements per chunk; every chunk is compressed in this simulation
DIM, HIDDEN, CLASSES = 16, 64, 10
LABEL_NOISE = 0.5
HELD_OUT = 1024  # per worker

# (label, codec name, codec parameters)
CODEC_RUNS = (
    ("fp16", "fp16", {}),
    ("bf16", "bf16", {}),
    ("topk 1%", "topk", {"ratio": 0.01}),
    ("randomk 10%", "randomk", {"ratio": 0.1}),
    ("onebit", "onebit", {}),
    ("powersgd r=4", "powersgd", {"rank": 4}),
)


@dataclass
class Result:
    label: str
    feedback: bool
    final_loss: float
    wire_ratio: float
    cpu_seconds: float


class Task:
    """The workers' data distributions: a random tanh teacher with noisy argmax labels;
    worker w's inputs are N(shift_w, I)."""

    def __init__(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.w1 = torch.randn(DIM, 32, generator=g) / DIM ** 0.5
        self.w2 = torch.randn(32, CLASSES, generator=g)
        self.shifts = torch.randn(WORKERS, 1, DIM, generator=g) * 0.5

    def sample(self, m: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``m`` samples per worker: x [WORKERS, m, DIM], y [WORKERS, m]."""
        x = torch.randn(WORKERS, m, DIM, generator=gen) + self.shifts
        logits = torch.tanh(x @ self.w1) @ self.w2
        y = (logits + LABEL_NOISE * torch.randn(logits.shape, generator=gen)).argmax(-1)
        return x, y


def train(
    codec_name: str = "none", feedback: bool = True, steps: int = STEPS, seed: int = 0,
    **params,
) -> tuple[float, float]:
    """Train with ``codec_name``; returns (held-out loss, wire bytes / float32 bytes)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead on a shared machine
    try:
        return _train(codec_name, feedback, steps, seed, params)
    finally:
        torch.set_num_threads(threads)


def _train(codec_name: str, feedback: bool, steps: int, seed: int, params: dict) -> tuple[float, float]:
    task = Task(seed)
    held_x, held_y = task.sample(HELD_OUT, torch.Generator().manual_seed(seed + 1))
    torch.manual_seed(seed + 2)
    model = nn.Sequential(
        nn.Linear(DIM, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    )
    weights = {k: v.detach().clone() for k, v in model.named_parameters()}
    names = list(weights)
    sizes = [weights[k].numel() for k in names]
    numel = sum(sizes)

    def loss_fn(w: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(functional_call(model, w, (x,)), y)

    per_worker_grad = vmap(grad(loss_fn), in_dims=(None, 0, 0))
    chunks = [(o, min(CHUNK, numel - o)) for o in range(0, numel, CHUNK)]
    codec = make_codec(codec_name, world_size=WORKERS, seed=seed, **params)
    efs = [ErrorFeedback(numel) for _ in range(WORKERS)]
    gen = torch.Generator().manual_seed(seed + 3)
    wire = raw = 0
    for step in range(steps):
        grads = per_worker_grad(weights, *task.sample(BATCH, gen))
        flat = torch.cat([grads[k].reshape(WORKERS, -1) for k in names], dim=1)
        avg = torch.empty(numel)
        for cid, (o, n) in enumerate(chunks):
            ctx = Context(iteration=step, chunk_id=cid)
            packed = []
            for w in range(WORKERS):
                chunk = flat[w, o:o + n]
                payload = (efs[w].encode(codec, chunk, whole(o, n), ctx) if feedback
                           else codec.encode(chunk, ctx))
                packed.append(codec.pack(payload))
            wire += sum(b.numel() * b.element_size() for b in packed)
            raw += WORKERS * n * 4
            if codec.summable:  # all-reduce of packed payloads, decode once
                summed = codec.unpack(sum_packed(codec, packed), n)
                total = codec.decode(summed, n, ctx)
                codec.after_sum(summed, n, ctx)
            else:  # all-gather, decode each, sum
                total = decode_sum(codec, packed, n, ctx)
            avg[o:o + n] = total / WORKERS
        lr = LR * 0.5 * (1 + math.cos(math.pi * step / steps))
        for k, g in zip(names, avg.split(sizes)):
            weights[k] -= lr * g.view_as(weights[k])
    with torch.no_grad():
        loss = float(loss_fn(weights, held_x.reshape(-1, DIM), held_y.reshape(-1)))
    if not math.isfinite(loss):
        raise FloatingPointError(f"{codec_name}: training diverged")
    return loss, wire / raw


def run(label: str, name: str, feedback: bool, seed: int, **params) -> Result:
    t = time.process_time()
    loss, ratio = train(name, feedback=feedback, seed=seed, **params)
    return Result(label, feedback, loss, ratio, time.process_time() - t)


def table(seed: int = 0) -> list[Result]:
    """The uncompressed reference, then every codec with and without error feedback."""
    out = [run("none", "none", True, seed)]
    for label, name, params in CODEC_RUNS:
        for fb in (True, False):
            out.append(run(label, name, fb, seed, **params))
    return out


def markdown(by_seed: dict[int, list[Result]]) -> str:
    seeds = list(by_seed)
    head = "| codec | error feedback | wire bytes / raw | " + " | ".join(
        f"loss (seed {s}) | vs none" for s in seeds) + " |"
    lines = [head, "| --- " * (3 + 2 * len(seeds)) + "|"]
    for i, r in enumerate(by_seed[seeds[0]]):
        fb = "-" if r.label == "none" else ("yes" if r.feedback else "no")
        cells = []
        for s in seeds:
            ref = by_seed[s][0].final_loss
            x = by_seed[s][i].final_loss
            cells.append(f"{x:.4f} | {100 * (x / ref - 1):+.1f}%")
        lines.append(f"| {r.label} | {fb} | {r.wire_ratio:.4f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    seeds = [int(a) for a in sys.argv[1:]] or [0]
    results = {s: table(s) for s in seeds}
    print(markdown(results))
    cpu = sum(r.cpu_seconds for rs in results.values() for r in rs)
    print(f"\n{cpu:.1f} s CPU in all ({len(seeds)} seed(s))")
