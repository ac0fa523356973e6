"""Time to accuracy: real models trained to a validation-loss target on the emulated cluster (root only).

Two real jobs, real data already on every machine (no downloads), real compute, trained
data-parallel by ``--workers`` (2) emulated worker hosts, one CPU thread each:

* ``gpt``: a small GPT-2 from the zoo (:class:`autotune.zoo.text.GPT2`: 2 layers, d = 128,
  4 heads, byte vocabulary 256, context 64; 438 K parameters, 1.75 MB of gradients)
  learning the bytes of the Python standard library's own ``.py`` files (the top level of
  ``os.path.dirname(os.__file__)``, sorted; every 10th file held out for validation),
  GPT-2's initialisation, AdamW (lr 3e-3), 32 windows per worker and step;
* ``cnn``: a small CNN (3 conv layers, 2 linear, He initialisation; 227 K parameters,
  0.9 MB of gradients) on scikit-learn's bundled handwritten digits (``examples/digits.py``:
  1,797 8x8 scans; a fixed 297 held out, the rest split between the workers), SGD with
  momentum 0.9 (lr 0.01), 32 images per worker and step.

Each job trains for a fixed wall time (``MODELS``: 45 s for the GPT, 30 s for the CNN;
``--quick``: 15 s and 10 s, one run, budget 12) under each of ``--variants``:

* ``ddp``: plain PyTorch DDP (gloo, default buckets);
* ``lossless``: ``autotune.session(model, budget=...)`` (lossless configurations only);
* ``goodput``: ``allow_lossy=True, lossy_score="goodput"`` (codecs, scored by goodput);
* ``throughput``: ``allow_lossy=True, lossy_score="throughput"`` (codecs, scored by
  speed alone: the old behaviour).

The clock starts when both ranks are at the start line, before DDP wraps the model or the
session opens, so the session's start and its whole tuning budget (``--budget``
iterations; part of the run, as a user sees it) are inside the measured wall time. Rank 0
keeps a copy of the parameters every 1/40 of the run (a copy, about a millisecond;
nothing is evaluated inside the timed loop) and evaluates them all after training on the
held-out data (GPT: 64 fixed windows of 64 bytes; CNN: the 297 held-out digits). The
ranks agree to stop with one 4-byte broadcast per step on a side gloo group (the same in
every variant). From the curve (wall time, validation loss):

* time to target: the first wall time whose validation loss is <= the model's target
  (``MODELS``, or ``--targets``; chosen so that DDP reaches it in about 2/3 of the run;
  not reached: infinite, "never");
* validation loss at equal wall time: the loss of the last copy kept at or before the
  run's length, the time every variant trained for.

The link (``--rate``; default per model, 50 mbit) is where communication matters: DDP's
gradient all-reduce takes about twice the GPT's compute and several times the CNN's (the
numbers are at ``MODELS``). Each variant runs ``--runs`` times (interleaved: run 1 of
every variant, then run 2, ...; run i uses seed ``--seed`` + i for every variant, so the
same data order and initial weights); each job costs its run plus ~15 s to start the
ranks and evaluate; the table gives medians with their min-max spread, ratios to
DDP and to autotune lossless, and the configuration each session kept. JSON and a PNG
of loss vs wall time go to benchmarks/results/tta/:

    sudo .venv/bin/python benchmarks/tta_bench.py                   # ~21 min: 2 models x 4 variants x 3 runs
    sudo .venv/bin/python benchmarks/tta_bench.py --quick           # ~3.5 min: 1 run, 15 s / 10 s runs
    sudo .venv/bin/python benchmarks/tta_bench.py --quick --variants ddp,lossless --runs 1
    sudo .venv/bin/python benchmarks/tta_bench.py --models gpt --rate 30mbit --runs 5

Each rank is this file again (``--job train``); a rank that fails stops the benchmark
with its name and the tail of its output; every wait is bounded (``--rank-timeout`` for
each collective and the session's waits, the run's duration plus a margin for the job).
"""

from __future__ import annotations

import argparse
import glob
import inspect
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import (RESULTS, add_cluster_args, describe_link, emit,  # noqa: E402
                      launch_json, machine, measure_B, median, pyplot, report,
                      require_emulator, save_figure)

OUT_DIR = RESULTS / "tta"
VARIANTS = ("ddp", "lossless", "goodput", "throughput")
LABELS = {"ddp": "DDP", "lossless": "autotune lossless",
          "goodput": "autotune lossy (goodput)", "throughput": "autotune lossy (throughput)"}
