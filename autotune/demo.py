"""``make demo``: what autotune is for, shown in a few minutes on this one machine.

    python -m autotune.demo            # make demo runs this (root: the emulated cluster)

Where the emulated cluster can run (root and network namespaces,
:func:`autotune.emulate.unavailable_reason` is None), it builds 4 worker hosts + 4 server
hosts with slow NICs (300mbit each way) and trains, on the same hosts and links, a
communication-bound job: ResNet-50's 161 gradient tensors at half width (26 MiB, real
shapes from :mod:`autotune.zoo`) with emulated compute (a forward and a backward that
sleep, the backward yielding gradients in ready order; :mod:`autotune.workload`):

1. PyTorch DDP (gloo, its default 25 MB buckets), timed over a few iterations;
2. ``autotune.session`` with the 4 server hosts available, so it may choose push/pull
   with servers (BytePS's Summation Service): it tunes for ``--budget`` iterations,
   recording to ``./autotune.db`` (``autotune db runs`` shows the run), then trains on
   with the configuration it kept.

It ends with one table: DDP, the session's default configuration (as the tuner measured
it), the configuration it kept (as training ran under it after tuning: the tuner's own
score of the configuration it picks as best is the highest of several noisy ones, so it
flatters; the line under the table gives it), and the analytic optimum (BytePS's formula
at the measured bandwidth), each in it/s with its spread (mean ± standard deviation over
iterations), and the speed-up over DDP (:mod:`autotune.speedup`: refused where a side
has fewer than 4 iterations);
the numbers go to ``--json`` too. Without the emulator it says why and trains a small GPT
under ``autotune launch`` on loopback instead (where the CPU, not the network, is the
bottleneck, so expect little speed-up).

Each rank of the emulated job runs this module too (``--job ddp`` / ``--job session``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from autotune.speedup import Speedup, measure, measure_times
from autotune.store.location import shown

MARK = "DEMO "  # a rank's result line: MARK + JSON
WARMUP = 3  # the session's warm-up iterations (its default)
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_transformer.py"
LOOPBACK = ["--steps", "200", "--budget", "100"]


# ---- rank programs ----------------------------------------------------------------------

def _model(a: argparse.Namespace, rank: int):
    from autotune.workload import model_shapes, sleepy_model

    return sleepy_model(model_shapes(a.model), a.fwd_ms / 1e3, a.bwd_ms / 1e3, rank + 1)


def ddp_job(a: argparse.Namespace) -> None:
    """DDP, gloo, default buckets: per-iteration time of the slowest worker."""
    import torch
    import torch.distributed as dist

    from autotune.workload import check_average, time_ddp

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    model = _model(a, rank)
    times = time_ddp(model, a.ddp_warmup, a.ddp_iterations)
    check_average(model, (n + 1) / 2, "DDP")
    if rank == 0:
        print(MARK + json.dumps({"times_s": times}), flush=True)
    dist.destroy_process_group()


def session_job(a: argparse.Namespace) -> None:
    """autotune.session: warm-up, ``budget`` tuning iterations, then ``after`` more under
    the kept configuration."""
    import torch

    import autotune
    from autotune.workload import check_average

    torch.set_num_threads(1)
    if os.environ.get("AUTOTUNE_ROLE") == "server":
        with autotune.session(torch.nn.Linear(1, 1), store=False):  # serves, then exits
            pass
        return
    rank, n = int(os.environ["RANK"]), a.workers
    model = _model(a, rank)
    x = torch.ones(1)
    kept_times, tuning_s = [], 0.0
    # spend=None: the demo shows what `budget` trial iterations find, then times it
    # (as `autotune tune` does); a training job's search is held to its share of the
    # job's time instead (docs/tuner.md, "What tuning may cost")
    with autotune.session(model, budget=a.budget, db=a.db, job=f"demo-{a.model}",
                          seed=a.seed, warmup=WARMUP, verbose=rank == 0,
                          timeout=a.timeout, spend=None) as session:
        for i in range(WARMUP + a.budget + a.after):
            tuning = session.tuning
            t0 = time.perf_counter()
            model.zero_grad(set_to_none=False)
            model(x).backward()
            session.step()
            dt = time.perf_counter() - t0
            if tuning:
                tuning_s += dt
            else:
                kept_times.append(dt)
            if i % 5 == 4:  # the exact average, outside the timed window
                check_average(model, (n + 1) / 2, f"session under {session.config}")
    if rank == 0:
        history = [{"index": r.index, "technique": r.technique, "config": r.config,
                    "score": r.score, "error": r.error} for r in session.history]
        print(MARK + json.dumps({
            "best": session.best, "best_score": session.best_score,
            "best_spread": session.best_spread, "default": session.space.default(),
            "default_score": session.default_score, "default_spread": session.default_spread,
            "best_iterations": (session.ledger.measured(session.best) or (0, 0, 0))[2],
            "default_iterations": (session.ledger.measured(session.space.default()) or (0, 0, 0))[2],
            "unit": session.unit, "history": history, "tuning_s": tuning_s,
            # rank 0's own times after tuning; the first pays the switch
            "kept_times_s": kept_times[1:]}), flush=True)


# ---- the driver -------------------------------------------------------------------------

def summarize(a: argparse.Namespace, link: dict, ddp: dict, sess: dict,
              wall_s: float) -> dict:
    """The table's numbers (it/s, mean ± std) from what the jobs printed."""
    from autotune.workload import gradient_bytes, model_shapes, optimum_s

    shapes = model_shapes(a.model)
    M = gradient_bytes(shapes)
    n, k = a.workers, a.servers
    ddp_m, ddp_s, ddp_n = measure_times(ddp["times_s"])
    B_samples = [link["nbytes"] / t for t in link["samples_s"]]
    opt_m, opt_s, _ = measure([1 / optimum_s(n, k, M, b, a.fwd_ms / 1e3) for b in B_samples])
    # the kept configuration as training ran under it after tuning (rank 0's iterations,
    # each ending in the session's collectives, so every worker's are the same length)
    kept = sess.get("kept_times_s") or []
    kept_m, kept_s, kept_n = measure_times(kept) if kept else (None, None, 0)
    rows = [
        {"name": "DDP", "it_per_s": ddp_m, "spread": ddp_s, "iterations": ddp_n,
         "config": None, "how": "gloo, 25 MB buckets"},
        {"name": "autotune, default", "it_per_s": sess["default_score"],
         "spread": sess["default_spread"], "iterations": sess.get("default_iterations"),
         "config": sess["default"]},
        {"name": "autotune, kept", "it_per_s": kept_m, "spread": kept_s,
         "iterations": kept_n, "config": sess["best"]},
        # a formula, not a measurement: its speed-up is marked like a simulated one
        {"name": "analytic optimum", "it_per_s": opt_m, "spread": opt_s, "iterations": None,
         "config": None, "how": f"BytePS formula, k={k}", "predicted": True},
    ]
    for r in rows:
        if r["config"]:
            r["how"] = short(r["config"])
    for r in rows:
        r["speedup_vs_ddp"] = None if r["name"] == "DDP" else Speedup.of(
            (r["it_per_s"], r["spread"], r["iterations"]), (ddp_m, ddp_s, ddp_n),
            simulated=r.get("predicted", False)).as_json()
    return {
        "demo": "emulated", "model": a.model, "tensors": len(shapes), "gradient_bytes": M,
        "workers": n, "servers": k, "rate": a.rate, "fwd_ms": a.fwd_ms, "bwd_ms": a.bwd_ms,
        "budget": a.budget, "B_bytes_per_s": statistics.median(B_samples),
        "B_samples_bytes_per_s": B_samples, "unit": sess["unit"], "rows": rows,
        "speedup_kept_vs_ddp": rows[2]["speedup_vs_ddp"],  # Speedup.as_json()
        # the session's own score of the kept configuration: its trials' iterations and
        # those after tuning (TrialSchedule, locked)
        "kept_by_session": {"it_per_s": sess["best_score"], "spread": sess["best_spread"],
                              "iterations": sess.get("best_iterations")},
        "tuning_s": sess["tuning_s"], "trials": sess["history"], "db": shown(a.db),
        "wall_s": wall_s,
    }


