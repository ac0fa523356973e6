"""Communication on an emulated cluster vs the analytic optimum (root only).

Brings up ``--hosts`` emulated hosts at ``--rate`` each way (autotune.emulate), then:

1. B: the achieved host-to-host payload bytes/s over torch.distributed send/recv
   (one way, and both ways at once), the B of the optima below;
2. all_reduce (gloo) of ``--mbytes`` MB on all hosts vs the optimum 2(n-1)M/(nB);
3. the reference: PyTorch DDP (gloo, default 25 MB buckets) on the gradient set of a
   zoo model (``--model``, shapes from code), one backward per iteration with no
   compute to hide, vs the same optimum for its gradient bytes.

Prints a table with ratios (optimum / measured: 1.0 is perfect), writes JSON and a PNG.

    sudo .venv/bin/python benchmarks/cluster_bench.py --hosts 4 --rate 200mbit --repeats 3

The same file is the rank program (``--job``); the emulator starts one per host.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import MARK, RESULTS, emit, pyplot, report, require_emulator, save_figure  # noqa: E402

from autotune.sim.formulas import allreduce_time  # noqa: E402  2(n-1)M/(nB)


# ---- rank program ---------------------------------------------------------------------

def _timed(dist, torch, fn, repeats: int) -> list[float]:
    """Run ``fn`` once to warm up, then ``repeats`` times; each time is the slowest rank's."""
    fn()
    out = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out.append(float(t))
    return out


