"""Case ``hook``: DDP against DDP with autotune's comm hook, per iteration after tuning (issues 25, 41).

The ``iteration`` case's job (the emulated-compute task: ``--model``, default ResNet-50 at
half width, ``resnet50/32``: 161 tensors, 26 MiB; the forward sleeps ``--fwd-ms``, the
backward yields the gradients in ready order over ``--bwd-ms``) on ``--workers`` (n)
emulated hosts. Cases (``--cases``, all by default):

1. ``capped``: the cloud case, every TCP flow capped (``--flow-cap``, 100mbit) on NICs of
   ``--rate`` (400mbit); no server hosts. Target: DDP+hook at least 1.3x DDP.
2. ``servers``: uncapped, with k = n server hosts (DDP on ``autotune.workers_group()``,
   the hook's push/pull through them and the workers' own Summation Services, issue 41).
   Targets (issue 52): at least 1.4x DDP, and 0.85 of BytePS's analytic optimum.
3. ``uncapped``: uncapped, no servers: nothing to gain; target at least 0.97x DDP.
4. ``intra``: uncapped, n / 2 hosts with two workers each (the intra-machine step over
   loopback); also the native session on the same job (a second launch, same hosts).
   Target (issue 52): DDP+hook at least 0.97 of the native speed.

Each case runs ``--repeats`` times (a new launch each time: under the cap the emulator's
port-collision lottery is drawn again); B measured once per cluster. A launch is two arms
(:mod:`.rank`): plain DDP (``--warmup`` + ``--measure`` steps) and DDP +
``autotune.session(ddp, budget=--budget)`` (its warm-up and trials, then ``--measure``
steps under the kept configuration after the switch); every step's time as the rank
program times it, every 10th step's average checked exactly. Per case: medians over the
repeats of each repeat's median, with the min-max over repeats; the speed-up over DDP;
the fraction of the analytic all-reduce optimum; the kept configurations; the target,
MET or MISSED.

    sudo .venv/bin/python benchmarks/clock_bench.py hook        # ~12 min, all four cases
    sudo .venv/bin/python benchmarks/clock_bench.py hook --cases servers --budget 0 \\
        --fixed '{"transport": "pushpull", "servers": 4, "streams": 2, "chunk_bytes": 131072}'
    sudo .venv/bin/python benchmarks/clock_bench.py hook --budget 6 --measure 3 --repeats 1 --cases uncapped
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchlib import RESULTS, describe_link, fmt_cfg, machine, measure_B, median
from userclock.common import WARMUP, command, kept_steps, launch, session_options

from autotune.workload import gradient_bytes, model_shapes, optimum_s

CASES = ("capped", "servers", "uncapped", "intra")
#: per case: DDP+hook / DDP it/s must be at least this
TARGETS = {"capped": 1.3, "servers": 1.4, "uncapped": 0.97, "intra": 0.0}
BYTEPS_SHARE = 0.85  # servers: the hook reaches at least this share of BytePS's optimum
NATIVE_SHARE = 0.97  # intra: the hook at least this share of the native runtime's speed
JSON = None  # clock/hook_<model>[_<cases>].json, by check()


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    p.add_argument("--model", default="resnet50/32",
                   help="zoo model gradient shapes (resnet50/32: ResNet-50 at half width)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--fwd-ms", type=float, default=50.0, help="emulated forward time")
    p.add_argument("--bwd-ms", type=float, default=150.0, help="emulated backward time")
    p.add_argument("--warmup", type=int, default=1, help="DDP's untimed iterations")
    p.add_argument("--measure", type=int, default=5,
                   help="timed iterations, DDP and DDP + hook (after tuning) alike")
    p.add_argument("--budget", type=int, default=30, help="session tuning iterations")
    p.add_argument("--trial-iterations", type=int, default=2)
    p.add_argument("--bucket-mb", type=float, default=25.0,
                   help="DDP's bucket_cap_mb, plain DDP and DDP + hook alike")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--fixed", default=None,
                   help="knobs pinned for the session, as JSON (e.g. "
                        "'{\"transport\": \"pushpull\", \"servers\": 4, \"streams\": 2, "
                        "\"chunk_bytes\": 131072}'): every knob pinned runs one configuration, "
                        "the tuner off (issue 59, item 5)")
    p.set_defaults(rate="400mbit", flow_cap="100mbit")


def check(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    try:
        a.case_list = parse_cases(a.cases)
    except ValueError as e:
        p.error(str(e))
    if a.fixed:
        try:
            if not isinstance(json.loads(a.fixed), dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            p.error(f"--fixed {a.fixed!r}: {e}")
    if a.measure < 1 or a.repeats < 1 or a.budget < 0:
        p.error("--measure and --repeats must be >= 1, --budget >= 0")
    if "intra" in a.case_list and (a.workers < 4 or a.workers % 2):
        p.error(f"--cases intra puts 2 workers on each host: --workers must be even and "
                f">= 4, got {a.workers}")
    tag = a.model.replace("/", "w") + ("" if a.case_list == list(CASES)
                                       else "_" + "_".join(a.case_list))
    a.json = a.json or RESULTS / "clock" / f"hook_{tag}.json"


def arms(a: argparse.Namespace, seed: int, way: str) -> list[dict]:
    """A launch's arms: plain DDP, then DDP + the hook tuned (``way`` ddp); or the native
    session alone (``way`` native)."""
    options = session_options(a, seed, budget=a.budget, samples_per_step=1, spend=None,
                              fixed=json.loads(a.fixed) if a.fixed else None,
                              trial_iterations=a.trial_iterations, warmup=WARMUP)
    # the session's steps: until ``measure`` + 1 after tuning (the first pays the switch)
    session = {"steps": 2 * (WARMUP + a.budget) + a.measure + 1, "kept_steps": a.measure + 1,
               "options": options, "bucket_mb": a.bucket_mb}
    if way == "native":
        return [{"label": "native", "kind": "native", **session}]
    return [{"label": "ddp", "kind": "ddp", "bucket_mb": a.bucket_mb,
             "steps": a.warmup + a.measure},
            {"label": "hook", "kind": "hook", **session}]


def run(a: argparse.Namespace) -> dict:
    from rich.console import Console

    from autotune.emulate import Cluster

    con = Console(stderr=True)
    n, cases = a.workers, a.case_list
    task = {"name": "sleepy", "zoo": a.model, "fwd_ms": a.fwd_ms, "bwd_ms": a.bwd_ms}
    shapes = model_shapes(a.model)
    started = time.time()
    out: dict = {}
    # one cluster per link: the capped one, an uncapped one for servers and uncapped, and
    # one of n/2 hosts with two workers each for intra
    clusters = []
    if "capped" in cases:
        clusters.append((["capped"], n, a.flow_cap))
    rest = [c for c in ("servers", "uncapped") if c in cases]
    if rest:
        clusters.append((rest, 2 * n if "servers" in rest else n, None))
    if "intra" in cases:
        clusters.append((["intra"], n // 2, None))
    for names, hosts, cap in clusters:
        with Cluster(hosts=hosts, rate=a.rate, flow_cap=cap, congestion=a.congestion) as c:
            con.print(f"[bold]cluster[/] {c.describe()}")
            with con.status("measuring B"):
                link = measure_B(c, repeats=3)
            con.print(describe_link(link))
            for name in names:
                k = n if name == "servers" else 0
                place = [r // 2 for r in range(n)] if name == "intra" else None
                runs = []
                for r in range(a.repeats):
                    seed = a.seed + r
                    spec = {"task": task, "workers": n, "timeout": a.rank_timeout}
                    with con.status(f"{name}: repeat {r + 1}/{a.repeats}: DDP, then DDP + "
                                    f"hook" + (f" ({k} server hosts)" if k else "")):
                        ddp, hook = launch(c, {**spec, "arms": arms(a, seed, "ddp")}, a,
                                           servers=k, hosts=place,
                                           failed=f"clock_bench hook: {name}, repeat {r + 1}")
                    res = {"ddp_times_s": ddp["step_s"][a.warmup:],
                           "times_s": hook["step_s"], "tuning": hook["tuning"],
                           "kept_times_s": kept_steps(hook), "best": hook["best"],
                           "history": hook["history"],
                           "tuning_s": sum(t for t, b in zip(hook["step_s"], hook["tuning"])
                                           if b),
                           "bytes": gradient_bytes(shapes), "tensors": len(shapes),
                           "world": n + k, "seed": seed}
                    if name == "intra":
                        with con.status(f"intra: repeat {r + 1}/{a.repeats}: the native "
                                        "session"):
                            native, = launch(c, {**spec, "arms": arms(a, seed, "native")}, a,
                                             hosts=place, failed=f"clock_bench hook: intra, "
                                                                 f"native, repeat {r + 1}")
                        res.update(native_times_s=kept_steps(native), native_best=native["best"],
                                   native_history=native["history"])
                    runs.append(res)
                    con.print(f"  {name}: DDP {median(res['ddp_times_s']):.3f} s, DDP + hook "
                              f"{median(res['kept_times_s']):.3f} s under "
                              f"{fmt_cfg(res['best'])}"
                              + (f", native {median(res['native_times_s']):.3f} s under "
                                 f"{fmt_cfg(res['native_best'])}" if "native_best" in res
                                 else ""))
                out[name] = {"link": link, "servers": k, "flow_cap": cap, "runs": runs,
                             "machines": n // 2 if place else n}
    return summarize(a, cases, out, time.time() - started)


def _spread(xs: list[float]) -> list[float]:
    return [min(xs), max(xs)] if xs else []


def summarize_case(name: str, case: dict, n: int, fwd_s: float) -> dict:
    """One case's figures from its runs (each: DDP's and the hook's timed iterations)."""
    link, runs = case["link"], case["runs"]
    B, flow_B = link["B"], link["flow_B"]
    M = runs[0]["bytes"]
    ddp_s = [median(r["ddp_times_s"]) for r in runs]
    hook_s = [median(r["kept_times_s"]) for r in runs]
    ratios = [d / h for d, h in zip(ddp_s, hook_s)]
    opt = optimum_s(n, 0, M, B, fwd_s)
    ddp_med, hook_med, ratio = median(ddp_s), median(hook_s), median(ratios)
    target = TARGETS[name]
    row = {
        "case": name, "servers": case["servers"], "flow_cap": case["flow_cap"], "B": B,
        "flow_B": flow_B, "link": link, "bytes": M, "repeats": len(runs),
        "ddp_s": ddp_med, "ddp_s_spread": _spread(ddp_s),
        "ddp_it_s": 1 / ddp_med, "hook_s": hook_med, "hook_s_spread": _spread(hook_s),
        "hook_it_s": 1 / hook_med,
        "speedup_vs_ddp": ratio, "ratio_spread": _spread(ratios), "ratios": ratios,
        "optimum_s": opt, "ddp_of_optimum": opt / ddp_med, "hook_of_optimum": opt / hook_med,
        # the most any all-reduce (hook or not) could give over DDP at this B
        "allreduce_bound_vs_ddp": ddp_med / opt,
        "kept": [r["best"] for r in runs],
        "kept_iterations": [len(r["kept_times_s"]) for r in runs],
        "tuning_s": [r["tuning_s"] for r in runs],
        "target": target, "met": ratio >= target,
        "iteration_spread_s": {"ddp": _spread([t for r in runs for t in r["ddp_times_s"]]),
                               "hook": _spread([t for r in runs for t in r["kept_times_s"]])},
    }
    if case["flow_cap"]:  # DDP's bound: gloo's ring, one flow per peer
        row["ddp_bound_s"] = optimum_s(n, 0, M, min(B, flow_B), fwd_s)
    if case["servers"]:
        k = case["servers"]
        row["byteps_optimum_s"] = optimum_s(n, k, M, B, fwd_s)
        row["byteps_bound_vs_ddp"] = ddp_med / row["byteps_optimum_s"]
        row["hook_of_byteps"] = row["byteps_optimum_s"] / hook_med
        row["met"] = row["met"] and row["hook_of_byteps"] >= BYTEPS_SHARE
        row["note"] = (f"{k} server hosts: the hook's push/pull through them and the "
                       "workers' own Summation Services (target: at least "
                       f"{BYTEPS_SHARE:g} of BytePS's optimum too)")
    if name == "intra":
        machines = case["machines"]
        native = [median(r["native_times_s"]) for r in runs]
        vs_native = [nat / h for nat, h in zip(native, hook_s)]
        row.update(native_s=median(native), native_s_spread=_spread(native),
                   native_kept=[r["native_best"] for r in runs],
                   hook_vs_native=median(vs_native), hook_vs_native_spread=_spread(vs_native),
                   machines=machines,
                   # the intra-machine step on loopback, the cross-machine step over the NIC
                   intra_optimum_s=optimum_s(machines, 0, M, B, fwd_s))
        row["met"] = row["hook_vs_native"] >= NATIVE_SHARE
        row["note"] = (f"{machines} hosts x 2 workers; the hook against the native runtime "
                       f"on the same job (target: the hook at least {NATIVE_SHARE:g} of the native speed); "
                       "the optimum with the intra-machine step: the ring all-reduce among "
                       f"{machines} machines, {row['intra_optimum_s']:.3f} s")
    if not row["met"]:
        row["why_missed"] = why_missed(row)
    return row


