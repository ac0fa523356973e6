"""Case ``accuracy``: time to a validation-loss target, real models on a slow link.

Two real jobs of :mod:`.tasks` (``gpt``: the small GPT-2 on the standard library's
sources, AdamW; ``cnn``: the small CNN on digits, SGD with momentum), real data already on
every machine, real compute, trained data-parallel by ``--workers`` (2) emulated hosts for
a fixed wall time (``MODELS``: 45 s for the GPT, 30 s for the CNN; ``--quick``: 15 s and
10 s, one run, budget 12) under each of ``--variants``:

* ``ddp``: plain PyTorch DDP (gloo, default buckets);
* ``lossless``: ``autotune.session(model, budget=...)`` (lossless configurations only);
* ``goodput``: ``allow_lossy=True, lossy_score="goodput"`` (codecs, the loss test);
* ``throughput``: ``allow_lossy=True, lossy_score="throughput"`` (codecs, speed alone);
* ``goodput_hook``: ``goodput`` through DDP (``autotune.session(ddp_model)``, the comm hook).

The session's start and its whole budget are on the clock (:mod:`.rank`). Rank 0 keeps a
copy of the parameters every 1/40 of the run and evaluates them after training on the
held-out data (GPT: 64 fixed windows of 64 bytes; CNN: the 297 held-out digits). From the
curve: the time to target (the first wall time whose validation loss is at most the
model's target, ``MODELS`` or ``--targets``, chosen so that DDP reaches it in about 2/3 of
the run; "never" where not reached) and the validation loss at equal wall time.

The link (``--rate``; default 50mbit) is where communication matters: DDP's all-reduce
takes about twice the GPT's compute and several times the CNN's. Runs interleave (run i
of every variant uses seed ``--seed`` + i: the same data order and initial weights).

    sudo .venv/bin/python benchmarks/clock_bench.py accuracy           # ~21 min
    sudo .venv/bin/python benchmarks/clock_bench.py accuracy --quick   # ~3.5 min
    sudo .venv/bin/python benchmarks/clock_bench.py accuracy --models gpt --rate 30mbit --runs 5
"""

from __future__ import annotations

import argparse
import inspect
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import describe_link, machine, measure_B, pyplot, save_figure
from userclock.common import command, fmt, fmt_s, launch, session_options, speedup, spread
from userclock.tasks import BATCH

VARIANTS = ("ddp", "lossless", "goodput", "throughput", "goodput_hook")
LABELS = {"ddp": "DDP", "lossless": "autotune lossless",
          "goodput": "autotune lossy (goodput)", "throughput": "autotune lossy (throughput)",
          "goodput_hook": "autotune lossy (goodput), through DDP"}
COLORS = {"ddp": "#555555", "lossless": "#4c72b0", "goodput": "#55a868",
          "throughput": "#c44e52", "goodput_hook": "#8172b2"}
SNAPSHOTS = 40  # parameter copies per run
JSON = "clock/accuracy.json"


@dataclass(frozen=True)
class ModelSpec:
    """One job of the case: its link, its run length and its target, full and quick."""

    rate: str          # the default --rate: DDP's all-reduce >= the compute at this rate
    duration: float    # seconds of training per variant and run
    target: float      # validation loss: DDP reaches it in about 2/3 of ``duration``
    quick_duration: float
    quick_target: float


# Rates: 2 workers, so DDP's ring all-reduce sends about the gradient bytes M once per
# step each way. GPT: M = 1.75 MB, compute ~0.14 s a step (1 thread, idle machine): at
# 50 mbit (~6 MB/s of payload) the all-reduce takes ~0.3 s, about twice the compute; DDP
# ran ~0.5 s a step on the emulator. CNN: M = 0.9 MB, compute ~0.02 s: at 50 mbit
# ~0.15 s, several times the compute; DDP ran ~0.18 s a step. Targets: the validation
# loss of the DDP curve at about 2/3 of the run, from the curves on this 2-core machine
# (GPT: ~60 of ~90 steps: 2.88; quick: ~3.15; CNN: ~110 of ~165 steps: 0.10; quick,
# ~37 of ~55 steps: 0.35). Another machine, another speed: pass --targets.
MODELS = {
    "gpt": ModelSpec(rate="50mbit", duration=45.0, target=2.88, quick_duration=15.0,
                     quick_target=3.15),
    "cnn": ModelSpec(rate="50mbit", duration=30.0, target=0.10, quick_duration=10.0,
                     quick_target=0.35),
}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="gpt,cnn", help="of " + ",".join(MODELS))
    p.add_argument("--variants", default=",".join(VARIANTS), help="of " + ",".join(VARIANTS))
    p.add_argument("--runs", type=int, default=None, help="runs per variant (default 3; "
                   "--quick: 1)")
    p.add_argument("--quick", action="store_true",
                   help="shorter runs (quick durations and targets), one run, budget 12")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--duration", type=float, default=None,
                   help="seconds of training per run (default: per model)")
    p.add_argument("--targets", default="",
                   help="validation-loss targets, e.g. gpt=2.7,cnn=0.15 (default: per model)")
    p.add_argument("--budget", type=int, default=None,
                   help="the sessions' tuning iterations (default 30; --quick: 12)")
    p.set_defaults(rate=None)