def short(config: dict) -> str:
    """``pushpull k=4, 1 x 64 KiB`` (k servers, streams x chunk size; intra and codec when
    not the defaults): the table's form of a configuration."""
    from autotune.units import fmt_bytes

    parts = [config.get("transport", "allreduce")]
    if parts[0] == "pushpull":
        parts[0] += f" k={config.get('servers', 0)}"
    s = config.get("streams", 1)
    parts.append(f"{s} x {fmt_bytes(config.get('chunk_bytes', 0))}")
    if config.get("intra", "flat") != "flat":
        parts.append(f"intra {config['intra']}")
    if config.get("compression", "none") != "none":
        parts.append(str(config["compression"]))
    return ", ".join(parts)


def _shown(row: dict, res: dict) -> str:
    """A row's speed-up over DDP as the table shows it (:meth:`Speedup.shown`, no counts:
    the caption has them)."""
    ddp = next(r for r in res["rows"] if r["name"] == "DDP")
    return Speedup.of((row["it_per_s"], row["spread"], row["iterations"]),
                      (ddp["it_per_s"], ddp["spread"], ddp["iterations"]),
                      simulated=row.get("predicted", False)).shown(counts=False)


def _counts(res: dict) -> str:
    """``"DDP 8, default 12, kept 12"``: each measured row's iterations."""
    return ", ".join(f"{r['name'].removeprefix('autotune, ')} "
                     f"{'?' if r['iterations'] is None else r['iterations']}"
                     for r in res["rows"] if not r.get("predicted"))


