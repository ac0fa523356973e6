"""Time to average a model's gradients with the runtime, per configuration, against plain
``torch.distributed.all_reduce`` of the same tensors, on this machine (loopback).

    .venv/bin/python benchmarks/comm_bench.py                      # ResNet-50 + BERT-base
    .venv/bin/python benchmarks/comm_bench.py --model resnet50 --workers 4 --servers 2 \
        --machines 2 --repeats 5 --full
    .venv/bin/python benchmarks/comm_bench.py --model resnet50 --servers 0 \
        --chunks 64KiB,256KiB,4MiB --streams 2 --repeats 9        # all-reduce only

It starts the job itself with ``autotune launch`` (N workers, K servers) and re-enters this
file on every worker. Gradient shapes come from :mod:`autotune.zoo` (built on torch's meta
device), in ready order. For each model, every configuration is timed ``--repeats`` times
after one warm-up: ``sync`` to the configuration, then ``wait()`` (with no backward) averages the ``.grad``
values as they stand (no backward, so no overlap: pure communication time); the time of a
repeat is the slowest worker's. References, timed the same way in the same job:

* ``allreduce/tensor``: one blocking ``all_reduce`` per gradient tensor;
* ``allreduce/bucket``: DDP's way, 25 MiB flat buckets (pack, ``all_reduce``, unpack).

``--chunks`` and ``--streams`` replace the grid by all-reduce (and, with servers, push/pull)
at those chunk sizes and stream counts. Medians are printed with the ratio ``bucket
reference time / config time`` (> 1: faster than the reference), the slowest worker's
process CPU (every thread, gloo's included) per GB of gradients, and the messages per
average: the plan's chunks as the runtime runs them (after coalescing; a chunk is one
collective, or one push and pull, per worker under ``intra=flat``, several under
``root``/``scatter``), and the references' collectives. Written to
``benchmarks/results/comm_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KiB, MiB = 1024, 1024 * 1024
BUCKET = 25 * MiB


def configs(full: bool, k_max: int, per_machine: int, chunks: list[int] | None = None,
            streams_: list[int] | None = None) -> list[dict]:
    """The configurations to time (the defaults first); with ``chunks`` or ``streams_``,
    flat all-reduce (and push/pull through every server) at those."""
    out: list[dict] = []
    if chunks or streams_:
        for s in streams_ or [2]:
            for c in chunks or [4 * MiB]:
                out.append({"transport": "allreduce", "streams": s, "chunk_bytes": c})
                if k_max:
                    out.append({"transport": "pushpull", "servers": k_max, "streams": s,
                                "chunk_bytes": c})
        return out
    chunks = (256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB) if full else (1 * MiB, 4 * MiB)
    streams = (1, 2, 4, 8) if full else (1, 4)
    for s in streams:
        for c in chunks:
            out.append({"transport": "allreduce", "streams": s, "chunk_bytes": c})
    for k in range(k_max + 1):
        for s in ((1, 4) if full else (4,)):
            out.append({"transport": "pushpull", "servers": k, "streams": s,
                        "chunk_bytes": 4 * MiB})
    if per_machine > 1:
        for intra in ("root", "scatter"):
            out.append({"transport": "allreduce", "intra": intra, "streams": 4,
                        "chunk_bytes": 4 * MiB})
            if k_max:
                out.append({"transport": "pushpull", "servers": k_max, "intra": intra,
                            "streams": 4, "chunk_bytes": 4 * MiB})
    return out


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _byte_list(text: str) -> list[int]:
    from autotune.units import parse_value

    out = [parse_value("chunk_bytes", x) for x in text.split(",") if x.strip()]
    bad = [x for x in out if not isinstance(x, int)]
    if bad:
        raise argparse.ArgumentTypeError(f"not a byte size: {bad} (write 64KiB, 4MiB or bytes)")
    return out


def label(c: dict) -> str:
    text = f"{c['transport']} s={c['streams']} chunk={c['chunk_bytes'] // KiB}K"
    if c["transport"] == "pushpull":
        text += f" k={c['servers']}"
    if c.get("intra", "flat") != "flat":
        text += f" intra={c['intra']}"
    return text


# ------------------------------------------------------------------ worker side
def _worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from autotune import zoo
    from autotune.runtime import Runtime
    from autotune.runtime.config import RuntimeConfig
    from autotune.workload import gradient_bytes

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rt = Runtime.bootstrap(timeout=600)
    info = rt.info
    leader = info.rank == info.leader
    wg = dist.new_group(list(info.workers), use_local_synchronization=True)
    results: dict[str, Any] = {"world": info.as_dict(), "models": {}}

    def timed(fn: Any) -> dict[str, list[float]]:
        """Wall time and process CPU of each repeat, the slowest worker's."""
        times: list[float] = []
        cpu: list[float] = []
        for rep in range(args.repeats + 1):
            rt.worker_max(0.0)  # line the workers up
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            dt, dc = rt.worker_max([time.perf_counter() - t0, time.process_time() - c0])
            if rep:  # the first run warms up
                times.append(dt)
                cpu.append(dc)
        return {"times": times, "cpu": cpu}

    for model in args.model:
        shapes = zoo.gradient_shapes(model)
        gen = torch.Generator().manual_seed(info.rank)
        params = [torch.nn.Parameter(torch.empty(s)) for _, s in shapes]
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        grads = [p.grad for p in params]
        nbytes = gradient_bytes(params)

        def per_tensor() -> None:
            for g in grads:
                dist.all_reduce(g, group=wg)

        buckets: list[list] = [[]]  # closed at a tensor once they hold BUCKET bytes
        size = 0
        for g in grads:
            if size >= BUCKET:
                buckets.append([])
                size = 0
            buckets[-1].append(g)
            size += g.numel() * 4

        def bucketed() -> None:
            for bucket in buckets:
                flat = torch.cat([b.reshape(-1) for b in bucket])
                dist.all_reduce(flat, group=wg)
                flat /= len(info.workers)
                off = 0
                for b in bucket:
                    b.copy_(flat[off:off + b.numel()].view_as(b))
                    off += b.numel()

        rows = [{"name": "allreduce/tensor", **timed(per_tensor), "messages": len(grads)},
                {"name": "allreduce/bucket", **timed(bucketed), "messages": len(buckets)}]
        rt.register(params)
        for cfg in configs(args.full, len(info.servers), info.workers_per_machine,
                           args.chunks, args.streams):
            full_cfg = RuntimeConfig.of(cfg).check(rt.limits).as_dict()

            def run() -> None:
                rt.sync(full_cfg if leader else None)
                rt.wait()
            rows.append({"name": label(full_cfg), "config": full_cfg, **timed(run),
                         "messages": len(rt.setup.plan)})
        for row in rows:
            row["median_s"] = statistics.median(row["times"])
            row["cpu_s_per_gb"] = statistics.median(row["cpu"]) / (nbytes / 1e9)
            q = (statistics.quantiles(row["times"], n=4, method="inclusive")
                 if len(row["times"]) > 1 else [])
            row["iqr_s"] = [q[0], q[2]] if q else [row["median_s"]] * 2
        ref = rows[1]["median_s"]
        for row in rows:
            row["ratio_vs_bucket"] = ref / row["median_s"]
            row["gbit_s"] = nbytes * 8 / row["median_s"] / 1e9
        results["models"][model] = {"bytes": nbytes, "tensors": len(params), "rows": rows}
        rt.register([])
    rt.sync(stop=True) if leader else rt.sync()
    rt.shutdown()
    if leader:
        Path(args.out).write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


