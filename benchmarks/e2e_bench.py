"""End to end: autotune.session vs PyTorch DDP on a communication-bound job (root only).

``--workers`` (n) emulated worker hosts at ``--rate``. Each worker trains a model with
the real parameters of a zoo model's gradient shapes (``--model``: resnet50, vgg16,
bert-base; shapes from code) and an emulated compute time: the forward sleeps
``--fwd-ms``, the backward produces the gradients one by one in ready order, sleeping
``--bwd-ms`` in all between them (so communication can overlap it, as in a real job).
Measured, each on the same hosts and gradients (throughput = 1 / median iteration time
of the slowest worker; every iteration's averaged gradients are checked exactly):

1. DDP, gloo, default buckets (25 MB);
2. DDP with each of ``--buckets`` (MB): the best is "DDP best bucket";
3. ``autotune.session`` with no server hosts (k_max = 0): ``--budget`` tuning
   iterations, then ``--measure`` iterations with the configuration it kept;
4. the same with n server hosts (k_max = n), servers running ``python -m autotune.server``'s
   loop through the session.

The cloud case (``--flow-cap``): every TCP flow is capped below the NIC rate, as on
cloud NICs (the AIACC-Training paper saw one stream use at most 30% of the bandwidth).
B is then the NIC rate measured with several flows, and the one-flow rate is measured
separately; the optima use B, and DDP's bound uses one flow per peer (gloo's ring).

Prints the throughputs, ratios to DDP and to the optimum of the servers each
configuration uses, writes JSON and a PNG:

    sudo .venv/bin/python benchmarks/e2e_bench.py --model resnet50            # ~11 min
    sudo .venv/bin/python benchmarks/e2e_bench.py --model resnet50/2 --rate 400mbit --flow-cap 100mbit
    sudo .venv/bin/python benchmarks/e2e_bench.py --model vgg16 --rate 400mbit --budget 16 --measure 4 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import (MARK, RESULTS, add_cluster_args, add_diagnosis_args,  # noqa: E402
                      describe_link, emit, fmt_cfg, machine, measure_B, median, model_shapes,
                      patch_depth, pyplot, report, require_emulator, save_figure, sleepy_model)

from autotune.workload import check_average, gradient_bytes, optimum_s, time_ddp  # noqa: E402


# ---- rank programs --------------------------------------------------------------------

WARMUP = 3  # the session's warm-up iterations (its default), before the budget

def ddp_main(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    shapes = model_shapes(a.model)
    rows = []
    for mb in [float(b) for b in a.buckets.split(",")]:
        model = sleepy_model(shapes, a.fwd_ms / 1e3, a.bwd_ms / 1e3, rank + 1)
        times = time_ddp(model, a.warmup, a.repeats, bucket_cap_mb=mb)
        check_average(model, (n + 1) / 2, f"DDP bucket {mb} MB")
        rows.append({"bucket_mb": mb, "times_s": times})
        if rank == 0:
            print(f"DDP bucket {mb:g} MB: {median(times):.3f} s {times}", flush=True)
        del model
    if rank == 0:
        emit({"ddp": rows, "bytes": gradient_bytes(shapes),
              "tensors": len(shapes)})
    dist.destroy_process_group()


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


def fixed_main(a: argparse.Namespace) -> None:
    """Each of ``--fixed`` run through the runtime directly, the same loop as a session."""
    import torch
    import torch.distributed as dist

    from autotune.runtime import Runtime
    from autotune.runtime.data import trace
    from autotune.server import serve

    torch.set_num_threads(1)
    patch_depth(a.depth)
    dist.init_process_group("gloo")
    rt = Runtime.bootstrap(timeout=600)
    if a.trace:  # diagnosis only: every rank's operations, for benchmarks/timeline.py
        trace.start()
    if not rt.info.is_worker:
        serve(rt)
        if a.trace:
            trace.dump(a.trace, rt.info.rank, "server")
        rt.shutdown()
        return
    rank, n = rt.info.rank, a.workers
    model = sleepy_model(model_shapes(a.model), a.fwd_ms / 1e3, a.bwd_ms / 1e3, rank + 1)
    rt.register(model.parameters())
    leader = rank == rt.info.leader
    x = torch.ones(1)
    rows = []
    for cfg in parse_fixed(a.fixed):
        times = []
        for i in range(a.warmup + a.repeats):
            s0 = time.perf_counter()
            rt.sync(cfg if leader else None)
            t0 = time.perf_counter()
            model.zero_grad(set_to_none=False)
            model(x).backward()
            rt.wait()
            t1 = time.perf_counter()
            trace.mark(f"iteration {fmt_cfg(cfg)} {i}", s0, t1)  # from the sync
            trace.mark(f"sync {fmt_cfg(cfg)} {i}", s0, t0)
            t = rt.worker_max(t1 - t0)
            if i >= a.warmup:
                times.append(t)
        check_average(model, (n + 1) / 2, f"fixed {cfg}")
        rows.append({"config": dict(rt.config), "times_s": times})
        if leader:
            print(f"fixed {fmt_cfg(cfg)}: {median(times):.3f} s {times}", flush=True)
    rt.sync(stop=True) if leader else rt.sync()
    if a.trace:
        trace.dump(a.trace, rank, "worker")
    rt.shutdown()
    if leader:
        emit({"fixed": rows})


def session_main(a: argparse.Namespace) -> None:
    import torch

    import autotune

    torch.set_num_threads(1)
    patch_depth(a.depth)
    if os.environ.get("AUTOTUNE_ROLE") == "server":
        with autotune.session(torch.nn.Linear(1, 1), store=False):  # serves, then exits
            pass
        return
    rank = int(os.environ["RANK"])
    n = a.workers
    model = sleepy_model(model_shapes(a.model), a.fwd_ms / 1e3, a.bwd_ms / 1e3, rank + 1)
    x = torch.ones(1)
    times, configs, tuning = [], [], []
    # spend=None: the benchmark measures what `budget` trial iterations find (as the
    # demo does); a job of unknown length would otherwise wait to pay for a search
    with autotune.session(model, budget=a.budget, samples_per_step=1, store=False,
                          spend=None,
                          trial_iterations=a.trial_iterations, seed=a.seed, warmup=WARMUP,
                          verbose=rank == 0, timeout=600) as session:
        # the same count on every rank: warm-up, budget, then the kept configuration
        for i in range(WARMUP + a.budget + a.measure):
            tuning.append(session.tuning)  # rank 0 knows
            t0 = time.perf_counter()
            model.zero_grad(set_to_none=False)
            model(x).backward()
            session.step()
            times.append(time.perf_counter() - t0)
            configs.append(dict(session.config))
            if i % 5 == 4 or not tuning[-1]:  # exact average (outside the timed window)
                check_average(model, (n + 1) / 2, f"session under {session.config}")
        best = session.best
        history = [{"config": r.config, "iterations": r.iterations, "score": r.score,
                    "technique": r.technique, "error": r.error} for r in session.history]
    if rank == 0:
        # under the kept configuration; its first iteration pays the switch
        kept = [t for t, busy in zip(times, tuning) if not busy][1:]
        emit({"times_s": times, "configs": configs, "tuning": tuning, "kept_times_s": kept,
              "best": best, "history": history,
              "tuning_s": sum(t for t, busy in zip(times, tuning) if busy)})


# ---- driver ---------------------------------------------------------------------------

def run(a: argparse.Namespace) -> dict:
    from rich.console import Console

    from autotune.emulate import Cluster

    con = Console(stderr=True)
    n = a.workers
    common = ["--workers", str(n), "--model", a.model, "--fwd-ms", str(a.fwd_ms),
              "--bwd-ms", str(a.bwd_ms)]
    me = [sys.executable, os.path.abspath(__file__)]
    echo = sys.stderr if a.verbose else None
    started = time.time()
    out: dict = {}
    ks = [int(k) for k in a.servers.split(",") if k.strip()]
    fixed = parse_fixed(a.fixed or "")
    kf = max([c.get("servers", 0) for c in fixed] or [0])
    with Cluster(hosts=n + max(ks + [kf]), rate=a.rate, flow_cap=a.flow_cap,
                 congestion=a.congestion) as c:
        con.print(f"[bold]cluster[/] {c.describe()}")
        with con.status("measuring B"):
            out["link"] = measure_B(c, repeats=3)
        with con.status(f"DDP, buckets {a.buckets} MB"):
            job = c.launch(me + ["--job", "ddp", "--buckets", a.buckets, "--repeats",
                                 str(a.repeats), "--warmup", str(a.warmup)] + common,
                           workers=n, timeout_s=a.timeout, echo=echo).check()
        out["ddp"] = job.last_json(MARK)
        if fixed:
            with con.status(f"autotune runtime, fixed configurations {a.fixed}"):
                argv = me + ["--job", "fixed", "--fixed", a.fixed, "--repeats", str(a.repeats),
                             "--warmup", str(a.warmup)] + common
                argv += ["--depth", a.depth] if a.depth else []
                argv += ["--trace", str(a.trace)] if a.trace else []
                job = c.launch(argv, workers=n, servers=kf, timeout_s=a.timeout,
                               echo=echo).check()
            out["fixed"] = job.last_json(MARK)["fixed"]
        for k in ks:
            con.print(f"autotune.session with {k} server hosts: {a.budget} tuning iterations "
                      f"+ {a.measure}")
            argv = me + ["--job", "session", "--budget", str(a.budget), "--measure",
                         str(a.measure), "--trial-iterations", str(a.trial_iterations),
                         "--seed", str(a.seed)] + common
            if a.depth:
                argv += ["--depth", a.depth]
            job = c.launch(argv, workers=n, servers=k, timeout_s=a.timeout,
                           echo=echo).check()
            out[f"session_k{k}"] = job.last_json(MARK)
    return summarize(a, out, ks, time.time() - started)


def summarize(a: argparse.Namespace, out: dict, ks: list[int], wall: float) -> dict:
    n, M, B, flow_B = a.workers, out["ddp"]["bytes"], out["link"]["B"], out["link"]["flow_B"]
    ddp = [{"bucket_mb": r["bucket_mb"], "times_s": r["times_s"],
            "median_s": median(r["times_s"])} for r in out["ddp"]["ddp"]]
    default = next(r for r in ddp if r["bucket_mb"] == 25.0)
    best = min(ddp, key=lambda r: r["median_s"])
    ref = default["median_s"]
    rows = [{"name": "DDP (25 MB buckets)", "median_s": ref, "times_s": default["times_s"]},
            {"name": f"DDP best bucket ({best['bucket_mb']:g} MB)", "median_s": best["median_s"],
             "times_s": best["times_s"]}]
    for f in out.get("fixed", []):
        rows.append({"name": f"autotune runtime, fixed {fmt_cfg(f['config'])}",
                     "median_s": median(f["times_s"]), "times_s": f["times_s"],
                     "config": f["config"], "fixed": True})
    sessions = {}
    for k in ks:
        s = out[f"session_k{k}"]
        med = median(s["kept_times_s"])
        rows.append({"name": f"autotune, {k} server hosts", "median_s": med,
                     "times_s": s["kept_times_s"], "config": s["best"], "k": k})
        sessions[k] = s
    fwd = a.fwd_ms / 1e3
    for r in rows:
        r["ratio_vs_ddp"] = ref / r["median_s"]
        r["ratio_vs_best_ddp"] = best["median_s"] / r["median_s"]
        cfg = r.get("config")
        if cfg:  # the optimum of the servers the configuration uses (NIC rate B)
            k = cfg.get("servers", 0) if cfg.get("transport") == "pushpull" else 0
            r["optimum_s"] = optimum_s(n, k, M, B, fwd)
            r["of_optimum"] = r["optimum_s"] / r["median_s"]
    compute = (a.fwd_ms + a.bwd_ms) / 1e3
    return {
        "benchmark": "e2e_bench", "model": a.model, "bytes": M,
        "tensors": out["ddp"]["tensors"], "workers": n, "servers": ks, "rate": a.rate,
        "flow_cap": a.flow_cap, "fwd_ms": a.fwd_ms, "bwd_ms": a.bwd_ms, "budget": a.budget,
        "measure": a.measure,
        "trial_iterations": a.trial_iterations, "depth": a.depth, "B": B, "link": out["link"],
        "optimum_s": {"allreduce": optimum_s(n, 0, M, B, fwd),
                      **{f"byteps_k{k}": optimum_s(n, k, M, B, fwd)
                         for k in sorted(set(ks) | {4})}},
        # DDP's bound: gloo's ring opens one connection per peer, so one flow per NIC
        "ddp_bound_s": optimum_s(n, 0, M, min(B, flow_B), fwd),
        "compute_s": compute, "ddp": ddp, "rows": rows, "sessions": sessions,
        "wall_s": wall, "command": "benchmarks/e2e_bench.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
    }


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{res['model']} ({res['bytes'] / 2**20:.0f} MiB, {res['tensors']} tensors) "
                    f"on {res['workers']} workers at {res['rate']}"
                    + (f" (per-flow cap {res['flow_cap']})" if res.get("flow_cap") else "")
                    + ", compute "
                    f"{res['fwd_ms']:g}+{res['bwd_ms']:g} ms/iteration")
    for col in ("what", "s / iteration", "it/s", "vs DDP", "vs best DDP", "of optimum",
                "configuration"):
        t.add_column(col, justify="left" if col in ("what", "configuration") else "right")
    for r in res["rows"]:
        t.add_row(r["name"], f"{r['median_s']:.3f}", f"{1 / r['median_s']:.3f}",
                  f"{r['ratio_vs_ddp']:.2f}x", f"{r['ratio_vs_best_ddp']:.2f}x",
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
        ax.text(x, 1 / r["median_s"] * 1.01, f"{r['ratio_vs_ddp']:.2f}x", ha="center")
    ax.set_xticks(xs, [r["name"].replace(" (", "\n(").replace(", ", "\n") for r in rows],
                  fontsize=8)
    ax.set_ylabel("iterations / s")
    ax.set_title(f"{res['model']} on {res['workers']} workers at {res['rate']} "
                 f"(ratio vs DDP, 25 MB buckets)")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="zoo model (resnet50, vgg16, bert-base)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--servers", default="0,4",
                    help="server hosts per session run ('' for no session runs)")
    add_cluster_args(ap, "cap per TCP flow, e.g. 100mbit (the cloud case: one flow gets a "
                         "fraction of the NIC)")
    ap.add_argument("--fwd-ms", type=float, default=100.0, help="emulated forward time")
    ap.add_argument("--bwd-ms", type=float, default=300.0, help="emulated backward time")
    ap.add_argument("--buckets", default="5,25,100", help="DDP bucket_cap_mb values (25 = default)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--budget", type=int, default=30, help="session tuning iterations")
    ap.add_argument("--trial-iterations", type=int, default=2)
    ap.add_argument("--measure", type=int, default=5,
                    help="iterations after tuning (the first pays the switch and is not timed)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixed", default="",
                    help="also time these runtime configurations fixed (no tuning), e.g. "
                         "'ar:1x4M,pp4:1x64K' (transport[servers]:streams x chunk)")
    add_diagnosis_args(ap, "the --fixed runs write every rank's operations to")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--job", choices=("ddp", "session", "fixed"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.job == "ddp":
        ddp_main(a)
        return
    if a.job == "session":
        session_main(a)
        return
    if a.job == "fixed":
        fixed_main(a)
        return
    if "25" not in [f"{float(b):g}" for b in a.buckets.split(",")]:
        ap.error("--buckets must include 25 (DDP's default, the reference)")
    require_emulator("e2e_bench")
    tag = a.model.replace("/", "w") + ("_cap" if a.flow_cap else "")
    a.json = a.json or RESULTS / f"e2e_bench_{tag}.json"
    a.plot = a.plot or RESULTS / f"e2e_bench_{tag}.png"
    res = run(a)
    report(res, print_table, a.json, plot, a.plot)


if __name__ == "__main__":
    main()