COLORS = {"ddp": "#555555", "lossless": "#4c72b0", "goodput": "#55a868",
          "throughput": "#c44e52"}
SNAPSHOTS = 40  # parameter copies per run (one every DURATION / 40 s)


@dataclass(frozen=True)
class ModelSpec:
    """One job of the benchmark: its link, its run length and its target, full and quick."""

    rate: str          # the default --rate: DDP's all-reduce >= the compute at this rate
    duration: float    # seconds of training per variant and run
    target: float      # validation loss: DDP reaches it in about 2/3 of ``duration``
    quick_duration: float
    quick_target: float
    batch: int         # per worker and step


# Rates: 2 workers, so DDP's ring all-reduce sends about the gradient bytes M once per
# step each way. GPT: M = 1.75 MB, compute ~0.14 s a step (1 thread, idle machine): at
# 50 mbit (~6 MB/s of payload) the all-reduce takes ~0.3 s, about twice the compute; DDP
# ran ~0.5 s a step on the emulator. CNN: M = 0.9 MB, compute ~0.02 s: at 50 mbit
# ~0.15 s, several times the compute (its compute is small at any sensible rate); DDP ran
# ~0.18 s a step. Either job is then bound by the link, where a configuration can win.
# Targets: the validation loss of the DDP curve at about 2/3 of the run, from the curves
# on this 2-core machine (GPT: ~0.5 s/step, so ~60 of ~90 steps: 2.88, falling ~0.05 per
# 15 steps there; quick: ~3.15, where a 15 s run's curve flattens; CNN: ~0.18 s/step,
# ~110 of ~165 steps: 0.10; quick, ~37 of ~55 steps: 0.35). Another machine, another
# speed: pass --targets.
MODELS = {
    "gpt": ModelSpec(rate="50mbit", duration=45.0, target=2.88, quick_duration=15.0,
                     quick_target=3.15, batch=32),
    "cnn": ModelSpec(rate="50mbit", duration=30.0, target=0.10, quick_duration=10.0,
                     quick_target=0.35, batch=32),
}


# ---- data and models (rank side) -------------------------------------------------------

def stdlib_corpus() -> tuple[bytes, bytes, list[str]]:
    """The Python standard library's top-level ``.py`` files, sorted by name: every 10th
    (index 9, 19, ...) is the validation text, the rest the training text."""
    root = os.path.dirname(os.__file__)
    files = sorted(glob.glob(os.path.join(root, "*.py")))
    if len(files) < 20:
        raise RuntimeError(f"only {len(files)} .py files under {root}: no corpus")
    train, val = [], []
    for i, f in enumerate(files):
        with open(f, "rb") as fh:
            (val if i % 10 == 9 else train).append(fh.read())
    return b"\n".join(train), b"\n".join(val), [os.path.basename(f) for f in files]