def check(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    a.budget = a.budget if a.budget is not None else 12 if a.quick else 30
    a.runs = a.runs or (1 if a.quick else 3)
    a.model_list = [m.strip() for m in a.models.split(",") if m.strip()]
    a.variant_list = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = [m for m in a.model_list if m not in MODELS] + [
        v for v in a.variant_list if v not in VARIANTS]
    if bad or not a.model_list or not a.variant_list:
        p.error(f"unknown or no models/variants: {bad}; models: {', '.join(MODELS)}; "
                f"variants: {', '.join(VARIANTS)}")
    try:
        a.target_of = {k.strip(): float(v) for k, v in
                       (item.split("=") for item in a.targets.split(",") if item.strip())}
    except ValueError:
        p.error(f"--targets is model=loss,..., got {a.targets!r}")
    if a.runs < 1 or a.workers < 2:
        p.error("--runs >= 1 and --workers >= 2")
    if {"goodput", "throughput", "goodput_hook"} & set(a.variant_list):
        import autotune

        if "lossy_score" not in inspect.signature(autotune.session).parameters:
            sys.exit("clock_bench accuracy: this autotune.session() has no lossy_score "
                     "keyword; run --variants ddp,lossless")


def arm(a: argparse.Namespace, variant: str, seed: int, duration: float) -> dict:
    kind = {"ddp": "ddp", "goodput_hook": "hook"}.get(variant, "native")
    out: dict[str, Any] = {"label": variant, "kind": kind, "seconds": duration,
                           "snapshots": SNAPSHOTS}
    if variant != "ddp":
        kw = session_options(a, seed, budget=a.budget, samples_per_step=BATCH)
        if variant in ("goodput", "throughput", "goodput_hook"):
            kw.update(allow_lossy=True, lossy_score=variant.split("_")[0])
        out["options"] = kw
    return out


def time_to_target(curve: list, target: float) -> float:
    """The first wall time at which the validation loss is <= ``target`` (inf: never)."""
    return next((t for t, _, loss in curve if loss <= target), math.inf)


def loss_at(curve: list, t_eq: float) -> float:
    """The validation loss of the last copy kept at or before ``t_eq``."""
    return [loss for t, _, loss in curve if t <= t_eq][-1]


def run(a: argparse.Namespace) -> dict:
    from rich.console import Console

    from autotune.emulate import Cluster

    con = Console(stderr=True)
    started = time.time()
    out: dict[str, Any] = {}
    for model in a.model_list:
        spec = MODELS[model]
        duration = a.duration or (spec.quick_duration if a.quick else spec.duration)
        target = a.target_of.get(model, spec.quick_target if a.quick else spec.target)
        rate = a.rate or spec.rate
        runs: dict[str, list] = {v: [] for v in a.variant_list}
        with Cluster(hosts=a.workers, rate=rate, flow_cap=a.flow_cap,
                     congestion=a.congestion) as c:
            con.print(f"[bold]{model}[/]: cluster {c.describe()}")
            link = None
            if not a.quick:
                with con.status("measuring B"):
                    link = measure_B(c, repeats=2, nbytes=4 << 20)
                con.print(describe_link(link))
            for i in range(a.runs):
                for v in a.variant_list:
                    seed = a.seed + i
                    launch_spec = {"task": {"name": model, "seed": seed},
                                   "workers": a.workers, "timeout": a.rank_timeout,
                                   "arms": [arm(a, v, seed, duration)]}
                    with con.status(f"{model}: {LABELS[v]}, run {i + 1}/{a.runs} "
                                    f"({duration:g} s of training)"):
                        r, = launch(c, launch_spec, a,
                                    failed=f"clock_bench accuracy: {model}, {v}, seed {seed}")
                    del r["loss"], r["end_s"], r["step_s"]  # the curve is the record
                    ttt = time_to_target(r["curve"], target)
                    con.print(f"{model} {LABELS[v]} run {i + 1}: {r['steps']} steps, "
                              f"time to {target:g}: "
                              + (f"{ttt:.1f} s" if math.isfinite(ttt) else "not reached")
                              + f", loss at {duration:g} s {loss_at(r['curve'], duration):.3f}"
                              + (f", kept {fmt(r['best'])}" if r.get("best") else ""))
                    runs[v].append(r)
        out[model] = summarize(model, rate, duration, target, link, runs)
    return {"benchmark": "clock_bench", "case": "accuracy", "workers": a.workers,
            "flow_cap": a.flow_cap, "budget": a.budget, "runs": a.runs, "quick": a.quick,
            "variants": a.variant_list, "models": out, "wall_s": time.time() - started,
            "command": command("accuracy"), "machine": machine()}


def summarize(model: str, rate: str, duration: float, target: float,
              link: dict | None, runs: dict[str, list]) -> dict:
    rows = {}
    for v, rs in runs.items():
        ttt = [time_to_target(r["curve"], target) for r in rs]
        rows[v] = {"variant": v, "label": LABELS[v],
                   "time_to_target_s": spread(ttt), "reached": sum(map(math.isfinite, ttt)),
                   "loss_at_equal_time": spread([loss_at(r["curve"], duration) for r in rs]),
                   "steps": spread([r["steps"] for r in rs]),
                   "kept": [r.get("best") for r in rs], "runs": rs}
    for row in rows.values():
        m = row["time_to_target_s"]["median"]
        for ref in ("ddp", "lossless"):  # above 1: faster to the target than the reference
            if ref in rows:
                row[f"speedup_vs_{ref}"] = speedup(rows[ref]["time_to_target_s"]["median"], m)
    return {"model": model, "rate": rate, "duration_s": duration, "target": target,
            "equal_time_s": duration, "link": link, "spec": MODELS[model].__dict__,
            "variants": rows}


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=160)
    for model, m in res["models"].items():
        t = Table(title=f"{model}: time to validation loss {m['target']:g} on "
                        f"{res['workers']} workers at {m['rate']}"
                        + (f" (per-flow cap {res['flow_cap']})" if res.get("flow_cap") else "")
                        + f", {m['duration_s']:g} s per run, medians of {res['runs']} "
                        f"(min-max)")
        for col in ("variant", "time to target s", "reached", "speed-up over DDP",
                    "over lossless", f"loss at {m['equal_time_s']:g} s", "steps",
                    "kept configurations"):
            t.add_column(col, justify="left" if col in ("variant", "kept configurations")
                         else "right", overflow="fold")
        for row in m["variants"].values():
            tt, eq = row["time_to_target_s"], row["loss_at_equal_time"]
            t.add_row(row["label"],
                      f"{fmt_s(tt['median'])} ({fmt_s(tt['min'])}-{fmt_s(tt['max'])})",
                      f"{row['reached']}/{len(row['runs'])}",
                      f"{row['speedup_vs_ddp']:.2f}x" if row.get("speedup_vs_ddp") else "",
                      f"{row['speedup_vs_lossless']:.2f}x"
                      if row.get("speedup_vs_lossless") else "",
                      f"{eq['median']:.3f} ({eq['min']:.3f}-{eq['max']:.3f})",
                      f"{row['steps']['median']:.0f}",
                      "; ".join(sorted({fmt(k) for k in row["kept"] if k})))
        con.print(t)
        if m.get("link"):
            print(describe_link(m["link"]))
    print(f"Load average at the end: "
          f"{', '.join(f'{x:.1f}' for x in res['machine']['loadavg'])}; "
          f"benchmark wall time {res['wall_s'] / 60:.1f} min.")


