"""The native runtime's CPU per GB of gradients, with ``.grad`` as views of the averages
(``grad_views``, no write-back copy) and without (issue 29, item 1).

A rank program, over loopback::

    autotune launch -n 2 -k 1 benchmarks/grad_views_bench.py
    autotune launch -n 2 -k 1 benchmarks/grad_views_bench.py --mib 16 --iterations 4  # smoke

Each worker registers ``--mib`` MiB of float32 parameters in ``--tensors`` tensors; a
step is a backward pass of ``sum(p * t)`` (so ``.grad`` is ``t``: almost no compute) and
``wait()``. For each configuration (all-reduce at 4 MiB and 256 KiB chunks, push/pull
through the server at 4 MiB) the views are switched off and on iteration by iteration, so
both see the same machine; per iteration it records the process CPU (every thread: the
stream threads and gloo's included) and the main thread's CPU, from the backward pass to
the end of ``wait()``, per GB of gradients, and the wall time. Gradients are set to
``None`` before each backward pass (``optimizer.zero_grad()``'s default); ``--in-place``
zeroes them in place instead. Rank 0 prints medians with the interquartile range and the
ratio views/copies, and writes ``benchmarks/results/grad_views_bench.json``. Every
average is checked against the exact mean of the known gradients.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import RESULTS, machine, quartiles  # noqa: E402

from autotune.runtime import Runtime  # noqa: E402
from autotune.server import serve  # noqa: E402

MiB = 1 << 20
CONFIGS = {
    "allreduce 4 MiB": {"transport": "allreduce", "streams": 2, "chunk_bytes": 4 * MiB},
    "allreduce 256 KiB": {"transport": "allreduce", "streams": 2, "chunk_bytes": 256 * 1024},
    "pushpull k=1 4 MiB": {"transport": "pushpull", "servers": 1, "streams": 2,
                           "chunk_bytes": 4 * MiB},
    "allreduce 64 KiB": {"transport": "allreduce", "streams": 2, "chunk_bytes": 64 * 1024},
    "pushpull k=1 64 KiB": {"transport": "pushpull", "servers": 1, "streams": 2,
                            "chunk_bytes": 64 * 1024},
}
DEFAULT_CONFIGS = ",".join(list(CONFIGS)[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64, help="MiB of gradients per worker")
    ap.add_argument("--tensors", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=20, help="per variant and configuration")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--in-place", action="store_true", help="zero .grad in place, not None")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS,
                    help=f"comma-separated, of: {', '.join(CONFIGS)} (default the first three)")
    ap.add_argument("--json", type=Path, default=RESULTS / "grad_views_bench.json")
    args = ap.parse_args()
    chosen = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in CONFIGS]
    if unknown:
        ap.error(f"--configs: unknown {unknown}; choose from {list(CONFIGS)}")

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rt = Runtime.bootstrap(timeout=300)
    info = rt.info
    leader = info.rank == info.leader
    if not info.is_worker:  # a Summation Service: serve until the leader stops
        serve(rt)
        rt.shutdown()
        dist.destroy_process_group()
        return
    n = len(info.workers)
    numel = args.mib * MiB // 4 // args.tensors
    params = [torch.nn.Parameter(torch.zeros(numel)) for _ in range(args.tensors)]
    rt.register(params)
    gb = args.mib * MiB / 1e9
    rows: dict[str, dict[str, Any]] = {}
    exact = True
    mean = [sum(r + 1 + i for r in range(n)) / n for i in range(args.tensors)]  # exact
    for name in chosen:
        cfg = CONFIGS[name]
        if cfg.get("servers", 0) > len(info.servers):
            continue
        samples: dict[bool, dict[str, list[float]]] = {
            v: {"cpu": [], "main": [], "wall": []} for v in (False, True)}
        for it in range(args.warmup + 2 * args.iterations):
            views = it % 2 == 1
            rt._averager.copies.grad_views = views  # the attribute grad_views= sets
            rt.sync(cfg if leader else None)
            t = [torch.full((numel,), float(info.rank + 1 + i)) for i in range(args.tensors)]
            for p in params:
                if args.in_place and p.grad is not None:
                    p.grad.zero_()
                else:
                    p.grad = None
            c0, m0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
            sum((p * ti).sum() for p, ti in zip(params, t)).backward()
            rt.wait()
            c1, m1, w1 = time.process_time(), time.thread_time(), time.perf_counter()
            exact &= all(bool((p.grad == m).all()) for p, m in zip(params, mean))
            if it >= args.warmup:
                s = samples[views]
                s["cpu"].append((c1 - c0) / gb)
                s["main"].append((m1 - m0) / gb)
                s["wall"].append(w1 - w0)
        for v, smp in samples.items():  # the slowest worker's quartiles, metric by metric
            flat = [x for k in ("cpu", "main", "wall") for x in quartiles(smp[k])]
            worst = rt.worker_max(flat)
            rows.setdefault(name, {})["views" if v else "copies"] = {
                k: worst[3 * i: 3 * i + 3] for i, k in enumerate(("cpu", "main", "wall"))}
    exact = rt.worker_max(0.0 if exact else 1.0) == 0.0
    rt.sync(stop=True) if leader else rt.sync()
    rt.shutdown()
    dist.destroy_process_group()
    if not leader:
        return
    out = {"args": {k: str(v) for k, v in vars(args).items()}, "machine": machine(),
           "rows": rows, "exact": exact}
    print(f"{args.mib} MiB of float32 gradients per worker, {n} workers, "
          f"{args.iterations} iterations per variant, grads "
          f"{'zeroed in place' if args.in_place else 'set to None'}; the slowest worker's "
          "median [interquartile range]")
    print(f"{'configuration':<20} {'variant':<7} {'CPU s/GB':>18} "
          f"{'main thread s/GB':>22} {'wall ms':>16}")
    for name, row in rows.items():
        for var in ("copies", "views"):
            q = row[var]
            print(f"{name:<20} {var:<7} "
                  f"{q['cpu'][1]:7.2f} [{q['cpu'][0]:.2f}-{q['cpu'][2]:.2f}] "
                  f"{q['main'][1]:9.3f} [{q['main'][0]:.3f}-{q['main'][2]:.3f}] "
                  f"{q['wall'][1] * 1e3:7.1f} [{q['wall'][0] * 1e3:.0f}-{q['wall'][2] * 1e3:.0f}]")
        c, v = row["copies"], row["views"]
        print(f"{'':<20} {'ratio':<7} {v['cpu'][1] / c['cpu'][1]:7.2f}{'':>11} "
              f"{v['main'][1] / c['main'][1]:9.3f}{'':>13} {v['wall'][1] / c['wall'][1]:7.2f}")
    print(f"every average exact: {exact}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1))
    print(f"wrote {args.json}")
    if not exact:
        sys.exit("an average differed from the exact mean")


if __name__ == "__main__":
    main()