# ------------------------------------------------------------------ driver
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", help="zoo model (repeatable); "
                    "default resnet50 and bert-base")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--machines", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="a larger grid of configurations")
    ap.add_argument("--chunks", type=_byte_list, default=None,
                    help="time these chunk sizes only, e.g. 64KiB,256KiB,4MiB")
    ap.add_argument("--streams", type=_int_list, default=None,
                    help="time these stream counts only, e.g. 1,2,4")
    ap.add_argument("--json", "--out", dest="out", default=str(ROOT / "benchmarks" / "results" / "comm_bench.json"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.model = args.model or ["resnet50", "bert-base"]
    if args.worker:
        _worker(args)
        return 0

    sys.path.insert(0, str(ROOT))
    from autotune.launch import run_job

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(Path(__file__).resolve()), "--worker", "--repeats", str(args.repeats),
           "--out", args.out] + [x for m in args.model for x in ("--model", m)]
    if args.full:
        cmd.append("--full")
    if args.chunks:
        cmd += ["--chunks", ",".join(str(c) for c in args.chunks)]
    if args.streams:
        cmd += ["--streams", ",".join(str(c) for c in args.streams)]
    os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    code = run_job(cmd, args.workers, args.servers, args.machines, out=open(os.devnull, "w"))
    if code:
        return code
    res = json.loads(Path(args.out).read_text())
    res["args"] = {k: v for k, v in vars(args).items() if k != "worker"}
    res["host"] = {"cpus": os.cpu_count(), "load1": os.getloadavg()[0]}
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"{args.workers} workers, {args.servers} servers, machines={args.machines or 1}, "
          f"median of {args.repeats} [interquartile range]; ratio = bucketed all_reduce time / "
          "this time; CPU = the slowest worker's process CPU per GB; messages = per average")
    for model, m in res["models"].items():
        print(f"\n{model}: {m['tensors']} tensors, {m['bytes'] / MiB:.1f} MiB")
        for row in m["rows"]:
            lo, hi = row["iqr_s"]
            print(f"  {row['name']:34s} {row['median_s'] * 1000:8.1f} ms "
                  f"[{lo * 1000:.0f}-{hi * 1000:.0f}] {row['gbit_s']:6.2f} Gbit/s "
                  f"x{row['ratio_vs_bucket']:.2f}  CPU {row['cpu_s_per_gb']:5.2f} s/GB  "
                  f"{row['messages']:5d} messages")
    best = {mo: max(m["rows"][2:], key=lambda r: r["ratio_vs_bucket"])
            for mo, m in res["models"].items()}
    for mo, row in best.items():
        print(f"best for {mo}: {row['name']} x{row['ratio_vs_bucket']:.2f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
