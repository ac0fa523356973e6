"""Case ``job``: a whole job's wall time with autotune against plain DDP.

Issue 48's "nothing to win" job: the small GPT (:mod:`.tasks`, AdamW, real compute, one
CPU thread a rank) trained for ``--steps`` (300) by ``--workers`` (2) emulated hosts on a
fast link (``--rate``, 1gbit), where communication is a small part of a step. Variants,
each as a user writes it: ``ddp`` (``DistributedDataParallel(model)``), ``native``
(``autotune.session(model, total_steps=steps)``, its defaults otherwise, the store off so
that runs do not warm-start each other) and ``hook``
(``autotune.session(DistributedDataParallel(model), total_steps=steps)``).

The clock (:mod:`.rank`) holds the session's start, its warm-up, its trials and its close.
Each variant runs ``--runs`` times (3), interleaved (run i of every variant uses seed
``--seed`` + i). Reported: medians with their min-max spread, the speed-up over DDP and
the time ratio (wall time over DDP's, the form of the targets: at most 1.03 known, 1.05
unknown), where rank 0's steps went, the trial iterations, what the session said tuning
cost, and the training loss of the last 20 steps. ``--fixed`` pins knobs in the sessions
(with ``--budget 0``: one configuration's cost against DDP).

    sudo .venv/bin/python benchmarks/clock_bench.py job                 # ~5 min
    sudo .venv/bin/python benchmarks/clock_bench.py job --rate 50mbit   # at the link's bound
    sudo .venv/bin/python benchmarks/clock_bench.py job --unknown-length  # no total_steps
    sudo .venv/bin/python benchmarks/clock_bench.py job --budget 0 --fixed '{"transport": "pushpull"}'
    sudo .venv/bin/python benchmarks/clock_bench.py job --batch 16      # a step of about 50 ms
    sudo .venv/bin/python benchmarks/clock_bench.py job --model mlp --steps 3000   # a tiny model
    sudo .venv/bin/python benchmarks/clock_bench.py job --model demo --workers 4 --servers 4 --rate 300mbit

``--model demo`` is ``make demo``'s job (ResNet-50's 161 gradients at base width 32, 26 MiB,
a 40 ms forward and a 120 ms backward of emulated compute) where there is much to win; the
sessions may use the ``--servers`` hosts (plain DDP runs on the worker hosts alone).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from benchlib import machine
from userclock.common import command, launch, session_options, speedup, spread
from userclock.rank import PARTS

VARIANTS = ("ddp", "native", "hook")
LABELS = {"ddp": "DDP", "native": "autotune.session(model)",
          "hook": "autotune.session(ddp_model)"}
TAIL = 20  # steps whose mean training loss is reported
TASK = {"gpt": {"name": "gpt"}, "mlp": {"name": "mlp"},
        "demo": {"name": "sleepy", "zoo": "resnet50/32", "fwd_ms": 40.0, "bwd_ms": 120.0}}
JSON = "clock/job.json"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variants", default=",".join(VARIANTS), help="of " + ",".join(VARIANTS))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--servers", type=int, default=0,
                   help="server hosts the sessions may use (DDP runs on the workers alone)")
    p.add_argument("--model", choices=tuple(TASK), default="gpt",
                   help="gpt: little to win; mlp: a tiny model; demo: make demo's job")
    p.add_argument("--batch", type=int, default=32,
                   help="samples a rank a step: 32, about 88 ms a step on the 2-core "
                        "machine; 16, about 50 ms")
    p.add_argument("--budget", type=int, default=None,
                   help="the sessions' budget (default: the session's); 0: the runtime "
                        "alone, untuned")
    p.add_argument("--fixed", type=json.loads, default=None,
                   help='the sessions\' fixed knobs, as JSON, e.g. \'{"transport": "pushpull"}\'')
    p.add_argument("--unknown-length", action="store_true",
                   help="the sessions are not told the job's length (no total_steps)")
    p.set_defaults(rate="1gbit")


def check(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    a.variant_list = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = [v for v in a.variant_list if v not in VARIANTS]
    if bad or not a.variant_list or a.runs < 1 or a.steps < 1 or a.workers < 2:
        p.error(f"variants of {', '.join(VARIANTS)} (got {bad}); --runs, --steps >= 1; "
                "--workers >= 2")


def arm(a: argparse.Namespace, variant: str, seed: int) -> dict:
    out: dict[str, Any] = {"label": variant, "kind": variant, "steps": a.steps}
    if variant != "ddp":
        kw = session_options(a, seed, total_steps=None if a.unknown_length else a.steps,
                             samples_per_step=a.batch)
        if a.budget is not None:
            kw["budget"] = a.budget
        if a.fixed:
            kw["fixed"] = a.fixed
        out["options"] = kw
    return out


def run(a: argparse.Namespace) -> dict:
    from rich.console import Console

    from autotune.emulate import Cluster
    from autotune.schedule.stakes import fmt_cost

    con = Console(stderr=True)
    started = time.time()
    runs: dict[str, list] = {v: [] for v in a.variant_list}
    with Cluster(hosts=a.workers + a.servers, rate=a.rate, flow_cap=a.flow_cap,
                 congestion=a.congestion) as c:
        con.print(f"cluster {c.describe()}")
        for i in range(a.runs):
            for v in a.variant_list:
                seed = a.seed + i
                spec = {"task": {**TASK[a.model], "seed": seed, "batch": a.batch},
                        "workers": a.workers, "arms": [arm(a, v, seed)],
                        "timeout": a.rank_timeout}
                with con.status(f"{LABELS[v]}, run {i + 1}/{a.runs} ({a.steps} steps)"):
                    r, = launch(c, spec, a, servers=0 if v == "ddp" else a.servers,
                                failed=f"clock_bench job: {v}, seed {seed}")
                r["loss_tail"] = sum(r["loss"][-TAIL:]) / len(r["loss"][-TAIL:])
                r["first_steps_s"] = r["step_s"][:TAIL]
                del r["loss"], r["end_s"]  # the JSON keeps the tail and the steps' times
                con.print(f"{LABELS[v]} run {i + 1}: {r['wall_s']:.2f} s (start "
                          f"{r['start_s']:.2f} s), loss {r['loss_tail']:.3f}"
                          + (f"; {fmt_cost(r['tuning_cost'])}" if r.get("tuning_cost") else ""))
                runs[v].append(r)
    rows = {}
    for v, rs in runs.items():
        rows[v] = {"label": LABELS[v], "wall_s": spread([r["wall_s"] for r in rs]),
                   "start_s": spread([r["start_s"] for r in rs]),
                   "loss_tail": spread([r["loss_tail"] for r in rs]),
                   "parts_s": {p: spread([r["parts_s"][p] for r in rs]) for p in PARTS},
                   "tuning_iterations": [r.get("tuning_iterations", 0) for r in rs],
                   "kept": [r.get("best") for r in rs], "runs": rs}
    if "ddp" in rows:
        ref = rows["ddp"]["wall_s"]["median"]
        for row in rows.values():
            row["time_ratio"] = row["wall_s"]["median"] / ref  # above 1: slower than DDP
            row["speedup_vs_ddp"] = speedup(ref, row["wall_s"]["median"])
    return {"benchmark": "clock_bench", "case": "job", "model": a.model,
            "workers": a.workers, "servers": a.servers, "rate": a.rate,
            "budget": a.budget, "fixed": a.fixed, "unknown_length": a.unknown_length,
            "steps": a.steps, "runs": a.runs, "variants": rows,
            "target_time_ratio": 1.05 if a.unknown_length else 1.03,
            "wall_s": time.time() - started, "command": command("job"), "machine": machine()}


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"the user's clock: {res['steps']} steps, {res['workers']} hosts at "
                    f"{res['rate']} (medians of {res['runs']}, min-max)")
    for col in ("variant", "wall time", "speed-up over DDP", "time ratio", "session start",
                *PARTS, "trial iterations", "loss (last 20 steps)"):
        t.add_column(col)
    for row in res["variants"].values():
        w, s, loss = row["wall_s"], row["start_s"], row["loss_tail"]
        t.add_row(row["label"], f"{w['median']:.2f} s ({w['min']:.2f}-{w['max']:.2f})",
                  f"{row['speedup_vs_ddp']:.3f}" if row.get("speedup_vs_ddp") else "",
                  f"{row['time_ratio']:.3f}" if "time_ratio" in row else "",
                  f"{s['median']:.2f} s",
                  *(f"{row['parts_s'][p]['median']:.2f} s" for p in PARTS),
                  ",".join(map(str, row["tuning_iterations"])),
                  f"{loss['median']:.3f}")
    Console(stderr=True).print(t)