def rank_main(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from autotune.workload import check_average, gradient_bytes, model_shapes, sleepy_model, \
        time_ddp

    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    res: dict = {"world": n}

    # all_reduce of M bytes, checked
    m = a.mbytes * 2**20 // 4
    buf = torch.full((m,), float(rank + 1))
    res["allreduce_bytes"] = m * 4
    res["allreduce_s"] = _timed(dist, torch, lambda: dist.all_reduce(buf), a.repeats)
    buf.fill_(float(rank + 1))
    dist.all_reduce(buf)
    assert bool((buf == n * (n + 1) / 2).all()), "all_reduce sum is wrong"

    # DDP on the model's gradient set, no compute: the workload's job, whose backward
    # produces the gradients in ready order (what DDP's buckets assume), each rank + 1
    shapes = model_shapes(a.model)
    model = sleepy_model(shapes, 0.0, 0.0, rank + 1)
    res["ddp_model"] = a.model
    res["ddp_bytes"] = gradient_bytes(shapes)
    res["ddp_tensors"] = len(shapes)
    res["ddp_s"] = time_ddp(model, 1, a.repeats, init_sync=True)
    check_average(model, (n + 1) / 2, "DDP")
    if rank == 0:
        emit(res)
    dist.destroy_process_group()


# ---- driver ---------------------------------------------------------------------------

def run(a: argparse.Namespace) -> dict:
    from rich.console import Console

    from autotune.emulate import Cluster, measure_bandwidth

    con = Console(stderr=True)
    with Cluster(hosts=a.hosts, rate=a.rate) as c:
        con.print(f"[bold]cluster[/] {c.describe()}")
        with con.status("measuring B (one way)"):
            one = measure_bandwidth(c, 0, 1, nbytes=16 << 20, repeats=a.repeats)
        with con.status("measuring B (both ways at once)"):
            duplex = measure_bandwidth(c, 0, 1, nbytes=16 << 20, repeats=a.repeats, duplex=True)
        argv = [sys.executable, os.path.abspath(__file__), "--job", "--mbytes", str(a.mbytes),
                "--repeats", str(a.repeats), "--model", a.model]
        with con.status(f"all_reduce {a.mbytes} MB and DDP({a.model}) on {a.hosts} hosts"):
            job = c.launch(argv, workers=a.hosts, timeout_s=a.timeout).check()
    r = job.last_json(MARK)
    n, B = a.hosts, one.best_bytes_per_s
    rows = []
    for key, label, nbytes in (("allreduce", f"all_reduce {a.mbytes} MB", r["allreduce_bytes"]),
                               ("ddp", f"DDP {a.model} ({r['ddp_bytes'] / 2**20:.0f} MB, "
                                       f"{r['ddp_tensors']} tensors)", r["ddp_bytes"])):
        times = r[f"{key}_s"]
        med = statistics.median(times)
        opt = allreduce_time(n, nbytes, B)
        rows.append({"name": key, "label": label, "bytes": nbytes, "times_s": times,
                     "median_s": med, "optimum_s": opt, "ratio": opt / med,
                     "optimum_duplex_B_s": allreduce_time(n, nbytes, duplex.best_bytes_per_s)})
    return {
        "benchmark": "cluster_bench", "phase": 1, "hosts": n, "rate": a.rate,
        "rate_bps": one.nominal_bytes_per_s * 8, "repeats": a.repeats,
        "command": "benchmarks/cluster_bench.py " + " ".join(sys.argv[1:]),
        "B": B, "B_oneway": one.to_dict(), "B_duplex": duplex.to_dict(), "rows": rows,
        "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    one, dup = res["B_oneway"], res["B_duplex"]
    t = Table(title=f"{res['hosts']} emulated hosts at {res['rate']} each way "
                    f"(medians of {res['repeats']})")
    for col in ("what", "measured", "optimum / reference", "ratio"):
        t.add_column(col, justify="left" if col == "what" else "right")
    for label, m in (("B one way (gloo send/recv)", one), ("B both ways at once", dup)):
        nic = m["nominal_bytes_per_s"]
        t.add_row(label, f"{m['bytes_per_s'] / 1e6:.2f} MB/s (best {m['best_bytes_per_s'] / 1e6:.2f})",
                  f"{nic / 1e6:.2f} MB/s NIC", f"{m['ratio']:.3f} ({m['best_bytes_per_s'] / nic:.3f})")
    for row in res["rows"]:
        t.add_row(row["label"], f"{row['median_s']:.3f} s", f"{row['optimum_s']:.3f} s",
                  f"{row['ratio']:.3f}")
    Console(width=120).print(t)
    print("B rows: median (best) of the samples / NIC rate; payload over TCP/IP/Ethernet is at "
          "most 0.956 of it.\nOther rows: ratio = optimum / measured median time, optimum = "
          f"2(n-1)M/(nB) with B = best one-way sample = {res['B'] / 1e6:.2f} MB/s.")


def plot(res: dict, path: Path) -> None:
    plt = pyplot()
    rows = res["rows"]
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["median_s"] for r in rows], 0.4, label="measured (median)")
    ax.bar([x + 0.2 for x in xs], [r["optimum_s"] for r in rows], 0.4,
           label="optimum 2(n-1)M/(nB)")
    for x, r in zip(xs, rows):
        ax.scatter([x - 0.2] * len(r["times_s"]), r["times_s"], color="k", s=8, zorder=3)
        ax.text(x, max(r["median_s"], r["optimum_s"]) * 1.02, f"{r['ratio']:.2f}", ha="center")
    ax.set_xticks(list(xs), [r["label"] for r in rows], fontsize=8)
    ax.set_ylabel("seconds per exchange")
    ax.set_title(f"{res['hosts']} hosts at {res['rate']}, "
                 f"B = {res['B'] / 1e6:.1f} MB/s")
    top = max(max(r["times_s"] + [r["optimum_s"]]) for r in rows)
    ax.set_ylim(0, top * 1.3)
    ax.legend(loc="upper left")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=4, help="worker hosts (default 4)")
    ap.add_argument("--rate", default="200mbit", help="NIC rate each way (default 200mbit)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats (medians are quoted)")
    ap.add_argument("--mbytes", type=int, default=64, help="all_reduce size in MiB (default 64)")
    ap.add_argument("--model", default="resnet50", help="zoo model for the DDP gradient set")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--json", type=Path, default=RESULTS / "cluster_bench.json")
    ap.add_argument("--plot", type=Path, default=RESULTS / "cluster_bench.png")
    ap.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.job:
        rank_main(a)
        return
    require_emulator("cluster_bench")
    report(run(a), print_table, a.json, plot, a.plot)


if __name__ == "__main__":
    main()
