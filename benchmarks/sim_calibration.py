"""Simulator calibration: predicted vs measured step time on the emulated cluster (root).

Brings up ``--workers`` + ``--servers`` emulated hosts at ``--rate`` each way
(autotune.emulate), measures the host-to-host payload rate B (one way and both ways at
once), then runs the communication runtime (autotune.runtime, gloo) on a synthetic job
with a real gradient set (``--model``'s tensors in ready order, each ``1/--scale`` of its
size; compute emulated by sleeping as in ``autotune tune``) under a fixed list of
benchmark configurations: all-reduce and push/pull (colocated and with a server),
several stream counts and chunk sizes, with and without compute to overlap. Each
configuration's step time (backward + wait, the slowest worker, median of ``--repeats``)
is compared with :func:`autotune.sim.simulate` for the same job on a described cluster
whose NIC rate is the measured duplex B:

* ``default``: the simulator's default constants (nothing fitted);
* ``calibrated``: its free constants (per-message latency, per-chunk overhead, per-stream
  overhead, summation rate; the push/pull pipeline depth is the runtime's) fitted by grid
  search to minimise the mean relative error on half of the configurations (``fit``),
  and checked on the other half (``held out``).

Prints a table, writes JSON (``--json``, default ``benchmarks/results/sim_calibration.json``:
the measured rows with their raw times, B, the gradient sizes, and the predictions) and,
with ``--results-md FILE``, appends the table as a section to FILE (a dated note under
``benchmarks/notes/``; ``benchmarks/RESULTS.md`` keeps only the latest figures). ``--reevaluate
[JSON]`` re-runs the predictions and the fit on saved measurements, without the emulator
(after a change to the simulator), and writes them to ``--json`` (default: the saved file
itself; its measurements are copied unchanged, its predictions replaced).

    sudo .venv/bin/python benchmarks/sim_calibration.py --repeats 5          # ~4 min
    .venv/bin/python benchmarks/sim_calibration.py --reevaluate               # seconds

The same file is the worker rank program (``--job``); servers run ``python -m autotune.server``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

MARK = "CALIB "
RESULTS = Path(__file__).resolve().parent / "results"
MiB = 1 << 20
KiB = 1 << 10


def _cfg(transport: str, streams: int, chunk: int, servers: int = 0) -> dict[str, Any]:
    return {"transport": transport, "streams": streams, "chunk_bytes": chunk,
            "servers": servers if transport == "pushpull" else 0}


#: (label, configuration, compute ms, set). Labels: ar = all-reduce, pp = push/pull, k =
#: servers, s = streams, then the chunk size; "+c" = with emulated compute to overlap. The
#: configurations come in pairs of the same kind (big chunks, small chunks, latency-bound,
#: colocated / dedicated servers, with compute): one of each pair is in the fit set, the
#: other held out to check the fit.
CONFIGS: list[tuple[str, dict[str, Any], float, str]] = [
    ("ar s1 4M", _cfg("allreduce", 1, 4 * MiB), 0.0, "fit"),
    ("ar s1 16M", _cfg("allreduce", 1, 16 * MiB), 0.0, "held out"),
    ("ar s4 256K", _cfg("allreduce", 4, 256 * KiB), 0.0, "fit"),
    ("ar s2 1M", _cfg("allreduce", 2, 1 * MiB), 0.0, "held out"),
    ("ar s1 64K", _cfg("allreduce", 1, 64 * KiB), 0.0, "fit"),
    ("ar s2 64K", _cfg("allreduce", 2, 64 * KiB), 0.0, "held out"),
    ("ar s8 1M", _cfg("allreduce", 8, 1 * MiB), 0.0, "fit"),
    ("ar s16 256K", _cfg("allreduce", 16, 256 * KiB), 0.0, "held out"),
    ("pp k0 s1 4M", _cfg("pushpull", 1, 4 * MiB, 0), 0.0, "fit"),
    ("pp k0 s4 1M", _cfg("pushpull", 4, 1 * MiB, 0), 0.0, "held out"),
    ("pp k1 s1 4M", _cfg("pushpull", 1, 4 * MiB, 1), 0.0, "fit"),
    ("pp k1 s4 1M", _cfg("pushpull", 4, 1 * MiB, 1), 0.0, "held out"),
    ("pp k1 s2 256K", _cfg("pushpull", 2, 256 * KiB, 1), 0.0, "fit"),
    ("pp k1 s8 64K", _cfg("pushpull", 8, 64 * KiB, 1), 0.0, "held out"),
    ("ar s2 1M +c", _cfg("allreduce", 2, 1 * MiB), 600.0, "fit"),
    ("ar s4 256K +c", _cfg("allreduce", 4, 256 * KiB), 600.0, "held out"),
    ("pp k1 s4 1M +c", _cfg("pushpull", 4, 1 * MiB, 1), 600.0, "fit"),
    ("pp k1 s2 256K +c", _cfg("pushpull", 2, 256 * KiB, 1), 600.0, "held out"),
]

SETS = {label: which for label, _, _, which in CONFIGS}

#: The simulator's free constants and the values the fit tries. ``pipeline_depth`` is not
#: free: the runtime keeps ``SEND_DEPTH`` = 4 chunks in flight per stream.
GRID: dict[str, list[Any]] = {
    "latency_us": [50, 200, 500, 1000, 2000],
    "chunk_overhead_us": [10, 100, 300, 1000],
    "stream_overhead": [0.0, 0.01, 0.02, 0.05, 0.1],
    "pipeline_depth": [4],
    "cpu_sum_gbps": [0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 200.0],
}


def gradient_sizes(model: str, scale: int) -> list[int]:
    """Element counts of ``model``'s gradients in ready order, each divided by ``scale``."""
    from autotune import zoo

    return [max(1, _numel(s) // scale) for _, s in zoo.gradient_shapes(model)]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# ---- rank program (workers) -----------------------------------------------------------

def rank_main(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    from autotune.runtime import Runtime
    from autotune.workload import SyntheticJob, check_average

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rt = Runtime.bootstrap(timeout=300.0)
    rank = rt.info.rank
    leader = rank == rt.info.leader
    world = len(rt.info.workers)
    sizes = gradient_sizes(a.model, a.scale)
    model = nn.Module()
    # registration order is the reverse of ready order (what backward produces first last)
    model.params = nn.ParameterList(nn.Parameter(torch.zeros(n)) for n in reversed(sizes))
    rt.register(model.parameters())
    jobs = {c: SyntheticJob(model, c / 1e3, 2 / 3) for c in sorted({c for _, _, c, _ in CONFIGS})}
    x = torch.tensor(float(rank + 1))
    want = (world + 1) / 2
    rows = []
    for label, cfg, compute_ms, _ in CONFIGS:
        job = jobs[compute_ms]
        times = []
        for i in range(a.warmup + a.repeats):
            active = rt.sync(cfg if leader else None)
            t0 = time.perf_counter()
            job(x).backward()
            rt.wait()
            t = rt.worker_max(time.perf_counter() - t0)
            if i == 0:
                check_average(model, want, f"rank {rank}: under {active}")
            model.zero_grad(set_to_none=False)
            if i >= a.warmup:
                times.append(t)
        rows.append({"label": label, "config": active, "compute_ms": compute_ms, "times_s": times})
    rt.sync(stop=True) if leader else rt.sync()
    rt.shutdown()
    if leader:
        print(MARK + json.dumps({"rows": rows, "grad_bytes": [n * 4 for n in sizes]}), flush=True)
    dist.destroy_process_group()


# ---- prediction and fit ---------------------------------------------------------------

def predict(rows: list[dict], grad_bytes: list[int], workers: int, servers: int, B: float,
            constants: dict[str, Any]) -> list[float]:
    """Predicted step time of every row on the described cluster."""
    from autotune.sim import GBIT, ClusterSpec, Job, simulate

    cluster = ClusterSpec(machines=workers, workers_per_machine=1, server_machines=servers,
                      nic_gbps=B / GBIT, worker_device="cpu", **constants)
    jobs: dict[float, Job] = {}
    out = []
    for r in rows:
        c = r["compute_ms"]
        if c not in jobs:
            jobs[c] = Job(tuple(grad_bytes), compute_s=c / 1e3, backward_fraction=2 / 3)
        out.append(simulate(jobs[c], cluster, r["config"]).step_s)
    return out


def errors(pred: list[float], meas: list[float]) -> list[float]:
    return [(p - m) / m for p, m in zip(pred, meas)]


def fit(rows: list[dict], grad_bytes: list[int], workers: int, servers: int, B: float,
        idx: list[int]) -> tuple[dict[str, Any], float]:
    """Grid search of :data:`GRID` minimising the mean |relative error| over rows ``idx``."""
    sub = [rows[i] for i in idx]
    meas = [statistics.median(r["times_s"]) for r in sub]
    best: tuple[float, dict[str, Any]] | None = None
    keys = list(GRID)
    for values in itertools.product(*(GRID[k] for k in keys)):
        consts = dict(zip(keys, values))
        err = statistics.mean(abs(e) for e in errors(predict(sub, grad_bytes, workers, servers, B,
                                                              consts), meas))
        if best is None or err < best[0]:
            best = (err, consts)
    assert best is not None
    return best[1], best[0]


# ---- driver ---------------------------------------------------------------------------

def measure(a: argparse.Namespace) -> dict:
    """Bring up the cluster, measure B and every configuration's step times (raw data)."""
    from rich.console import Console

    from autotune.emulate import Cluster, measure_bandwidth

    con = Console(stderr=True)
    hosts = a.workers + a.servers
    with Cluster(hosts=hosts, rate=a.rate) as c:
        con.print(f"[bold]cluster[/] {c.describe()}")
        with con.status("measuring B (one way, both ways)"):
            one = measure_bandwidth(c, 0, 1, nbytes=16 << 20, repeats=3)
            dup = measure_bandwidth(c, 0, 1, nbytes=16 << 20, repeats=3, duplex=True)
        argv = [sys.executable, os.path.abspath(__file__), "--job", "--model", a.model,
                "--scale", str(a.scale), "--repeats", str(a.repeats), "--warmup", str(a.warmup)]
        with con.status(f"{len(CONFIGS)} configurations x {a.warmup + a.repeats} iterations"):
            job = c.launch(argv, workers=a.workers, servers=a.servers,
                           server_argv=[sys.executable, "-m", "autotune.server"],
                           timeout_s=a.timeout).check()
    r = job.last_json(MARK)
    return {
        "benchmark": "sim_calibration", "workers": a.workers, "servers": a.servers,
        "rate": a.rate, "model": a.model, "scale": a.scale,
        "gradient_bytes": sum(r["grad_bytes"]), "grad_bytes": r["grad_bytes"],
        "tensors": len(r["grad_bytes"]), "repeats": a.repeats, "warmup": a.warmup,
        "command": "benchmarks/sim_calibration.py " + " ".join(sys.argv[1:]),
        "B_oneway": one.to_dict(), "B_duplex": dup.to_dict(), "B": dup.best_bytes_per_s,
        "rows": [{**{k: row[k] for k in ("label", "config", "compute_ms", "times_s")},
                  "set": SETS.get(row["label"], "held out")} for row in r["rows"]],
        "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release,
                    "load_avg": os.getloadavg()},
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def analyse(raw: dict) -> dict:
    """Predictions with the default and the fitted constants, errors and summaries."""
    from autotune.sim import ClusterSpec

    rows, grad_bytes, B = raw["rows"], raw["grad_bytes"], raw["B"]
    workers, servers = raw["workers"], raw["servers"]
    meas = [statistics.median(x["times_s"]) for x in rows]
    defaults = {k: getattr(ClusterSpec(machines=1), k) for k in GRID}
    pred_default = predict(rows, grad_bytes, workers, servers, B, defaults)
    fit_idx = [i for i, r in enumerate(rows) if r["set"] == "fit"]
    held_idx = [i for i, r in enumerate(rows) if r["set"] != "fit"]
    consts, _ = fit(rows, grad_bytes, workers, servers, B, fit_idx)
    pred_cal = predict(rows, grad_bytes, workers, servers, B, consts)
    e_def, e_cal = errors(pred_default, meas), errors(pred_cal, meas)
    out_rows = []
    for i, (row, m) in enumerate(zip(rows, meas)):
        out_rows.append({**{k: row[k] for k in ("label", "config", "compute_ms", "times_s", "set")},
                         "median_s": m, "predicted_default_s": pred_default[i],
                         "predicted_calibrated_s": pred_cal[i], "error_default": e_def[i],
                         "error_calibrated": e_cal[i]})

    def summary(errs: list[float], idx: list[int]) -> dict[str, float]:
        sel = [abs(errs[i]) for i in idx]
        return {"mean_abs": statistics.mean(sel), "max_abs": max(sel),
                "within_15pct": sum(1 for e in sel if e <= 0.15) / len(sel)}

    ar = [i for i, r in enumerate(rows) if r["config"]["transport"] == "allreduce"]
    pp = [i for i, r in enumerate(rows) if r["config"]["transport"] == "pushpull"]
    everything = list(range(len(rows)))
    return {
        **raw, "defaults": defaults, "calibrated": consts, "rows": out_rows,
        "summary": {
            "default": {"all": summary(e_def, everything), "allreduce": summary(e_def, ar),
                        "pushpull": summary(e_def, pp)},
            "calibrated": {"fit": summary(e_cal, fit_idx), "held_out": summary(e_cal, held_idx),
                           "all": summary(e_cal, everything), "allreduce": summary(e_cal, ar),
                           "pushpull": summary(e_cal, pp),
                           "allreduce_held_out": summary(e_cal, [i for i in ar if i in held_idx]),
                           "pushpull_held_out": summary(e_cal, [i for i in pp if i in held_idx])},
        },
    }


def print_table(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"step time: measured vs simulated, {res['workers']} workers + "
                    f"{res['servers']} server at {res['rate']}, {res['model']}/{res['scale']} "
                    f"({res['gradient_bytes'] / MiB:.1f} MiB, {res['tensors']} tensors)")
    for col in ("config", "set", "measured", "sim default", "err", "sim calibrated", "err"):
        t.add_column(col, justify="left" if col in ("config", "set") else "right")
    for r in res["rows"]:
        t.add_row(r["label"], r["set"], f"{r['median_s']:.3f} s", f"{r['predicted_default_s']:.3f} s",
                  f"{r['error_default']:+.0%}", f"{r['predicted_calibrated_s']:.3f} s",
                  f"{r['error_calibrated']:+.0%}")
    Console(width=120).print(t)
    s = res["summary"]
    print(f"B (both ways at once, best) = {res['B'] / 1e6:.2f} MB/s; calibrated constants: "
          f"{res['calibrated']}")
    d, c = s["default"], s["calibrated"]
    for name, v in (("defaults, all-reduce", d["allreduce"]), ("defaults, push/pull", d["pushpull"]),
                    ("calibrated, fit set", c["fit"]), ("calibrated, held out", c["held_out"]),
                    ("  all-reduce held out", c["allreduce_held_out"]),
                    ("  push/pull held out", c["pushpull_held_out"])):
        print(f"  {name:24s} mean |err| {v['mean_abs']:.1%}, max {v['max_abs']:.1%}, "
              f"within 15%: {v['within_15pct']:.0%}")


def markdown(res: dict) -> str:
    s = res["summary"]
    lines = [
        "## Simulator calibration (issue 9)",
        "",
        f"`{res['command']}` on this 2-core machine ({res['time']}, load average "
        f"{res['machine']['load_avg'][0]:.1f}): {res['workers']} workers + {res['servers']} "
        f"server, one emulated host each at {res['rate']}; the runtime (gloo) on "
        f"{res['model']}'s {res['tensors']} gradient tensors at 1/{res['scale']} of their size "
        f"({res['gradient_bytes'] / MiB:.1f} MiB); step = backward + wait, slowest worker, "
        f"median of {res['repeats']}. The simulator gets the measured B "
        f"({res['B'] / 1e6:.2f} MB/s both ways at once) as its NIC rate.",
        "",
        "| config | set | measured | sim (defaults) | err | sim (calibrated) | err |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in res["rows"]:
        lines.append(f"| {r['label']} | {r['set']} | {r['median_s']:.3f} s | "
                     f"{r['predicted_default_s']:.3f} s | {r['error_default']:+.0%} | "
                     f"{r['predicted_calibrated_s']:.3f} s | {r['error_calibrated']:+.0%} |")
    d, c = s["default"], s["calibrated"]

    def line(v: dict) -> str:
        return f"{v['mean_abs']:.0%} (max {v['max_abs']:.0%}, {v['within_15pct']:.0%} within 15%)"

    lines += [
        "",
        "| mean \\|error\\| | all-reduce | push/pull |",
        "| --- | --- | --- |",
        f"| defaults, all configurations | {line(d['allreduce'])} | {line(d['pushpull'])} |",
        f"| calibrated, held-out half | {line(c['allreduce_held_out'])} | "
        f"{line(c['pushpull_held_out'])} |",
        "",
        "Fitted constants (fit half, grid search, mean |relative error|): "
        + ", ".join(f"`{k}={v}`" for k, v in res["calibrated"].items()) + " (`pipeline_depth` "
        "is the runtime's `SEND_DEPTH`, not fitted). The simulator schedules the runtime's "
        "own chunks, streams and Summation Service owners (`autotune/runtime/data/plan.py`). "
        "Push/pull is modelled as the runtime runs it: a stream keeps `pipeline_depth` "
        "pushes on their way out, each Summation Service is store-and-forward per chunk (it "
        "sends a sum back once every part is in), and at one owner the chunks of a send "
        "window share its link evenly across streams and in order within a stream (one gloo "
        "pair per stream), so a chunk's pull overlaps the next push on its stream "
        "(docs/simulator.md, How an iteration is charged).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--rate", default="200mbit", help="NIC rate each way (default 200mbit)")
    ap.add_argument("--model", default="resnet50", help="zoo model whose gradient set is used")
    ap.add_argument("--scale", type=int, default=6, help="divide every gradient by this")
    ap.add_argument("--repeats", type=int, default=5, help="timed iterations per configuration")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations per configuration")
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--json", type=Path, default=RESULTS / "sim_calibration.json")
    ap.add_argument("--results-md", type=Path, default=None,
                    help="append the table as a section to this markdown file")
    ap.add_argument("--refit", "--reevaluate", type=Path, nargs="?", default=None,
                    const=RESULTS / "sim_calibration.json", metavar="JSON",
                    help="re-evaluate the simulator (defaults and fit) on the measurements "
                         "saved in JSON (default: benchmarks/results/sim_calibration.json) "
                         "instead of measuring")
    ap.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.job:
        rank_main(a)
        return
    if a.refit is None:
        from autotune.emulate import unavailable_reason

        reason = unavailable_reason()
        if reason:
            sys.exit(f"sim_calibration: {reason}")
        raw = measure(a)
    else:
        raw = json.loads(a.refit.read_text())
    res = analyse(raw)
    print_table(res)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(res, indent=2))
    print(f"wrote {a.json}")
    if a.results_md is not None:
        with open(a.results_md, "a") as f:
            f.write("\n" + markdown(res))
        print(f"appended a section to {a.results_md}")


if __name__ == "__main__":
    main()
