"""What ``broadcast_buffers=True`` costs per iteration, against DDP's own buffer sync.

    .venv/bin/python benchmarks/buffer_sync_bench.py [--model resnet50] [--reps 50]

Starts 2 workers on loopback (``autotune launch``). Each times, on the same buffers of a
zoo model (ResNet-50: 53 BatchNorm layers, 106 float tensors + 53 counters), DDP's
pre-forward buffer sync (``torch.distributed._broadcast_coalesced`` from rank 0, what
``DistributedDataParallel`` calls) and the session's (``Runtime.broadcast_from_leader``:
one broadcast per dtype), alternating, ``reps`` times each, and one forward pass of the
model at batch 8 for scale. Prints medians with their spread and the ratio session/DDP,
and writes ``benchmarks/results/buffer_sync.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import RESULTS, machine, quartiles, save  # noqa: E402


def _stats(xs: list[float]) -> dict:
    q1, mid, q3 = quartiles(xs)
    return {"median_s": mid, "q1_s": q1, "q3_s": q3, "n": len(xs)}


def rank_main(model_name: str, reps: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from autotune import zoo
    from autotune.runtime import Runtime

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = zoo.build(model_name, device="cpu")
    bufs = list(model.buffers())
    rt = Runtime.bootstrap(timeout=60)
    pg = dist.new_group(backend="gloo")
    ddp_t, ses_t = [], []
    for i in range(reps + 3):
        dist.barrier()
        t0 = time.perf_counter()
        dist._broadcast_coalesced(pg, bufs, 256 * 1024 * 1024, 0)
        t1 = time.perf_counter()
        dist.barrier()
        t2 = time.perf_counter()
        rt.broadcast_from_leader(bufs, "buffers")
        t3 = time.perf_counter()
        if i >= 3:
            ddp_t.append(t1 - t0)
            ses_t.append(t3 - t2)
    x = zoo.example_inputs(model_name, batch_size=8)
    with torch.no_grad():
        fwd = []
        for _ in range(4):
            t0 = time.perf_counter()
            model(*x) if isinstance(x, tuple) else model(x)
            fwd.append(time.perf_counter() - t0)
    rt.sync(stop=True) if rank == rt.info.leader else rt.sync()
    rt.shutdown()
    if rank == 0:
        n = sum(b.numel() * b.element_size() for b in bufs)
        Path(out).write_text(json.dumps({
            "model": model_name, "buffers": len(bufs), "buffer_bytes": n,
            "ddp": _stats(ddp_t), "session": _stats(ses_t), "forward_b8": _stats(fwd[1:])}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--job", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.job:
        rank_main(a.job[0], int(a.job[1]), a.job[2])
        return
    from autotune.launch import run_job

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        code = run_job([__file__, "--job", a.model, str(a.reps), out], workers=2,
                       out=open(os.devnull, "w"))
        if code:
            sys.exit(f"buffer_sync_bench: the job failed (exit {code})")
        res = json.loads(Path(out).read_text())
    res["machine"] = machine()
    d, s = res["ddp"], res["session"]
    res["ratio_session_over_ddp"] = s["median_s"] / d["median_s"]
    ms = 1e3
    print(f"{res['model']}: {res['buffers']} buffers, {res['buffer_bytes'] / 1024:.0f} KiB")
    for name, m in (("DDP buffer sync", d), ("session buffer sync", s),
                    ("forward, batch 8", res["forward_b8"])):
        print(f"  {name:20s} median {m['median_s'] * ms:7.3f} ms  "
              f"(quartiles {m['q1_s'] * ms:.3f}-{m['q3_s'] * ms:.3f}, n={m['n']})")
    print(f"  session / DDP: {res['ratio_session_over_ddp']:.2f}x")
    save(res, RESULTS / "buffer_sync.json")


if __name__ == "__main__":
    main()
