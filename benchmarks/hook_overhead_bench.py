"""What autotune's DDP comm hook adds to a real training step: a zoo model (ResNet-50,
batch 64) forward and backward under DDP with autotune's hook
(:class:`autotune.runtime.ddp.ddp_hook.CommHookState`, which hands the buckets to the
native runtime), under plain DDP (its default hook),
and alone (no DDP: the compute), in rotation, iteration by iteration; medians of the
slowest rank.

    # one GPU, 2 ranks sharing it (DDP over gloo: NCCL refuses two ranks on one device)
    autotune launch -n 2 benchmarks/hook_overhead_bench.py --device cuda
    # one GPU per rank (DDP over NCCL)
    torchrun --nproc-per-node 8 benchmarks/hook_overhead_bench.py --device cuda
    # a smoke run on CPU
    autotune launch -n 2 benchmarks/hook_overhead_bench.py --device cpu --batch 2 --iterations 2

Options: ``--model`` (resnet50), ``--batch`` (64), ``--iterations`` (20, after
``--warmup`` 3), ``--streams``/``--chunk-mib``/``--compression`` (the hook's
configuration: 1, 4, none), ``--json PATH``. DDP's process group is chosen as
``autotune selftest --ddp`` chooses it (:func:`autotune.selftest.rank_ddp.ddp_backend`).
Rank 0 prints the table and a ``BENCH {json}`` line. Not run on a GPU in this project.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from autotune import zoo
from autotune.runtime.ddp.ddp_hook import CommHookState
from autotune.selftest.rank import pick_device
from autotune.selftest.rank_ddp import ddp_backend


class WithLoss(nn.Module):
    """``model`` whose forward returns a scalar loss of its output."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return zoo.synthetic_loss(self.model(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--chunk-mib", type=float, default=4.0)
    ap.add_argument("--compression", default="none")
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    world = dist.group.WORLD
    device = pick_device(args.device)
    backend, why = ddp_backend(device, world)
    group = dist.new_group(backend=backend)
    cuda = device.type == "cuda"
    kw: dict[str, Any] = {"device_ids": [device.index]} if cuda else {}

    def build() -> nn.Module:
        return WithLoss(zoo.build(args.model, device=device))

    models = {"alone": build(),
              "plain DDP": DDP(build(), process_group=group, bucket_cap_mb=args.bucket_mb, **kw),
              "DDP + hook": DDP(build(), process_group=group, bucket_cap_mb=args.bucket_mb, **kw)}
    transport = CommHookState.install(models["DDP + hook"])  # joins a runtime
    leader = dist.get_rank() == 0
    wanted = {"streams": args.streams, "chunk_bytes": int(args.chunk_mib * (1 << 20)),
              "compression": args.compression}
    config = transport.sync(wanted if leader else None)
    (x,) = zoo.example_inputs(args.model, batch_size=args.batch, device=device)

    def sync() -> float:
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter()

    def step(m: nn.Module) -> tuple[float, float]:
        if m is models["DDP + hook"]:
            transport.sync()  # the buckets DDP made registered, as a session does
        m.zero_grad(set_to_none=False)
        dist.barrier(group=world)
        t0 = sync()
        loss = m(x)
        t1 = sync()
        loss.backward()
        t2 = sync()
        return t1 - t0, t2 - t1

    names = list(models)
    times: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for i in range(args.warmup + args.iterations):
        order = names[i % 3:] + names[:i % 3]  # each goes first as often
        mine = {n: step(models[n]) for n in order}
        t = torch.tensor([v for n in names for v in mine[n]], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank
        if i >= args.warmup:
            for j, n in enumerate(names):
                times[n].append((t[2 * j].item(), t[2 * j + 1].item()))

    med = {n: {"forward_ms": 1e3 * statistics.median(f for f, _ in ts),
               "backward_ms": 1e3 * statistics.median(b for _, b in ts),
               "step_ms": 1e3 * statistics.median(f + b for f, b in ts)}
           for n, ts in times.items()}
    result = {"model": args.model, "batch": args.batch, "ranks": dist.get_world_size(),
              "device": str(device), "ddp_backend": backend, "why": why,
              "hook_config": config.as_dict(), "iterations": args.iterations, "medians": med,
              "hook_vs_plain_backward": med["DDP + hook"]["backward_ms"]
              / med["plain DDP"]["backward_ms"],
              "hook_vs_plain_step": med["DDP + hook"]["step_ms"] / med["plain DDP"]["step_ms"]}
    if dist.get_rank() == 0:
        print(f"{args.model}, batch {args.batch} per rank, {result['ranks']} ranks on {device}, "
              f"DDP over {backend} ({why}); median of {args.iterations}, slowest rank")
        print(f"{'':12} {'forward ms':>11} {'backward ms':>12} {'step ms':>9}")
        for n, m in med.items():
            print(f"{n:12} {m['forward_ms']:11.2f} {m['backward_ms']:12.2f} {m['step_ms']:9.2f}")
        print(f"hook / plain DDP: backward x{result['hook_vs_plain_backward']:.3f}, "
              f"step x{result['hook_vs_plain_step']:.3f}")
        print("BENCH " + json.dumps(result), flush=True)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(result, fh, indent=1)
    transport.rt.sync(stop=True) if leader else transport.rt.sync()
    transport.rt.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