def plot(res: dict, path: Path) -> None:
    plt = pyplot()
    models = list(res["models"].values())
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.2), squeeze=False)
    for ax, m in zip(axes[0], models):
        for v, row in m["variants"].items():
            for i, r in enumerate(row["runs"]):
                ts, losses = [p[0] for p in r["curve"]], [p[2] for p in r["curve"]]
                ax.step(ts, losses, where="post", color=COLORS[v], alpha=0.75, lw=1.2,
                        label=LABELS[v] if i == 0 else None)
                if r.get("tuning_end_s"):
                    ax.axvline(r["tuning_end_s"], color=COLORS[v], ls=":", lw=0.8, alpha=0.6)
        ax.axhline(m["target"], color="k", ls="--", lw=0.8, label=f"target {m['target']:g}")
        ax.axvline(m["equal_time_s"], color="k", ls=":", lw=0.8)
        losses = [p[2] for row in m["variants"].values() for r in row["runs"]
                  for p in r["curve"]]
        ax.set_ylim(min(losses) * 0.95, min(max(losses), 3 * m["target"] + 1))
        ax.set_xlabel("wall time, s (tuning included; dotted: a session's tuning ends)")
        ax.set_ylabel("validation loss")
        ax.set_title(f"{m['model']} on {res['workers']} workers at {m['rate']}")
        ax.legend(fontsize=8)
    save_figure(fig, path)