def table(res: dict):
    """The one table the demo ends with (rich)."""
    from rich import box
    from rich.table import Table

    from autotune.units import fmt_bytes

    t = Table(title=f"{res['model']} ({fmt_bytes(res['gradient_bytes'])} of gradients, "
                    f"{res['tensors']} tensors) on {res['workers']} workers + "
                    f"{res['servers']} servers at {res['rate']}",
              caption=f"it/s: mean ± std over iterations ({_counts(res)}); a speed-up "
                      f"needs 4 a side. configuration: transport (k "
                      f"servers), streams x chunk. B = {res['B_bytes_per_s'] / 1e6:.1f} MB/s "
                      f"measured; compute {res['fwd_ms']:g} + {res['bwd_ms']:g} ms/iteration",
              caption_justify="left",
              box=box.SIMPLE_HEAD)
    t.add_column("what")
    t.add_column("it/s", justify="right")
    t.add_column("vs DDP", justify="right")
    t.add_column("configuration")
    for r in res["rows"]:
        score = f"{r['it_per_s']:.3f} ± {r['spread'] or 0:.3f}" if r["it_per_s"] else "-"
        sp = r["speedup_vs_ddp"]
        speed = "reference" if sp is None else (_shown(r, res) or "-")
        style = "bold green" if r["name"] == "autotune, kept" else None
        t.add_row(r["name"], score, speed, r["how"], style=style)
    return t


def emulated(a: argparse.Namespace) -> dict:
    from rich.console import Console

    from autotune import forked, progress

    # torch imported here first, once: the hosts' ranks are forked from this process
    # (while it has one thread: no spinner runs during a launch)
    forked.preload()
    from autotune.emulate import Cluster, measure_bandwidth
    from autotune.workload import gradient_bytes, model_shapes
    from autotune.units import fmt_bytes

    con = Console(stderr=True, highlight=False)
    shapes = model_shapes(a.model)
    t0 = time.monotonic()
    me = [sys.executable, "-m", "autotune.demo"]
    common = ["--model", a.model, "--fwd-ms", str(a.fwd_ms), "--bwd-ms", str(a.bwd_ms),
              "--workers", str(a.workers), "--timeout", str(a.timeout)]
    con.print(f"[bold]autotune demo[/]: {a.workers} worker hosts + {a.servers} server hosts, "
              f"every NIC {a.rate} each way (network namespaces + tc on this machine); "
              f"{a.model}: {len(shapes)} gradient tensors, "
              f"{fmt_bytes(gradient_bytes(shapes))}, compute {a.fwd_ms:g} + {a.bwd_ms:g} ms "
              "per iteration (emulated)")
    echo = (lambda line: con.print(line.rstrip("\n"), markup=False)) if a.verbose else None
    with Cluster(hosts=a.workers + a.servers, rate=a.rate) as c:
        con.print("measuring the link (B) ...")
        m = measure_bandwidth(c, 0, 1, nbytes=16 << 20, repeats=a.link_repeats,
                              timeout_s=a.timeout)
        link = m.to_dict()
        con.print(f"link: {m.bytes_per_s / 1e6:.1f} MB/s host to host "
                  f"({m.ratio:.0%} of the nominal rate)")
        con.print(f"DDP (gloo, 25 MB buckets): {a.ddp_warmup} + {a.ddp_iterations} "
                  "iterations on the worker hosts ...")
        job = c.launch(me + ["--job", "ddp", "--ddp-iterations", str(a.ddp_iterations),
                             "--ddp-warmup", str(a.ddp_warmup)] + common,
                       workers=a.workers, timeout_s=a.timeout, echo=echo).check()
        ddp = job.last_json(MARK)
        ddp_m, ddp_s, _ = measure_times(ddp["times_s"])
        con.print(f"DDP: {ddp_m:.3f} ± {ddp_s:.3f} it/s")
        con.print(f"autotune.session with {a.servers} server hosts available: "
                  f"{WARMUP} warm-up + {a.budget} tuning + {a.after} iterations "
                  f"(recorded in {shown(a.db)})")
        term = progress.Terminal(sys.stderr)

        def show(line: str) -> None:
            if progress.parse(line) is not None:
                term.feed(line)
            elif echo is not None:
                term.feed(line)

        try:
            # the store reaches the ranks in their environment, not on a command line that
            # `ps` shows (a URL may hold a password)
            job = c.launch(me + ["--job", "session", "--budget", str(a.budget), "--after",
                                 str(a.after), "--seed", str(a.seed)] + common,
                           workers=a.workers, servers=a.servers, timeout_s=a.timeout,
                           echo=show, env={progress.ENV: "events", "AUTOTUNE_DB": a.db}).check()
        finally:
            term.close()
        sess = job.last_json(MARK)
    return summarize(a, link, ddp, sess, time.monotonic() - t0)


