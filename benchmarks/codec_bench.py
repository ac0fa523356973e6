"""Throughput per gradient codec vs no compression, on an emulated cluster (root only).

``--workers`` worker hosts and one server host, every NIC at ``--rate`` each way
(autotune.emulate). Each worker holds the gradient set of ``--model`` (shapes from
``autotune.zoo``; ResNet-50: 161 tensors, 97.5 MiB of float32). One iteration is
``Runtime.sync`` then ``Runtime.wait`` with every gradient ready (pure communication:
nothing to overlap, so the codecs' CPU time is not hidden either). For each transport of
``--transports`` (allreduce; pushpull with the one server, k=1) every codec of ``--codecs``
is timed under the same streams / chunk size (``--repeats`` iterations after ``--warmup``,
the slowest worker's time each) and compared with ``compression=none`` measured in the
same run. Also reported: the bytes the codec puts on the wire per worker and iteration
relative to float32 (from the plan and the codec's payload sizes; chunks below
``compress_min_bytes`` travel uncompressed), and, for ``none``, a check of the average.

    sudo .venv/bin/python benchmarks/codec_bench.py                 # ~5 min
    sudo .venv/bin/python benchmarks/codec_bench.py --codecs none,fp16,topk --transports allreduce

Prints a table (speed-up = time of none / time of the codec), writes JSON and a Markdown
table (``benchmarks/results/codec_bench.{json,md}``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import MARK, MiB, RESULTS, emit, machine, measure_B, median, model_shapes, \
    require_emulator, save  # noqa: E402

CODEC_PARAMS = {"topk": {"topk_ratio": 0.01}, "randomk": {"randomk_ratio": 0.1},
                "powersgd": {"powersgd_rank": 4}}
ALL_CODECS = "none,fp16,bf16,topk,randomk,onebit,powersgd"


def configs(a: argparse.Namespace) -> list[dict]:
    out = []
    for transport in a.transports.split(","):
        for codec in a.codecs.split(","):
            cfg = {"transport": transport, "streams": a.streams, "chunk_bytes": a.chunk_mib * MiB,
                   "compression": codec, **CODEC_PARAMS.get(codec, {})}
            if transport == "pushpull":
                cfg["servers"] = 1
            if codec != "none":
                cfg["compress_min_bytes"] = a.min_kib * 1024
            out.append(cfg)
    return out


def label(cfg: dict) -> str:
    c = cfg["compression"]
    extra = {"topk": f" {cfg.get('topk_ratio', 0) * 100:g}%",
             "randomk": f" {cfg.get('randomk_ratio', 0) * 100:g}%",
             "powersgd": f" r={cfg.get('powersgd_rank')}"}.get(c, "")
    return c + extra


# ---- rank program ---------------------------------------------------------------------

def wire_bytes(rt) -> tuple[int, int]:
    """(bytes a worker sends per iteration under the active configuration, float32 bytes)."""
    setup = rt.setup
    comp = setup.compression
    sent = raw = 0
    for c in setup.plan:
        raw += c.nbytes
        sent += comp.codec.payload_nbytes(c.numel) if comp.compresses(c) else c.nbytes
    return sent, raw


def rank_main(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from autotune.runtime import Runtime
    from autotune.server import serve

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    workers = dist.new_group(list(range(a.workers)))  # every rank, before the runtime's
    rt = Runtime.bootstrap(timeout=600)
    if not rt.info.is_worker:
        serve(rt)
        rt.shutdown()
        dist.destroy_process_group()
        return
    shapes = model_shapes(a.model)
    g = torch.Generator().manual_seed(rank)
    source = [torch.randn(s, generator=g) for _, s in shapes]
    params = [torch.nn.Parameter(torch.zeros(s)) for _, s in shapes]
    for p, s in zip(params, source):
        p.grad = s.clone()
    rt.register(params)
    # the exact average of every tensor's element sum, to check the lossless rows
    sums = torch.tensor([float(s.double().sum()) for s in source], dtype=torch.float64)
    dist.all_reduce(sums, group=workers)
    sums /= a.workers
    leader = rank == rt.info.leader
    rows = []
    for cfg in json.loads(a.configs):
        times = []
        for i in range(a.warmup + a.repeats):
            for p, s in zip(params, source):
                p.grad.copy_(s)
            active = rt.sync(cfg if leader else None)
            t0 = time.perf_counter()
            rt.wait()
            t = rt.worker_max(time.perf_counter() - t0)
            if i >= a.warmup:
                times.append(t)
        got = torch.tensor([float(p.grad.double().sum()) for p in params], dtype=torch.float64)
        finite = all(bool(torch.isfinite(p.grad).all()) for p in params)
        err = float(((got - sums).abs() / (sums.abs() + 1.0)).max())
        if cfg["compression"] == "none" and err > 1e-3:
            raise AssertionError(f"rank {rank}: wrong average under {cfg} ({err})")
        if not finite:
            raise AssertionError(f"rank {rank}: non-finite gradients under {cfg}")
        sent, raw = wire_bytes(rt)
        rows.append({"config": active, "times_s": times, "wire_bytes": sent, "raw_bytes": raw,
                     "sum_error": err})
        if leader:
            print(f"{cfg['transport']:9s} {label(cfg):12s} {median(times):7.3f} s  "
                  f"wire {sent / raw:.4f}", flush=True)
    if leader:
        rt.sync(stop=True)
        emit({"rows": rows, "bytes": rows[0]["raw_bytes"] if rows else 0})
    else:
        rt.sync()
    rt.shutdown()
    dist.destroy_process_group()


# ---- driver ---------------------------------------------------------------------------

def run(a: argparse.Namespace) -> dict:
    from rich.console import Console

    from autotune.emulate import Cluster

    con = Console(stderr=True)
    cfgs = configs(a)
    pushpull = any(c["transport"] == "pushpull" for c in cfgs)
    started = time.time()
    with Cluster(hosts=a.workers + int(pushpull), rate=a.rate) as c:
        con.print(f"[bold]cluster[/] {c.describe()}")
        with con.status("measuring B"):
            link = measure_B(c, repeats=3)
        argv = [sys.executable, os.path.abspath(__file__), "--job", "--workers", str(a.workers),
                "--model", a.model, "--repeats", str(a.repeats), "--warmup", str(a.warmup),
                "--configs", json.dumps(cfgs)]
        con.print(f"timing {len(cfgs)} configurations x {a.warmup}+{a.repeats} iterations")
        job = c.launch(argv, workers=a.workers, servers=int(pushpull), timeout_s=a.timeout,
                       echo=sys.stderr if a.verbose else None).check()
    r = job.last_json(MARK)
    rows = []
    base: dict[str, float] = {}
    for row in r["rows"]:
        med = median(row["times_s"])
        cfg = row["config"]
        if cfg["compression"] == "none":
            base[cfg["transport"]] = med
        rows.append({**row, "label": label(cfg), "transport": cfg["transport"], "median_s": med,
                     "wire_ratio": row["wire_bytes"] / row["raw_bytes"]})
    for row in rows:
        ref = base.get(row["transport"])
        row["speedup"] = ref / row["median_s"] if ref else math.nan
    return {
        "benchmark": "codec_bench", "workers": a.workers, "rate": a.rate, "model": a.model,
        "bytes": r["bytes"], "streams": a.streams, "chunk_bytes": a.chunk_mib * MiB,
        "compress_min_bytes": a.min_kib * 1024, "repeats": a.repeats, "warmup": a.warmup,
        "B": link["B"], "link": link, "rows": rows, "wall_s": time.time() - started,
        "command": "benchmarks/codec_bench.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
    }


def markdown(res: dict) -> str:
    lines = ["| transport | codec | wire bytes / float32 | median s / iteration | runs (s) | "
             "speed-up vs none |", "| --- | --- | ---: | ---: | --- | ---: |"]
    for row in res["rows"]:
        runs = ", ".join(f"{t:.2f}" for t in row["times_s"])
        k = " k=1" if row["transport"] == "pushpull" else ""
        lines.append(f"| {row['transport']}{k} | {row['label']} | {row['wire_ratio']:.4f} | "
                     f"{row['median_s']:.3f} | {runs} | x{row['speedup']:.2f} |")
    return "\n".join(lines)


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{res['model']} gradients ({res['bytes'] / MiB:.1f} MiB), {res['workers']} "
                    f"workers at {res['rate']}, streams {res['streams']}, chunks "
                    f"{res['chunk_bytes'] // MiB} MiB (medians of {res['repeats']})")
    for col in ("transport", "codec", "wire / float32", "median s", "speed-up vs none"):
        t.add_column(col, justify="left" if col in ("transport", "codec") else "right")
    for row in res["rows"]:
        t.add_row(row["transport"], row["label"], f"{row['wire_ratio']:.4f}",
                  f"{row['median_s']:.3f}", f"x{row['speedup']:.2f}")
    Console(width=120).print(t)
    print(f"B (best one-way sample) = {res['B'] / 1e6:.2f} MB/s; wall {res['wall_s']:.0f} s")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4, help="worker hosts (default 4)")
    ap.add_argument("--rate", default="200mbit", help="NIC rate each way (default 200mbit)")
    ap.add_argument("--model", default="resnet50", help="zoo model whose gradients are sent")
    ap.add_argument("--codecs", default=ALL_CODECS)
    ap.add_argument("--transports", default="allreduce,pushpull",
                    help="allreduce and/or pushpull (pushpull uses one server host, k=1)")
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--chunk-mib", type=int, default=4)
    ap.add_argument("--min-kib", type=int, default=1024, help="compress_min_bytes in KiB")
    ap.add_argument("--repeats", type=int, default=3, help="timed iterations (medians quoted)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--json", type=Path, default=RESULTS / "codec_bench.json")
    ap.add_argument("--verbose", action="store_true", help="echo the ranks' output")
    ap.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--configs", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.job:
        rank_main(a)
        return
    require_emulator("codec_bench")
    res = run(a)
    print_table(res)
    save(res, a.json)
    md = a.json.with_suffix(".md")
    md.write_text(markdown(res) + "\n")
    print(f"wrote {a.json} and {md}")


if __name__ == "__main__":
    main()
