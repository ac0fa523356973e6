"""Case ``iteration``: one iteration's time after tuning, against DDP and the analytic optimum.

``--workers`` (n) emulated hosts at ``--rate`` train the emulated-compute task of
:mod:`.tasks` (``sleepy``: a zoo model's real gradient shapes, ``--model``: resnet50,
vgg16, bert-base, ``resnet50/16``...; the forward sleeps ``--fwd-ms``, the backward yields
the gradients in ready order over ``--bwd-ms``, so communication can overlap it). Every
step's averaged gradients are checked exactly every 10 steps. Measured on the same hosts
and gradients (throughput = 1 / the median step on rank 0):

1. DDP with each of ``--buckets`` (MB; 25 is its default and the reference; the best is
   "DDP best bucket"), ``--warmup`` + ``--repeats`` steps each;
2. ``--fixed`` configurations through the runtime directly, e.g. ``ar:1x4M,pp4:1x64K``;
3. ``autotune.session(model)`` with each of ``--servers`` server hosts (k_max; 0: none):
   the warm-up, ``--budget`` tuning iterations, then ``--measure`` with the configuration
   it kept (the first pays the switch and is left out).

The cloud case (``--flow-cap``): every TCP flow capped below the NIC rate. B is then the
NIC rate measured with several flows; the optima use B, DDP's bound one flow per peer.
Prints throughputs, speed-ups over DDP and the fraction of the optimum of the servers each
configuration uses; JSON and a PNG:

    sudo .venv/bin/python benchmarks/clock_bench.py iteration --model resnet50          # ~11 min
    sudo .venv/bin/python benchmarks/clock_bench.py iteration --model resnet50/2 --rate 400mbit --flow-cap 100mbit
    sudo .venv/bin/python benchmarks/clock_bench.py iteration --model vgg16 --rate 400mbit --budget 16 --measure 4 --repeats 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchlib import (RESULTS, add_diagnosis_args, describe_link, fmt_cfg, machine,
                      measure_B, median, pyplot, save_figure)
from userclock.common import WARMUP, command, kept_steps, launch, session_options, speedup

from autotune.workload import gradient_bytes, model_shapes, optimum_s

JSON = None  # clock/iteration_<model>[_cap].json, by check()


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="resnet50", help="zoo model (resnet50, vgg16, bert-base)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--servers", default="0,4",
                   help="server hosts per session run ('' for no session runs)")
    p.add_argument("--fwd-ms", type=float, default=100.0, help="emulated forward time")
    p.add_argument("--bwd-ms", type=float, default=300.0, help="emulated backward time")
    p.add_argument("--buckets", default="5,25,100", help="DDP bucket_cap_mb values (25 = default)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--budget", type=int, default=30, help="session tuning iterations")
    p.add_argument("--trial-iterations", type=int, default=2)
    p.add_argument("--measure", type=int, default=5,
                   help="iterations after tuning (the first pays the switch and is not timed)")
    p.add_argument("--fixed", default="",
                   help="also time these runtime configurations fixed (no tuning), e.g. "
                        "'ar:1x4M,pp4:1x64K' (transport[servers]:streams x chunk)")
    add_diagnosis_args(p, "the --fixed runs write every rank's operations to")


def check(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if "25" not in [f"{float(b):g}" for b in a.buckets.split(",")]:
        p.error("--buckets must include 25 (DDP's default, the reference)")
    tag = a.model.replace("/", "w") + ("_cap" if a.flow_cap else "")
    a.json = a.json or RESULTS / "clock" / f"iteration_{tag}.json"


def parse_fixed(text: str) -> list[dict]:
    """``"ar:1x4M,pp4:1x64K"`` -> runtime configurations (transport[k]:streams x chunk)."""
    from goodput_bench import parse_settings

    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        head, _, setting = item.partition(":")
        (streams, chunk), = parse_settings(setting)
        cfg = {"transport": "allreduce" if head == "ar" else "pushpull", "streams": streams,
               "chunk_bytes": chunk}
        if head.startswith("pp"):
            cfg["servers"] = int(head[2:] or 0)
        out.append(cfg)
    return out


def run(a: argparse.Namespace) -> dict:
    from rich.console import Console

    from autotune.emulate import Cluster

    con = Console(stderr=True)
    n = a.workers
    task = {"name": "sleepy", "zoo": a.model, "fwd_ms": a.fwd_ms, "bwd_ms": a.bwd_ms}
    base = {"task": task, "workers": n, "timeout": a.rank_timeout}
    steps = a.warmup + a.repeats
    started = time.time()
    ks = [int(k) for k in a.servers.split(",") if k.strip()]
    fixed = parse_fixed(a.fixed or "")
    kf = max([c.get("servers", 0) for c in fixed] or [0])
    out: dict = {}
    with Cluster(hosts=n + max(ks + [kf]), rate=a.rate, flow_cap=a.flow_cap,
                 congestion=a.congestion) as c:
        con.print(f"[bold]cluster[/] {c.describe()}")
        with con.status("measuring B"):
            out["link"] = measure_B(c, repeats=3)
        with con.status(f"DDP, buckets {a.buckets} MB"):
            out["ddp"] = launch(c, {**base, "arms": [
                {"label": f"ddp {mb:g}", "kind": "ddp", "bucket_mb": mb, "steps": steps}
                for mb in (float(b) for b in a.buckets.split(","))]}, a,
                failed="clock_bench iteration: DDP")
        if fixed:
            with con.status(f"autotune runtime, fixed configurations {a.fixed}"):
                out["fixed"] = launch(c, {**base, "depth": a.depth,
                                          "trace": str(a.trace) if a.trace else None,
                                          "arms": [{"label": fmt_cfg(f), "kind": "runtime",
                                                    "config": f, "steps": steps}
                                                   for f in fixed]}, a,
                                      servers=kf,
                                      failed="clock_bench iteration: fixed configurations")
        for k in ks:
            con.print(f"autotune.session with {k} server hosts: {a.budget} tuning iterations "
                      f"+ {a.measure}")
            # spend=None: the case measures what `budget` trial iterations find (as the
            # demo does); a job of unknown length would otherwise wait to pay for a search
            options = session_options(a, budget=a.budget, samples_per_step=1, spend=None,
                                      trial_iterations=a.trial_iterations, warmup=WARMUP)
            out[f"session_k{k}"], = launch(c, {**base, "depth": a.depth, "arms": [
                {"label": f"session k={k}", "kind": "native", "options": options,
                 "steps": WARMUP + a.budget + a.measure}]}, a, servers=k,
                failed=f"clock_bench iteration: session with {k} servers")
    return summarize(a, out, ks, time.time() - started)


def summarize(a: argparse.Namespace, out: dict, ks: list[int], wall: float) -> dict:
    n, B = a.workers, out["link"]["B"]
    M = gradient_bytes(model_shapes(a.model))
    skip = a.warmup
    ddp = [{"bucket_mb": r["bucket_mb"], "times_s": r["step_s"][skip:],
            "median_s": median(r["step_s"][skip:])} for r in out["ddp"]]
    default = next(r for r in ddp if r["bucket_mb"] == 25.0)
    best = min(ddp, key=lambda r: r["median_s"])
    ref = default["median_s"]
    rows = [{"name": "DDP (25 MB buckets)", "median_s": ref, "times_s": default["times_s"]},
            {"name": f"DDP best bucket ({best['bucket_mb']:g} MB)", "median_s": best["median_s"],
             "times_s": best["times_s"]}]
    for f in out.get("fixed", []):
        rows.append({"name": f"autotune runtime, fixed {fmt_cfg(f['config'])}",
                     "median_s": median(f["step_s"][skip:]), "times_s": f["step_s"][skip:],
                     "config": f["config"], "fixed": True})
    sessions = {}
    for k in ks:
        s = out[f"session_k{k}"]
        kept = kept_steps(s)
        s["tuning_s"] = sum(t for t, busy in zip(s["step_s"], s["tuning"]) if busy)
        rows.append({"name": f"autotune, {k} server hosts", "median_s": median(kept),
                     "times_s": kept, "config": s["best"], "k": k})
        sessions[k] = s
    fwd = a.fwd_ms / 1e3
    for r in rows:
        r["speedup_vs_ddp"] = speedup(ref, r["median_s"])
        r["speedup_vs_best_ddp"] = speedup(best["median_s"], r["median_s"])
        cfg = r.get("config")
        if cfg:  # the optimum of the servers the configuration uses (NIC rate B)
            k = cfg.get("servers", 0) if cfg.get("transport") == "pushpull" else 0
            r["optimum_s"] = optimum_s(n, k, M, B, fwd)
            r["of_optimum"] = r["optimum_s"] / r["median_s"]
    return {
        "benchmark": "clock_bench", "case": "iteration", "model": a.model, "bytes": M,
        "tensors": len(model_shapes(a.model)), "workers": n, "servers": ks, "rate": a.rate,
        "flow_cap": a.flow_cap, "fwd_ms": a.fwd_ms, "bwd_ms": a.bwd_ms, "budget": a.budget,
        "measure": a.measure, "trial_iterations": a.trial_iterations, "depth": a.depth,
        "B": B, "link": out["link"],
        "optimum_s": {"allreduce": optimum_s(n, 0, M, B, fwd),
                      **{f"byteps_k{k}": optimum_s(n, k, M, B, fwd)
                         for k in sorted(set(ks) | {4})}},
        # DDP's bound: gloo's ring opens one connection per peer, so one flow per NIC
        "ddp_bound_s": optimum_s(n, 0, M, min(B, out["link"]["flow_B"]), fwd),
        "compute_s": (a.fwd_ms + a.bwd_ms) / 1e3, "ddp": ddp, "rows": rows,
        "sessions": sessions, "wall_s": wall, "command": command("iteration"),
        "machine": machine(),
    }


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{res['model']} ({res['bytes'] / 2**20:.0f} MiB, {res['tensors']} tensors) "
                    f"on {res['workers']} workers at {res['rate']}"
                    + (f" (per-flow cap {res['flow_cap']})" if res.get("flow_cap") else "")
                    + f", compute {res['fwd_ms']:g}+{res['bwd_ms']:g} ms/iteration")
    for col in ("what", "s / iteration", "it/s", "speed-up over DDP", "over best DDP",
                "of optimum", "configuration"):
        t.add_column(col, justify="left" if col in ("what", "configuration") else "right")
    for r in res["rows"]:
        t.add_row(r["name"], f"{r['median_s']:.3f}", f"{1 / r['median_s']:.3f}",
                  f"{r['speedup_vs_ddp']:.2f}x", f"{r['speedup_vs_best_ddp']:.2f}x",
                  f"{r['of_optimum']:.2f}" if "of_optimum" in r else "",
                  fmt_cfg(r["config"]) if r.get("config") else "")
    Console(width=140).print(t)
    opt = res["optimum_s"]
    print(describe_link(res["link"]) + ". Optimum (communication + forward, backward fully "
          "overlapped): all-reduce " + f"{opt['allreduce']:.3f} s, " + ", ".join(
              f"BytePS k={k[8:]} {v:.3f} s" for k, v in opt.items() if k.startswith("byteps")) +
          f"; DDP's one-flow bound {res['ddp_bound_s']:.3f} s" +
          f". Load average at the end: {', '.join(f'{x:.1f}' for x in res['machine']['loadavg'])}.")
    for r in res["ddp"]:
        print(f"  DDP bucket {r['bucket_mb']:g} MB: {r['median_s']:.3f} s  {r['times_s']}")
    for k, s in res["sessions"].items():
        tried = ", ".join(f"{fmt_cfg(h['config'])}={h['score']:.3f}" if h["score"] else
                          f"{fmt_cfg(h['config'])}=failed" for h in s["history"])
        print(f"  session k_max={k}: tuning {s['tuning_s']:.1f} s; trials (it/s): {tried}")


def plot(res: dict, path: Path) -> None:
    plt = pyplot()
    rows = res["rows"]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    xs = list(range(len(rows)))
    colors = ["#999", "#777"] + ["#8172b2" if r.get("fixed") else "#4c72b0" for r in rows[2:]]
    ax.bar(xs, [1 / r["median_s"] for r in rows], 0.6, color=colors)
    for x, r in zip(xs, rows):
        ax.text(x, 1 / r["median_s"] * 1.01, f"{r['speedup_vs_ddp']:.2f}x", ha="center")
    ax.set_xticks(xs, [r["name"].replace(" (", "\n(").replace(", ", "\n") for r in rows],
                  fontsize=8)
    ax.set_ylabel("iterations / s")
    ax.set_title(f"{res['model']} on {res['workers']} workers at {res['rate']} "
                 f"(speed-up over DDP, 25 MB buckets)")
    save_figure(fig, path)
