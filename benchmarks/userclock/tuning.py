"""Case ``tuning``: the search's quality and cost against the best configuration fixed.

``--workers`` (n) worker hosts and ``--servers`` (k_max) server hosts at ``--rate``; every
worker trains the emulated-compute task (``--model``, default ``resnet50/16``: ResNet-50 at
a quarter of its width, the same 161 gradient tensors in 7.6 MiB, so that an iteration
takes a fraction of a second). Three launches on the same hosts:

1. **Sweep**, then **fixed**: every configuration of a reduced space (transport/servers x
   ``--streams`` x ``--chunks``) through the runtime directly, one warm-up and
   ``--repeats`` timed steps each; the fastest is the sweep's best, then run fixed for the
   first half of ``--iterations`` (N);
2. **Tuned**: N steps under ``autotune.session(budget=--budget)``, which searches the full
   space and then keeps its best;
3. **Fixed** again: the second half of the N steps with the sweep's best, so that a load
   drifting on this shared machine weighs on both alike.

Every step is timed the same way (:mod:`.rank`). Reported: the iterations the session
needed before its best-so-far trial score reached 95% of the sweep's best throughput, the
kept configuration against the sweep's best, and the N tuned steps' total against the N
fixed ones (target: within 3%), also extrapolated to 1000 iterations from the measured
tuning phase and per-iteration times.

With ``--flow-cap`` every TCP flow is capped below the NIC rate (the cloud case); the
sweep's streams should then reach past NIC / cap (``--streams 1,4`` does at a quarter).

    sudo .venv/bin/python benchmarks/clock_bench.py tuning                      # ~10 min
    sudo .venv/bin/python benchmarks/clock_bench.py tuning --rate 400mbit --flow-cap 100mbit
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from benchlib import (MiB, RESULTS, add_diagnosis_args, describe_link, fmt_cfg, machine,
                      measure_B, median, pyplot, save_figure)
from userclock.common import command, kept_steps, launch, session_options

JSON = None  # clock/tuning[_cap].json, by check()


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="resnet50/16")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--servers", type=int, default=4, help="server hosts launched (k_max)")
    p.add_argument("--sweep-servers", default="0,2,4", help="server counts in the sweep")
    p.add_argument("--streams", default="1,4", help="streams in the sweep")
    p.add_argument("--chunks", default="64K,256K,1M,4M,16M", help="chunk sizes in the sweep")
    p.add_argument("--fwd-ms", type=float, default=20.0)
    p.add_argument("--bwd-ms", type=float, default=60.0)
    p.add_argument("--repeats", type=int, default=3, help="timed iterations per sweep point")
    p.add_argument("--iterations", type=int, default=300, help="N (the issue's is 1000)")
    p.add_argument("--budget", type=int, default=100, help="session tuning iterations")
    p.add_argument("--trial-iterations", type=int, default=0, help="0: the tuner's default")
    add_diagnosis_args(p)


def check(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    a.json = a.json or RESULTS / "clock" / ("tuning_cap.json" if a.flow_cap else "tuning.json")
    if a.iterations < 2 or a.repeats < 1:
        p.error("--iterations >= 2 and --repeats >= 1")


def parse_size(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 1024, "M": MiB}.get(text[-1], 1)
    return int(float(text.rstrip("KM")) * mult)


def sweep_configs(a: argparse.Namespace) -> list[dict]:
    variants = [{"transport": "allreduce"}] + [
        {"transport": "pushpull", "servers": k} for k in sorted({0, a.servers} | set(
            int(x) for x in a.sweep_servers.split(",") if int(x) <= a.servers))]
    return [{**v, "streams": int(s), "chunk_bytes": parse_size(c)}
            for v, s, c in itertools.product(variants, a.streams.split(","),
                                             a.chunks.split(","))]


def run(a: argparse.Namespace) -> dict:
    from rich.console import Console

    from autotune.emulate import Cluster

    con = Console(stderr=True)
    cfgs = sweep_configs(a)
    first = a.iterations // 2
    base = {"task": {"name": "sleepy", "zoo": a.model, "fwd_ms": a.fwd_ms,
                     "bwd_ms": a.bwd_ms}, "workers": a.workers, "timeout": a.rank_timeout,
            "depth": a.depth}
    started = time.time()
    with Cluster(hosts=a.workers + a.servers, rate=a.rate, flow_cap=a.flow_cap,
                 congestion=a.congestion) as c:
        con.print(f"[bold]cluster[/] {c.describe()}")
        with con.status("measuring B"):
            link = measure_B(c, repeats=3)

        def go(what: str, arms: list[dict]) -> list[dict]:
            with con.status(what):
                return launch(c, {**base, "arms": arms}, a, servers=a.servers,
                              failed=f"clock_bench tuning: {what}")

        *sweep, fixed1 = go(f"sweep of {len(cfgs)} configurations, then {first} fixed", [
            *({"label": fmt_cfg(x), "kind": "runtime", "config": x, "steps": 1 + a.repeats}
              for x in cfgs),
            {"label": "fixed, first half", "kind": "runtime", "config": "best",
             "steps": first}])
        options = session_options(a, budget=a.budget, samples_per_step=1, spend=None,
                                  **({"trial_iterations": a.trial_iterations}
                                     if a.trial_iterations else {}))
        tuned, = go(f"{a.iterations} tuned (budget {a.budget})", [
            {"label": "tuned", "kind": "native", "options": options,
             "steps": a.iterations}])
        fixed2, = go(f"{a.iterations - first} fixed", [
            {"label": "fixed, second half", "kind": "runtime", "config": fixed1["config"],
             "steps": a.iterations - first}])
    return summarize(a, sweep, fixed1, tuned, fixed2, link, time.time() - started)


def summarize(a: argparse.Namespace, sweep: list[dict], fixed1: dict, tuned: dict,
              fixed2: dict, link: dict, wall: float) -> dict:
    rows = [{"config": r["config"], "times_s": r["step_s"][1:],
             "median_s": median(r["step_s"][1:])} for r in sweep]
    best_t = min(x["median_s"] for x in rows)
    best_tp = 1 / best_t
    # iterations until the session's best-so-far (its own trial scores) reached 95%
    reach, used, so_far, curve = None, 0, 0.0, []
    for h in tuned["history"]:
        used += h["iterations"]
        if h["score"] is not None:
            so_far = max(so_far, h["score"])
        curve.append({"iterations": used, "best_so_far": so_far / best_tp,
                      "config": h["config"], "score": h["score"]})
        if reach is None and so_far >= 0.95 * best_tp:
            reach = used
    # the tuning phase: the session's warm-up and its trials; then the kept configuration
    tuned_s, tuning = tuned["step_s"], tuned["tuning"]
    phase = sum(tuning)
    after = kept_steps(tuned)
    kept_t = median(after) if after else None
    fixed_s = fixed1["step_s"] + fixed2["step_s"]
    fixed_t = median(fixed_s)
    tuning_s = sum(t for t, busy in zip(tuned_s, tuning) if busy)
    N = 1000
    extrap_tuned = tuning_s + (N - phase) * kept_t if kept_t else None
    extrap_fixed = N * fixed_t
    # the cost of tuning itself: against the kept configuration fixed from the start,
    # whichever of it and the sweep's best is faster
    extrap_own = N * min(kept_t, fixed_t) if kept_t else None
    tuned_total, fixed_total = sum(tuned_s), sum(fixed_s)
    return {
        "benchmark": "clock_bench", "case": "tuning", "model": a.model, "workers": a.workers,
        "servers": a.servers, "rate": a.rate, "flow_cap": a.flow_cap, "fwd_ms": a.fwd_ms,
        "bwd_ms": a.bwd_ms, "iterations": a.iterations, "budget": a.budget,
        "trial_iterations": a.trial_iterations, "depth": a.depth, "B": link["B"],
        "link": link, "sweep": rows,
        "sweep_best": {"config": fixed1["config"], "median_s": best_t, "throughput": best_tp},
        "session": {"history": tuned["history"], "curve": curve, "kept": tuned["best"],
                    "iterations_to_95": reach, "tuning_s": tuning_s, "tuning_iterations": phase,
                    "kept_median_s": kept_t,
                    "kept_vs_best": (best_t / kept_t) if kept_t else None,
                    "switches": tuned["switches"], "times_s": tuned_s},
        "fixed": {"times_s": fixed_s, "median_s": fixed_t},
        "total": {"tuned_s": tuned_total, "fixed_s": fixed_total,
                  "ratio": tuned_total / fixed_total},
        "extrapolated_1000": {"tuned_s": extrap_tuned, "fixed_s": extrap_fixed,
                              "ratio": extrap_tuned / extrap_fixed if extrap_tuned else None,
                              "faster_fixed_s": extrap_own,
                              "ratio_vs_faster": (extrap_tuned / extrap_own
                                                  if extrap_tuned else None)},
        "wall_s": wall, "command": command("tuning"), "machine": machine(),
    }


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    s, sb, tot, ex = res["session"], res["sweep_best"], res["total"], res["extrapolated_1000"]
    t = Table(title=f"tuning: {res['model']} on {res['workers']} workers + {res['servers']} "
                    f"server hosts at {res['rate']}"
                    + (f" (per-flow cap {res['flow_cap']})" if res.get("flow_cap") else "")
                    + f", N = {res['iterations']}, budget {res['budget']}")
    t.add_column("what")
    t.add_column("value", justify="right")
    t.add_column("note")
    t.add_row("sweep best", f"{sb['median_s']:.3f} s/it", fmt_cfg(sb["config"]) +
              f" (of {len(res['sweep'])} configurations)")
    t.add_row("iterations to 95% of sweep best", str(s["iterations_to_95"]),
              "session's best-so-far trial score vs the sweep's best")
    if s["kept_median_s"]:
        t.add_row("kept configuration", f"{s['kept_median_s']:.3f} s/it",
                  f"{fmt_cfg(s['kept'])}; {s['kept_vs_best']:.3f} of sweep best")
    t.add_row(f"total, {res['iterations']} iterations", f"{tot['tuned_s']:.1f} s vs "
              f"{tot['fixed_s']:.1f} s", f"tuned / fixed = {tot['ratio']:.3f} (target <= 1.03)")
    if ex["tuned_s"]:
        t.add_row("extrapolated to 1000 iterations", f"{ex['tuned_s']:.1f} s vs "
                  f"{ex['fixed_s']:.1f} s", f"tuned / fixed = {ex['ratio']:.3f}")
        t.add_row("  vs the faster of kept and sweep best", f"{ex['tuned_s']:.1f} s vs "
                  f"{ex['faster_fixed_s']:.1f} s",
                  f"tuned / fixed = {ex['ratio_vs_faster']:.3f} (the cost of tuning alone)")
    Console(width=140).print(t)
    print(f"tuning phase (warm-up + trials): {s['tuning_s']:.1f} s for "
          f"{s['tuning_iterations']} iterations; fixed run "
          f"median {res['fixed']['median_s']:.3f} s/it. {describe_link(res['link'])}. "
          "Load average at the end: "
          f"{', '.join(f'{x:.1f}' for x in res['machine']['loadavg'])}.")
    print("trials: " + ", ".join(
        f"{fmt_cfg(h['config'])}={h['score']:.2f}" if h["score"] else
        f"{fmt_cfg(h['config'])}=failed" for h in s["history"]))


def plot(res: dict, path: Path) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    best_t = res["sweep_best"]["median_s"]
    ts = res["session"]["times_s"]
    ax1.plot(range(1, len(ts) + 1), ts, lw=0.8, label="tuned (session)")
    ax1.plot(range(1, len(res["fixed"]["times_s"]) + 1), res["fixed"]["times_s"], lw=0.8,
             label="best of sweep, fixed")
    ax1.axvline(res["budget"], color="k", ls=":", lw=0.8)
    ax1.set_xlabel("iteration")
    ax1.set_ylabel("seconds")
    ax1.set_ylim(0, min(max(ts), 6 * best_t))
    ax1.legend(fontsize=8)
    ax1.set_title("time per iteration")
    curve = res["session"]["curve"]
    ax2.step([0] + [c["iterations"] for c in curve], [0] + [c["best_so_far"] for c in curve],
             where="post")
    ax2.axhline(0.95, color="r", ls="--", lw=0.8, label="95% of sweep best")
    ax2.set_xlabel("tuning iterations used")
    ax2.set_ylabel("best-so-far / sweep best")
    ax2.legend(fontsize=8)
    ax2.set_title("tuning progress")
    save_figure(fig, path)