def why_missed(row: dict) -> str:
    """Why a case missed its target, from its own numbers."""
    if row["case"] == "intra":
        return (f"the hook reached {row['hook_vs_native']:.2f}x the native runtime's speed "
                "on the same job")
    if row["case"] == "servers":
        return (f"the hook reached {row['speedup_vs_ddp']:.2f}x DDP and "
                f"{row['hook_of_byteps']:.2f} of BytePS's optimum "
                f"({row['byteps_bound_vs_ddp']:.2f}x DDP)")
    bound = row["allreduce_bound_vs_ddp"]
    if bound < row["target"]:
        why = (f"the ring all-reduce optimum at this B is {bound:.2f}x DDP, the most any "
               "all-reduce (DDP's, the hook's) can give: below the target")
    else:
        why = (f"DDP + hook reached {row['hook_of_optimum']:.2f} of the all-reduce optimum, "
               f"which is {bound:.2f}x DDP")
    return why


def summarize(a: argparse.Namespace, cases: list[str], out: dict, wall: float) -> dict:
    fwd = a.fwd_ms / 1e3
    rows = [summarize_case(c, out[c], a.workers, fwd) for c in CASES if c in out]
    first = out[rows[0]["case"]]["runs"][0]
    return {
        "benchmark": "clock_bench", "case": "hook", "model": a.model, "bytes": first["bytes"],
        "tensors": first["tensors"], "workers": a.workers, "rate": a.rate,
        "flow_cap": a.flow_cap, "fwd_ms": a.fwd_ms, "bwd_ms": a.bwd_ms, "warmup": a.warmup,
        "bucket_mb": a.bucket_mb,
        "budget": a.budget, "fixed": json.loads(a.fixed) if a.fixed else None,
        "measure": a.measure, "trial_iterations": a.trial_iterations,
        "repeats": a.repeats, "seed": a.seed, "cases": cases, "rows": rows, "raw": out,
        "wall_s": wall, "command": command("hook"),
        "machine": machine(),
    }