def loopback(reason: str) -> int:
    from rich.console import Console

    from autotune.launch import run_job

    con = Console(stderr=True, highlight=False)
    con.print(f"[yellow]The emulated cluster is not available here[/]: {reason}")
    con.print("Running the loopback demo instead: a small GPT under autotune.session() with "
              "4 workers + 2 servers on this machine (`autotune launch --workers 4 --servers 2 "
              f"--machines 2 examples/train_transformer.py {' '.join(LOOPBACK)}`). On "
              "loopback the CPU, not the network, is the bottleneck: expect little speed-up. "
              "Run `sudo make demo` to see a communication-bound job.")
    return run_job([str(EXAMPLE), *LOOPBACK], workers=4, servers=2, machines=2)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m autotune.demo",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50/32",
                    help="zoo model[/base width] whose gradient shapes are used")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--rate", default="300mbit", help="every NIC's rate, each way")
    ap.add_argument("--fwd-ms", type=float, default=40.0, help="emulated forward time")
    ap.add_argument("--bwd-ms", type=float, default=120.0, help="emulated backward time")
    ap.add_argument("--budget", type=int, default=40, help="the session's tuning iterations")
    ap.add_argument("--after", type=int, default=10,
                    help="iterations after tuning, under the kept configuration")
    ap.add_argument("--ddp-iterations", type=int, default=8)
    ap.add_argument("--ddp-warmup", type=int, default=2)
    ap.add_argument("--link-repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--db", default=None, help="results store: a path or a postgresql:// URL "
                    "(default: $AUTOTUNE_DB or ./autotune.db)")
    ap.add_argument("--json", type=Path, default=Path("autotune-demo.json"),
                    help="where the table's numbers go")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per job")
    ap.add_argument("--loopback", action="store_true",
                    help="run the loopback demo even where the emulator is available")
    ap.add_argument("--verbose", action="store_true", help="show every rank's output")
    ap.add_argument("--job", choices=("ddp", "session"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.job == "ddp":
        ddp_job(a)
        return
    if a.job == "session":
        session_job(a)
        return

    from autotune.emulate import unavailable_reason
    from autotune.store.location import default_path, is_url

    reason = "asked for --loopback" if a.loopback else unavailable_reason()
    if reason is not None:
        sys.exit(loopback(reason))
    where = a.db or str(default_path())
    a.db = where if is_url(where) else str(Path(where).resolve())
    res = emulated(a)
    a.json.write_text(json.dumps(res, indent=2))
    from rich.console import Console

    con = Console(highlight=False)
    con.print(table(res))
    est = res["kept_by_session"]
    more = (f"; the session scored the kept configuration at {est['it_per_s']:.3f} ± "
            f"{est['spread'] or 0:.3f} it/s over {est['iterations'] or '?'} iterations "
            "(its trials and training after them)" if est["it_per_s"] else "")
    con.print(f"Tuning: {len(res['trials'])} trials in {res['tuning_s']:.0f} s{more}. "
              f"Numbers in {a.json}; the run is in {shown(a.db)} (`autotune db runs`, "
              "`autotune report latest`). Whole demo: "
              f"{res['wall_s']:.0f} s.")


if __name__ == "__main__":
    main()