class GPTTask:
    """Next-byte prediction on the standard library's sources."""

    ctx = 64
    val_windows = 64

    def __init__(self, seed: int, rank: int, world: int, batch: int) -> None:
        import torch

        from autotune.zoo.text import GPT2

        train, val, _ = stdlib_corpus()
        self.train = torch.frombuffer(bytearray(train), dtype=torch.uint8).long()
        v = torch.frombuffer(bytearray(val), dtype=torch.uint8).long()
        starts = torch.linspace(0, len(v) - self.ctx - 2, self.val_windows).long()
        self.val = torch.stack([v[s:s + self.ctx + 1] for s in starts.tolist()])
        self.batch = batch
        self.gen = torch.Generator().manual_seed(seed * 1000 + rank + 1)  # each rank its own
        torch.manual_seed(seed)  # the same initial weights on every rank and variant
        self.model = GPT2(layers=2, hidden=128, heads=4, vocab=256, positions=self.ctx)
        for m in self.model.modules():  # GPT-2's initialisation (the zoo builds for shapes)
            if isinstance(m, torch.nn.Embedding):
                torch.nn.init.normal_(m.weight, std=0.02)

    def optimizer(self) -> Any:
        import torch

        return torch.optim.AdamW(self.model.parameters(), lr=3e-3, betas=(0.9, 0.95),
                                 weight_decay=0.01)

    def next_batch(self) -> tuple[Any, Any]:
        import torch

        s = torch.randint(len(self.train) - self.ctx - 1, (self.batch,), generator=self.gen)
        seq = torch.stack([self.train[i:i + self.ctx + 1] for i in s.tolist()])
        return seq[:, :-1], seq[:, 1:]

    @staticmethod
    def loss(net: Any, x: Any, y: Any) -> Any:
        from torch.nn import functional as F

        logits = net(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def val_loss(self) -> float:
        import torch

        with torch.no_grad():
            return float(self.loss(self.model, self.val[:, :-1], self.val[:, 1:]))


class CNNTask:
    """scikit-learn's digits, a small CNN."""

    held_out = 297

    def __init__(self, seed: int, rank: int, world: int, batch: int) -> None:
        import torch
        from torch import nn

        sys.path.insert(0, str(HERE.parent / "examples"))
        from digits import digits

        data = digits()
        x, y = data.tensors
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
        x = x[order].view(-1, 1, 8, 8)
        y = y[order]
        self.val = (x[:self.held_out], y[:self.held_out])
        self.x = x[self.held_out:][rank::world]  # this worker's shard
        self.y = y[self.held_out:][rank::world]
        self.batch = batch
        self.gen = torch.Generator().manual_seed(seed * 1000 + rank + 1)
        self.perm = torch.randperm(len(self.y), generator=self.gen)
        self.pos = 0
        torch.manual_seed(seed)
        w = 32
        self.model = nn.Sequential(
            nn.Conv2d(1, w, 3, padding=1), nn.ReLU(),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * w, 4 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(4 * w * 4, 256), nn.ReLU(), nn.Linear(256, 10))
        for m in self.model.modules():  # He et al. 2015, for the ReLUs
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def optimizer(self) -> Any:
        import torch

        return torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def next_batch(self) -> tuple[Any, Any]:
        import torch

        if self.pos + self.batch > len(self.perm):  # a new epoch of this shard
            self.perm = torch.randperm(len(self.y), generator=self.gen)
            self.pos = 0
        idx = self.perm[self.pos:self.pos + self.batch]
        self.pos += self.batch
        return self.x[idx], self.y[idx]

    @staticmethod
    def loss(net: Any, x: Any, y: Any) -> Any:
        from torch.nn import functional as F

        return F.cross_entropy(net(x), y)

    def val_loss(self) -> float:
        import torch

        with torch.no_grad():
            return float(self.loss(self.model, *self.val))


TASKS = {"gpt": GPTTask, "cnn": CNNTask}


def session_kwargs(a: argparse.Namespace, batch: int) -> dict[str, Any]:
    """What ``autotune.session`` gets in each autotune variant: only the lossy ones pass
    ``lossy_score``."""
    kw: dict[str, Any] = dict(budget=a.budget, samples_per_step=batch, seed=a.seed,
                              store=False, verbose=a.verbose, timeout=a.rank_timeout)
    if a.variant in ("goodput", "throughput"):
        kw.update(allow_lossy=True, lossy_score=a.variant)
    return kw


def trial_row(r: Any) -> dict[str, Any]:
    keys = ("index", "technique", "config", "iterations", "score", "error", "throughput",
            "efficiency")
    return {k: getattr(r, k) for k in keys if hasattr(r, k)}


def train_main(a: argparse.Namespace) -> None:
    """One rank: train ``--model`` under ``--variant`` for ``--duration`` seconds; rank 0
    keeps parameter copies, evaluates them afterwards and emits the curve."""
    import contextlib
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = timedelta(seconds=a.rank_timeout)
    dist.init_process_group("gloo", timeout=timeout)
    side = dist.new_group(backend="gloo", timeout=timeout)  # the stop flag, nothing else
    task = TASKS[a.model](a.seed, rank, world, a.batch)
    model = task.model
    opt = task.optimizer()

    def snapshot() -> dict[str, Any]:
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    snaps: list[tuple[float, int, dict]] = [(0.0, 0, snapshot())] if rank == 0 else []
    every = a.duration / SNAPSHOTS
    flag = torch.zeros(1, dtype=torch.int32)
    switches: list[tuple[float, int, dict]] = []
    tuning_end = first_step = None
    dist.barrier(group=side)  # both ranks at the start line
    t0, ready_unix = time.perf_counter(), time.time()
    if a.variant == "ddp":
        net, ctx = DDP(model), contextlib.nullcontext()
    else:
        import autotune

        net, ctx = model, autotune.session(model, **session_kwargs(a, a.batch))
    step, next_snap = 0, every
    with ctx as session:
        first_step = time.perf_counter() - t0  # DDP's wrap, the session's start
        while True:
            x, y = task.next_batch()
            loss = task.loss(net, x, y)
            loss.backward()
            if session is not None:
                session.step(loss=loss)
            opt.step()
            opt.zero_grad(set_to_none=False)
            step += 1
            if rank == 0:
                now = time.perf_counter() - t0
                if now >= next_snap or now >= a.duration:
                    snaps.append((now, step, snapshot()))
                    next_snap = now + every
                if session is not None:
                    if session.tuning:
                        tuning_end = None
                    elif tuning_end is None:
                        tuning_end = now
                    if not switches or switches[-1][2] != session.config:
                        switches.append((now, step, dict(session.config)))
                flag.fill_(int(now >= a.duration))
            dist.broadcast(flag, 0, group=side)
            if flag.item():
                break
        wall = time.perf_counter() - t0
        out: dict[str, Any] = {}
        if session is not None and rank == 0:
            out = {"best": session.best, "history": [trial_row(r) for r in session.history],
                   "tuning_iterations": session.tuning_iterations,
                   "tuning_end_s": tuning_end, "switches": switches}
    if rank != 0:
        dist.destroy_process_group()
        return
    model.eval()
    curve = []
    ended = time.time()
    for t, s, state in snaps:  # after training: nothing of this is on the clock
        model.load_state_dict(state)
        curve.append((t, s, task.val_loss()))
    emit({"model": a.model, "variant": a.variant, "seed": a.seed, "steps": step,
          "wall_s": wall, "first_step_s": first_step, "curve": curve,
          "ready_unix": ready_unix, "eval_s": time.time() - ended, **out})
    dist.destroy_process_group()


# ---- driver ---------------------------------------------------------------------------

def time_to_target(curve: list, target: float) -> float:
    """The first wall time at which the validation loss is <= ``target`` (inf: never)."""
    return next((t for t, _, loss in curve if loss <= target), math.inf)


def loss_at(curve: list, t_eq: float) -> float:
    """The validation loss of the last copy kept at or before ``t_eq``."""
    return [loss for t, _, loss in curve if t <= t_eq][-1]


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": median(xs), "min": min(xs), "max": max(xs)}


def launch_run(c: Any, a: argparse.Namespace, model: str, variant: str, seed: int,
               duration: float) -> dict:
    spec = MODELS[model]
    argv = [sys.executable, os.path.abspath(__file__), "--job", "train", "--model", model,
            "--variant", variant, "--seed", str(seed), "--duration", str(duration),
            "--batch", str(spec.batch), "--budget", str(a.budget),
            "--rank-timeout", str(a.rank_timeout)]
    if a.verbose:
        argv.append("--verbose")
    return launch_json(c, argv, workers=a.workers, timeout_s=duration + a.rank_timeout + 120,
                       verbose=a.verbose, failed=f"tta_bench: {model}, {variant}, seed {seed}")


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
                    t = time.time()
                    with con.status(f"{model}: {LABELS[v]}, run {i + 1}/{a.runs} "
                                    f"({duration:g} s of training)"):
                        r = launch_run(c, a, model, v, a.seed + i, duration)
                    r["job_s"] = time.time() - t
                    r["startup_s"] = r.pop("ready_unix") - t  # launch to the start line
                    ttt = time_to_target(r["curve"], target)
                    con.print(f"{model} {LABELS[v]} run {i + 1}: {r['steps']} steps, "
                              f"time to {target:g}: "
                              + (f"{ttt:.1f} s" if math.isfinite(ttt) else "not reached")
                              + f", loss at {duration:g} s {loss_at(r['curve'], duration):.3f}"
                              + (f", kept {fmt(r['best'])}" if r.get("best") else ""))
                    runs[v].append(r)
        out[model] = summarize_model(model, rate, duration, target, link, runs)
    return {"benchmark": "tta_bench", "workers": a.workers, "flow_cap": a.flow_cap,
            "budget": a.budget, "runs": a.runs, "quick": a.quick,
            "variants": a.variant_list, "models": out, "wall_s": time.time() - started,
            "command": "benchmarks/tta_bench.py " + " ".join(sys.argv[1:]),
            "machine": machine()}


def summarize_model(model: str, rate: str, duration: float, target: float,
                    link: dict | None, runs: dict[str, list]) -> dict:
    rows = {}
    for v, rs in runs.items():
        ttt = [time_to_target(r["curve"], target) for r in rs]
        eq = [loss_at(r["curve"], duration) for r in rs]
        rows[v] = {"variant": v, "label": LABELS[v],
                   "time_to_target_s": spread(ttt), "reached": sum(map(math.isfinite, ttt)),
                   "loss_at_equal_time": spread(eq),
                   "steps": spread([r["steps"] for r in rs]),
                   "kept": [r.get("best") for r in rs], "runs": rs}
    for v, row in rows.items():
        m = row["time_to_target_s"]["median"]
        for ref in ("ddp", "lossless"):
            if ref in rows:  # > 1: faster to the target than the reference
                rm = rows[ref]["time_to_target_s"]["median"]
                row[f"vs_{ref}"] = (rm / m if math.isfinite(m) and math.isfinite(rm)
                                    else None)
    return {"model": model, "rate": rate, "duration_s": duration, "target": target,
            "equal_time_s": duration, "link": link, "spec": MODELS[model].__dict__,
            "variants": rows}


def fmt(cfg: dict | None) -> str:
    if not cfg:
        return ""
    from autotune.units import fmt_config

    return fmt_config(cfg)


def fmt_s(x: float) -> str:
    return f"{x:.1f}" if math.isfinite(x) else "never"


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
        for col in ("variant", "time to target s", "reached", "vs DDP", "vs lossless",
                    f"loss at {m['equal_time_s']:g} s", "steps", "kept configurations"):
            t.add_column(col, justify="left" if col in ("variant", "kept configurations")
                         else "right", overflow="fold")
        for v, row in m["variants"].items():
            tt, eq = row["time_to_target_s"], row["loss_at_equal_time"]
            t.add_row(row["label"],
                      f"{fmt_s(tt['median'])} ({fmt_s(tt['min'])}-{fmt_s(tt['max'])})",
                      f"{row['reached']}/{len(row['runs'])}",
                      f"{row['vs_ddp']:.2f}x" if row.get("vs_ddp") else "",
                      f"{row['vs_lossless']:.2f}x" if row.get("vs_lossless") else "",
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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt,cnn", help="of " + ",".join(MODELS))
    ap.add_argument("--variants", default=",".join(VARIANTS), help="of " + ",".join(VARIANTS))
    ap.add_argument("--runs", type=int, default=None, help="runs per variant (default 3; "
                    "--quick: 1)")
    ap.add_argument("--quick", action="store_true",
                    help="shorter runs (MODELS' quick_duration, quick_target), one run, "
                         "budget 12: ~3.5 min")
    ap.add_argument("--workers", type=int, default=2)
    add_cluster_args(ap)
    ap.set_defaults(rate=None)
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of training per run (default: per model)")
    ap.add_argument("--targets", default="",
                    help="validation-loss targets, e.g. gpt=2.7,cnn=0.15 (default: per model)")
    ap.add_argument("--budget", type=int, default=None,
                    help="the sessions' tuning iterations (default 30; --quick: 12)")
    ap.add_argument("--seed", type=int, default=0, help="run i uses seed + i")
    ap.add_argument("--rank-timeout", type=float, default=120.0,
                    help="seconds any collective wait of a rank may take")
    ap.add_argument("--verbose", action="store_true", help="echo every rank's output")
    ap.add_argument("--json", type=Path, default=OUT_DIR / "tta.json")
    ap.add_argument("--plot", type=Path, default=OUT_DIR / "tta.png")
    # rank side
    ap.add_argument("--job", choices=("train",), help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=tuple(MODELS), help=argparse.SUPPRESS)
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=32, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.budget is None:
        a.budget = 12 if a.quick else 30
    if a.job == "train":
        train_main(a)
        return
    a.runs = a.runs or (1 if a.quick else 3)
    a.model_list = [m.strip() for m in a.models.split(",") if m.strip()]
    a.variant_list = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = [m for m in a.model_list if m not in MODELS] + [
        v for v in a.variant_list if v not in VARIANTS]
    if bad or not a.model_list or not a.variant_list:
        ap.error(f"unknown or no models/variants: {bad}; models: {', '.join(MODELS)}; "
                 f"variants: {', '.join(VARIANTS)}")
    try:
        a.target_of = {k.strip(): float(v) for k, v in
                       (item.split("=") for item in a.targets.split(",") if item.strip())}
    except ValueError:
        ap.error(f"--targets is model=loss,..., got {a.targets!r}")
    if a.runs < 1 or a.workers < 2:
        ap.error("--runs >= 1 and --workers >= 2")
    if {"goodput", "throughput"} & set(a.variant_list):
        import autotune

        if "lossy_score" not in inspect.signature(autotune.session).parameters:
            sys.exit("tta_bench: this autotune.session() has no lossy_score keyword yet; "
                     "run --variants ddp,lossless")
    require_emulator("tta_bench")
    res = run(a)
    report(res, print_table, a.json, plot, a.plot)


if __name__ == "__main__":
    main()
