"""Goodput of autotune's runtime vs the analytic optimum, on an emulated cluster (root only).

``--workers`` (n) worker hosts and up to ``max(--servers)`` server hosts, every NIC at
``--rate`` each way (autotune.emulate). Each worker holds ``--mbytes`` MiB of float32
gradients (``--tensors`` equal tensors); one iteration is ``Runtime.sync`` then
``Runtime.wait`` with every gradient ready (pure communication, nothing to overlap). For
``allreduce`` and for ``pushpull`` with k = each of ``--servers`` server hosts, every
(streams, chunk_bytes) of ``--settings`` is timed (``--repeats`` iterations after
``--warmup``, the slowest worker's time each) and compared with the optimum:

* all-reduce (and pushpull with k = 0): ``2(n-1)M/(nB)``;
* BytePS with k servers: ``2n(n-1)M/((n^2+kn-2k)B)`` (``M/B`` for k >= n);

with B the best one-way host-to-host sample (torch.distributed send/recv, same links).
With ``--flow-cap`` (the cloud case: every TCP flow capped below the NIC rate) B is the
NIC rate, measured with several flows at once, and the one-flow rate is reported beside
it; the default settings then include several streams.
A plain gloo ``all_reduce`` of the same bytes among the workers is timed as well, as a
reference for what gloo alone reaches. Every iteration's average is checked exactly.

The runtime's CPU cost is measured too: the process CPU time (every thread) of a worker
from ``sync`` to the end of ``wait``, the slowest worker's, per GB of gradients ("CPU s/GB":
seconds of CPU per iteration per GB; "of it kernel": the system time within it, the TCP
stack and the emulator's shaping).

Prints a table (ratio = optimum / measured median: 1.0 is the optimum), writes JSON and
a PNG:

    sudo .venv/bin/python benchmarks/goodput_bench.py                       # ~8 min
    sudo .venv/bin/python benchmarks/goodput_bench.py --settings 1x4M,4x4M --servers 0,4
    sudo .venv/bin/python benchmarks/goodput_bench.py --rate 400mbit --flow-cap 100mbit

``--trace DIR`` records every rank's operations (``autotune.runtime.data.trace``) for
``benchmarks/timeline.py``, the per-stage timeline of one iteration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import (MARK, MiB, RESULTS, add_cluster_args, add_diagnosis_args,  # noqa: E402
                      describe_link, emit, fmt_cfg, machine, measure_B, median, patch_depth,
                      pyplot, report, require_emulator, save_figure)

from autotune.sim.formulas import allreduce_time, byteps_time  # noqa: E402

DEFAULT_SETTINGS = "1x4M,1x1M,1x256K,1x64K"
CAPPED_SETTINGS = "1x4M,4x1M,4x256K,4x64K,8x256K,8x64K"  # one flow cannot fill a capped NIC


def parse_settings(text: str) -> list[tuple[int, int]]:
    """``"1x4M,4x512K"`` -> [(1, 4 MiB), (4, 512 KiB)]: streams x chunk_bytes."""
    out = []
    for item in text.split(","):
        s, _, c = item.strip().lower().partition("x")
        mult = {"k": 1024, "m": MiB}[c[-1]] if c and c[-1] in "km" else 1
        out.append((int(s), int(float(c.rstrip("km")) * mult)))
    return out


def variants(servers: list[int]) -> list[tuple[str, int]]:
    return [("allreduce", 0)] + [("pushpull", k) for k in servers]


def configs(a: argparse.Namespace) -> list[dict]:
    out = []
    for transport, k in variants(a.server_counts):
        for streams, chunk in a.setting_list:
            cfg = {"transport": transport, "streams": streams, "chunk_bytes": chunk}
            if transport == "pushpull":
                cfg["servers"] = k
            out.append(cfg)
    return out


# ---- rank program ---------------------------------------------------------------------

def rank_main(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from autotune.runtime import Runtime
    from autotune.runtime.data import trace
    from autotune.server import serve

    torch.set_num_threads(1)
    patch_depth(a.depth)  # diagnosis only (--depth)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), a.workers
    workers = dist.new_group(list(range(n)))  # every rank, before the runtime's groups
    rt = Runtime.bootstrap(timeout=300)
    if a.trace:  # diagnosis only (--trace): every rank's operations, for timeline.py
        trace.start()
    if not rt.info.is_worker:
        serve(rt)
        if a.trace:
            trace.dump(a.trace, rank, "server")
        rt.shutdown()
        dist.destroy_process_group()
        return

    numel = a.mbytes * MiB // 4 // a.tensors
    params = [torch.nn.Parameter(torch.zeros(numel)) for _ in range(a.tensors)]
    for p in params:
        p.grad = torch.zeros_like(p)
    rt.register(params)
    mine, mean = float(rank + 1), (n + 1) / 2  # exact in float32

    # reference: gloo all_reduce of the same bytes among the workers
    flat = torch.zeros(numel * a.tensors)
    ref = []
    for i in range(a.warmup + a.repeats):
        flat.fill_(mine)
        dist.barrier(group=workers)
        t0 = time.perf_counter()
        dist.all_reduce(flat, group=workers)
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=workers)
        if i >= a.warmup:
            ref.append(float(t))
    assert bool((flat == n * mean).all()), "gloo all_reduce sum is wrong"

    rows = []
    leader = rank == rt.info.leader
    for cfg in json.loads(a.configs):
        times, cpu, sys_cpu, exact = [], [], [], True
        for i in range(a.warmup + a.repeats):
            for p in params:
                p.grad.fill_(mine)
            c0, s0 = os.times(), time.perf_counter()  # os.times: every thread's CPU
            active = rt.sync(cfg if leader else None)
            t0 = time.perf_counter()
            rt.wait()
            t1, c1 = time.perf_counter(), os.times()
            t = t1 - t0
            trace.mark(f"iteration {fmt_cfg(cfg)} {i}", s0, t1)  # from the sync
            t = rt.worker_max(t)
            c = rt.worker_max(c1.user + c1.system - c0.user - c0.system)
            k = rt.worker_max(c1.system - c0.system)  # of it in the kernel (TCP, shaping)
            exact = exact and all(bool((p.grad == mean).all()) for p in params)
            if i >= a.warmup:
                times.append(t)
                cpu.append(c)
                sys_cpu.append(k)
        assert all(active[k] == v for k, v in cfg.items()), (active, cfg)
        if not exact:
            raise AssertionError(f"rank {rank}: wrong average under {cfg}")
        rows.append({"config": active, "times_s": times, "cpu_s": cpu, "sys_cpu_s": sys_cpu})
        if leader:
            print(f"{fmt_cfg(active):16s} {median(times):.3f} s  {times}", flush=True)
    if leader:
        rt.sync(stop=True)
        emit({"bytes": numel * a.tensors * 4, "gloo_allreduce_s": ref, "rows": rows})
    else:
        rt.sync()
    if a.trace:
        trace.dump(a.trace, rank, "worker")
    rt.shutdown()
    dist.destroy_process_group()


# ---- driver ---------------------------------------------------------------------------

def optimum(transport: str, n: int, k: int, M: float, B: float) -> float:
    if transport == "allreduce":
        return allreduce_time(n, M, B)
    return byteps_time(n, k, M, B)


def run(a: argparse.Namespace) -> dict:
    from rich.console import Console

    from autotune.emulate import Cluster

    con = Console(stderr=True)
    n, kmax = a.workers, max(a.server_counts)
    cfgs = configs(a)
    started = time.time()
    with Cluster(hosts=n + kmax, rate=a.rate, flow_cap=a.flow_cap,
                 congestion=a.congestion) as c:
        con.print(f"[bold]cluster[/] {c.describe()}")
        with con.status("measuring B"):
            link = measure_B(c, repeats=3)
        argv = [sys.executable, os.path.abspath(__file__), "--job", "--workers", str(n),
                "--mbytes", str(a.mbytes), "--tensors", str(a.tensors),
                "--repeats", str(a.repeats), "--warmup", str(a.warmup),
                "--configs", json.dumps(cfgs)] + (["--depth", a.depth] if a.depth else []) \
            + (["--trace", str(a.trace)] if a.trace else [])
        con.print(f"timing {len(cfgs)} configurations x {a.warmup}+{a.repeats} iterations")
        job = c.launch(argv, workers=n, servers=kmax, timeout_s=a.timeout,
                       echo=sys.stderr if a.verbose else None).check()
    r = job.last_json(MARK)
    M, B = r["bytes"], link["B"]
    rows = []
    for row in r["rows"]:
        cfg = row["config"]
        k = cfg["servers"] if cfg["transport"] == "pushpull" else 0
        med = median(row["times_s"])
        opt = optimum(cfg["transport"], n, k, M, B)
        rows.append({"config": cfg, "k": k, "times_s": row["times_s"], "median_s": med,
                     "optimum_s": opt, "ratio": opt / med,
                     "cpu_s_per_gb": median(row["cpu_s"]) / (M / 1e9),
                     "sys_cpu_s_per_gb": median(row["sys_cpu_s"]) / (M / 1e9)})
    summary = []
    default = (1, 4 * MiB)  # the space's default streams and chunk_bytes
    for transport, k in variants(a.server_counts):
        mine = [x for x in rows if x["config"]["transport"] == transport and x["k"] == k]
        best = max(mine, key=lambda x: x["ratio"])
        dflt = next((x for x in mine if (x["config"]["streams"], x["config"]["chunk_bytes"])
                     == default), None)
        summary.append({"transport": transport, "k": k, "optimum_s": best["optimum_s"],
                        "best": best, "default": dflt})
    ref = r["gloo_allreduce_s"]
    return {
        "benchmark": "goodput_bench", "workers": n, "servers": a.server_counts,
        "rate": a.rate, "flow_cap": a.flow_cap, "depth": a.depth, "mbytes": a.mbytes, "bytes": M, "tensors": a.tensors,
        "repeats": a.repeats, "warmup": a.warmup, "B": B, "link": link,
        "gloo_allreduce": {"times_s": ref, "median_s": median(ref),
                           "optimum_s": allreduce_time(n, M, B),
                           "ratio": allreduce_time(n, M, B) / median(ref)},
        "rows": rows, "summary": summary, "wall_s": time.time() - started,
        "command": "benchmarks/goodput_bench.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
    }


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    cap = f" (per-flow cap {res['flow_cap']})" if res.get("flow_cap") else ""
    t = Table(title=f"goodput: {res['workers']} workers at {res['rate']}{cap}, "
                    f"{res['mbytes']} MiB, medians of {res['repeats']}")
    for col in ("transport", "k", "optimum", "default (1 stream, 4 MiB)", "ratio",
                "best setting", "best", "ratio "):
        t.add_column(col, justify="left" if col in ("transport", "best setting") else "right")
    for s in res["summary"]:
        d, b = s["default"], s["best"]
        t.add_row(s["transport"], str(s["k"]) if s["transport"] == "pushpull" else "-",
                  f"{s['optimum_s']:.3f} s",
                  f"{d['median_s']:.3f} s" if d else "-", f"{d['ratio']:.3f}" if d else "-",
                  fmt_cfg(b["config"]), f"{b['median_s']:.3f} s", f"{b['ratio']:.3f}")
    g = res["gloo_allreduce"]
    t.add_row("gloo all_reduce", "-", f"{g['optimum_s']:.3f} s", f"{g['median_s']:.3f} s",
              f"{g['ratio']:.3f}", "(reference)", "", "")
    Console(width=140).print(t)
    lk = res["link"]
    print(f"ratio = optimum / measured median. {describe_link(lk)}; best of "
          f"{len(lk['samples_s'])} one-way samples (one flow: median {lk['bytes_per_s'] / 1e6:.2f} "
          f"MB/s; nominal NIC {lk['nominal_bytes_per_s'] / 1e6:.2f} MB/s). Load average at the end: "
          f"{', '.join(f'{x:.1f}' for x in res['machine']['loadavg'])}.")
    Console(width=140).print(all_table(res))


def all_table(res: dict):
    from rich.table import Table

    t = Table(title="every configuration timed")
    for col in ("configuration", "median", "optimum", "ratio", "CPU s/GB", "of it kernel",
                "samples"):
        t.add_column(col, justify="left" if col in ("configuration", "samples") else "right")
    for x in res["rows"]:
        t.add_row(fmt_cfg(x["config"]), f"{x['median_s']:.3f} s", f"{x['optimum_s']:.3f} s",
                  f"{x['ratio']:.3f}", f"{x['cpu_s_per_gb']:.2f}",
                  f"{x['sys_cpu_s_per_gb']:.2f}",
                  " ".join(f"{v:.2f}" for v in x["times_s"]))
    return t


def plot(res: dict, path: Path) -> None:
    plt = pyplot()
    summ = res["summary"]
    labels = ["allreduce" if s["transport"] == "allreduce" else f"pushpull k={s['k']}"
              for s in summ]
    xs = list(range(len(summ)))
    fig, ax = plt.subplots(figsize=(8, 4.2))
    w = 0.27
    ax.bar([x - w for x in xs], [s["optimum_s"] for s in summ], w, label="optimum", color="#999")
    ax.bar(xs, [s["default"]["median_s"] if s["default"] else 0 for s in summ], w,
           label="default (1 stream, 4 MiB)", color="#4c72b0")
    ax.bar([x + w for x in xs], [s["best"]["median_s"] for s in summ], w,
           label="best setting", color="#55a868")
    for x, s in zip(xs, summ):
        b = s["best"]
        ax.scatter([x + w] * len(b["times_s"]), b["times_s"], color="k", s=6, zorder=3)
        ax.text(x + w, b["median_s"] * 1.02, f"{b['ratio']:.2f}", ha="center", fontsize=8)
        if s["default"]:
            ax.text(x, s["default"]["median_s"] * 1.02, f"{s['default']['ratio']:.2f}",
                    ha="center", fontsize=8)
    ax.set_xticks(xs, labels)
    ax.set_ylabel("seconds per iteration")
    ax.set_title(f"{res['workers']} workers at {res['rate']}, {res['mbytes']} MiB; "
                 f"ratio = optimum / measured")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--servers", default="0,1,2,4", help="server counts k to time (pushpull)")
    add_cluster_args(ap, "cap per TCP flow, e.g. 50mbit")
    ap.add_argument("--mbytes", type=int, default=64, help="MiB of gradients per worker")
    ap.add_argument("--tensors", type=int, default=16, help="equal gradient tensors")
    ap.add_argument("--settings", default=None,
                    help=f"streams x chunk_bytes to try per variant (default {DEFAULT_SETTINGS}; "
                         f"{CAPPED_SETTINGS} with --flow-cap)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--verbose", action="store_true", help="echo the ranks' output")
    ap.add_argument("--json", type=Path, default=None,
                    help="default results/goodput_bench.json (_cap.json with --flow-cap)")
    ap.add_argument("--plot", type=Path, default=None)
    add_diagnosis_args(ap, "every rank writes its operations to")
    ap.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--configs", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.job:
        rank_main(a)
        return
    a.server_counts = [int(k) for k in a.servers.split(",")]
    a.settings = a.settings or (CAPPED_SETTINGS if a.flow_cap else DEFAULT_SETTINGS)
    a.setting_list = parse_settings(a.settings)
    tag = "goodput_bench" + ("_cap" if a.flow_cap else "")
    a.json = a.json or RESULTS / f"{tag}.json"
    a.plot = a.plot or RESULTS / f"{tag}.png"
    require_emulator("goodput_bench")
    res = run(a)
    report(res, print_table, a.json, plot, a.plot)


if __name__ == "__main__":
    main()