def _rng(xs: list[float], fmt: str = "{:.3f}") -> str:
    return "" if len(xs) < 2 or xs[0] == xs[1] else f" ({fmt.format(xs[0])}-{fmt.format(xs[1])})"


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"DDP vs DDP + autotune's hook: {res['model']} ({res['bytes'] / 2**20:.0f} "
                    f"MiB, {res['tensors']} tensors) on {res['workers']} workers at "
                    f"{res['rate']}, compute {res['fwd_ms']:g}+{res['bwd_ms']:g} ms, "
                    f"budget {res['budget']}, {res['measure']} timed iterations, "
                    f"{res['repeats']} repeat(s)")
    for col in ("case", "B MB/s", "DDP it/s", "DDP+hook it/s", "speed-up", "DDP of opt",
                "hook of opt", "kept configuration", "target"):
        t.add_column(col, justify="left" if col in ("case", "kept configuration", "target")
                     else "right")
    for r in res["rows"]:
        what = r["case"] + (f" (cap {r['flow_cap']})" if r["flow_cap"] else "") + \
            (f" (k={r['servers']})" if r["servers"] else "") + \
            (f" ({r['machines']}x2)" if r["case"] == "intra" else "")
        inv = [1 / x for x in reversed(r["ddp_s_spread"])]
        hinv = [1 / x for x in reversed(r["hook_s_spread"])]
        t.add_row(what, f"{r['B'] / 1e6:.2f}", f"{r['ddp_it_s']:.3f}{_rng(inv)}",
                  f"{r['hook_it_s']:.3f}{_rng(hinv)}",
                  f"{r['speedup_vs_ddp']:.2f}x{_rng(r['ratio_spread'], '{:.2f}')}",
                  f"{r['ddp_of_optimum']:.2f}", f"{r['hook_of_optimum']:.2f}",
                  "; ".join(fmt_cfg(c) for c in r["kept"]),
                  _target(r) + (": MET" if r["met"] else ": MISSED"))
    Console(width=160).print(t)
    print("Medians over the repeats of each repeat's median (rank 0's time per "
          "iteration); in parentheses the min-max over repeats. 'of opt': the ring "
          "all-reduce optimum (communication + forward) at the measured B over the time.")
    for r in res["rows"]:
        print(f"  {r['case']}: {describe_link(r['link'])}; all-reduce optimum "
              f"{r['optimum_s']:.3f} s = {r['allreduce_bound_vs_ddp']:.2f}x DDP"
              + (f"; DDP's one-flow bound {r['ddp_bound_s']:.3f} s" if "ddp_bound_s" in r else "")
              + f"; tuning {statistics.mean(r['tuning_s']):.1f} s; timed kept iterations "
              f"{r['kept_iterations']}")
        if r["case"] == "servers":
            print(f"    {r['note']}; BytePS optimum with them {r['byteps_optimum_s']:.3f} s "
                  f"= {r['byteps_bound_vs_ddp']:.2f}x DDP; the hook reached "
                  f"{r['hook_of_byteps']:.2f} of it")
        if r["case"] == "intra":
            print(f"    {r['note']}; native {r['native_s']:.3f} s"
                  f"{_rng(r['native_s_spread'])} under "
                  f"{'; '.join(fmt_cfg(c) for c in r['native_kept'])}; native/hook "
                  f"{r['hook_vs_native']:.2f}{_rng(r['hook_vs_native_spread'], '{:.2f}')}")
        if r.get("why_missed"):
            print(f"    MISSED: {r['why_missed']}")
    print(f"Wall time {res['wall_s'] / 60:.1f} min. Load average at the end: "
          f"{', '.join(f'{x:.1f}' for x in res['machine']['loadavg'])}.")


def _target(r: dict) -> str:
    if r["case"] == "intra":
        return f"hook/native speed >= {NATIVE_SHARE:g}"
    return f">= {r['target']:g}x" + (f", >= {BYTEPS_SHARE:g} of BytePS" if r["servers"] else "")


def parse_cases(text: str) -> list[str]:
    cases = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad or not cases:
        raise ValueError(f"unknown case(s) {', '.join(bad) or '(none)'}: pick from "
                         f"{', '.join(CASES)}")
    return [c for c in CASES if c in cases]
