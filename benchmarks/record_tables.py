"""Record measured tabular benchmarks on the emulated cluster (root only).

For each job below, a seeded sample of the space a session of that job would search
(:meth:`SearchSpace.of` on the runtime's limits, as :func:`autotune.leader.tuners.
job_space` builds it) is run as a session runs it (DDP on the workers' group, the runtime
behind its comm hook, the default DDP's own all-reduce; tables before 2026-12-06 ran the
runtime directly), in the sample's (random) order: per configuration one switch iteration
(the vote and the rebuild, timed but not scored, as a session does not score it) and
``--iterations`` scored iterations. Every
iteration is a whole training step as the session times it (sync, forward, backward,
wait; the slowest worker's time), with the least any worker waited after its last bucket
(``waited_s``: the exposed communication, a session's ``comm_s``; tables before
2026-12-07's eighteenth session lack it). Lossless configurations are checked to give the exact
average. Before the sample, the session's warm-up is recorded too: the default three
times, then the session's flow-cap probe (:func:`~autotune.schedule.schedule.flow_probe`),
so that a replay builds the physics prior from what a session would know.

The jobs span the cases of issue 26: bandwidth-bound with servers, a per-flow cap, a small
latency-bound model, a lossy-allowed job on a slow link (where a codec should win), and two
workers per machine (intra modes, reduce roots); and, recorded after the tuner's model was
calibrated (issue 40) and never tuned on, the case the simulator was weakest in: several
workers per machine with lossy codecs under a per-flow cap (``wlossycap``).

Each table goes to ``benchmarks/data/tables/<job>.json`` as it grows (a run that stops
keeps what it measured; ``--resume`` is not offered: a table is one run). The replay is
``benchmarks/tuner_bench.py --suite measured``.

    sudo .venv/bin/python benchmarks/record_tables.py                 # all jobs, ~40 min
    sudo .venv/bin/python benchmarks/record_tables.py --jobs cap --configs 40   # a quick look
    sudo .venv/bin/python benchmarks/record_tables.py --default-ddp   # the default's row again

Since issue 59 a session's default is DDP itself (its buckets, its overlap with backward),
not the runtime's all-reduce in 4 MiB chunks that the tables first recorded for it:
``--default-ddp`` measures the default as DDP runs it on each job's cluster and puts it into
the table (its row and the warm-up's default times; the runtime's stay as
``runtime_default``), so that a replay's default is the one a session runs (issue 63).

The same file is the rank program (``--job``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import machine, median, require_emulator  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "tables"


@dataclass(frozen=True)
class Job:
    """One recorded job: the emulated cluster and the training job on it."""
    name: str
    what: str
    machines: int
    workers_per_machine: int = 1
    servers: int = 0
    rate: str = "200mbit"
    flow_cap: str | None = None
    model: str = "resnet50/8"     # 161 tensors, 1.9 MiB
    fwd_ms: float = 10.0
    bwd_ms: float = 20.0
    allow_lossy: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def workers(self) -> int:
        return self.machines * self.workers_per_machine

    @property
    def hosts(self) -> list[int]:
        """Host of each rank: workers packed per machine, then one host per server."""
        return ([m for m in range(self.machines) for _ in range(self.workers_per_machine)]
                + [self.machines + s for s in range(self.servers)])


JOBS = {j.name: j for j in (
    Job("servers", "bandwidth-bound, 2 workers and 2 Summation Service hosts",
        machines=2, servers=2, rate="200mbit"),
    Job("cap", "per-flow cap: each TCP flow at a quarter of the NIC",
        machines=2, servers=1, rate="400mbit", flow_cap="100mbit"),
    Job("small", "a small latency-bound model (resnet50/1: 161 tensors, 30 KiB) on 3 machines",
        machines=3, rate="1gbit", model="resnet50/1", fwd_ms=2.0, bwd_ms=4.0),
    Job("lossy", "lossy codecs allowed on a slow link",
        machines=2, rate="100mbit", allow_lossy=True),
    Job("intra", "2 machines x 2 workers: intra modes and reduce roots",
        machines=2, workers_per_machine=2, servers=1, rate="200mbit"),
    Job("wlossycap", "2 machines x 2 workers, lossy codecs allowed, each TCP flow capped",
        machines=2, workers_per_machine=2, servers=1, rate="200mbit", flow_cap="50mbit",
        allow_lossy=True),
)}


def sample(space, n: int, seed: int) -> list[dict]:
    """``n`` distinct configurations of ``space`` (all of them if it has fewer), drawn
    with ``seed``; the default first."""
    rng = random.Random(seed)
    out = {space.key(space.default()): space.default()}
    for _ in range(100 * n):
        if len(out) >= n:
            break
        c = space.sample(rng)
        out.setdefault(space.key(c), c)
    if len(out) < n:  # a small space: take the rest in order
        for c in space.all_configs():
            out.setdefault(space.key(c), c)
            if len(out) >= n:
                break
    return list(out.values())


# ---- rank program ---------------------------------------------------------------------

def rank_main(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from autotune.leader.calibrate import measure_link
    from autotune.runtime import Runtime
    from autotune.runtime.ddp.ddp_hook import CommHookState
    from autotune.schedule.schedule import flow_probe
    from autotune.server import serve
    from autotune.tuning.space import SearchSpace
    from autotune.workload import check_average, model_shapes, sleepy_model

    job = JOBS[a.name] if a.name in JOBS else Job(**json.loads(a.spec))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rt = Runtime.bootstrap(timeout=600)
    if os.environ.get("AUTOTUNE_ROLE") == "server":
        serve(rt)
        rt.shutdown()
        return
    shapes = model_shapes(job.model)
    model = sleepy_model(shapes, job.fwd_ms / 1e3, job.bwd_ms / 1e3, rank + 1)
    # the session's path (issue 59): DDP on the workers' group, the runtime behind its comm
    # hook once a configuration needs it, the default DDP's own all-reduce
    ddp = DDP(model, process_group=rt.workers_group)
    state = CommHookState.install(ddp, rt)
    space = SearchSpace.of(rt.limits, allow_lossy=job.allow_lossy)
    leader = rank == 0
    want = (job.workers + 1) / 2
    x = torch.ones(1)
    in_force: list = [None]

    waits: list[float] = []  # the iterations' exposed communication, as they ran

    def iteration(cfg: dict) -> float:
        """One training iteration under ``cfg`` as a session runs it: put in force where
        it changes or where push/pull needs a sync each iteration, then forward and
        backward until DDP has the average; the slowest worker's seconds. The least any
        worker waited for the average after its last bucket (the exposed communication,
        a session's ``comm_s``) goes to ``waits``."""
        t0 = time.perf_counter()
        if cfg != in_force[0] or rt.needs_sync:
            state.sync(cfg if leader else None)
            in_force[0] = cfg
        model.zero_grad(set_to_none=False)
        ddp(x).backward()
        end = time.perf_counter()
        slowest, least = rt.worker_max([end - t0, state.last_bucket_at - end])
        waits.append(-least)
        return float(slowest)

    if a.default_ddp:
        default_only(a, iteration, space.default(), model, want, rank)
        rt.sync(stop=True) if leader else rt.sync()
        rt.shutdown()
        return
    configs = sample(space, a.configs, a.seed)  # the same list on every rank
    default = space.default()
    sizes = [p.numel() * p.element_size() for p in reversed(list(model.parameters()))]
    probe = flow_probe(space, sum(sizes))  # as the session's warm-up runs it
    # as the session times the link at its start (over the workers, before training)
    link = measure_link(rt.worker_sum, workers=job.workers)
    warm = [iteration(default) for _ in range(3)]
    many = [iteration(probe) for _ in range(2)]
    table = {
        "job": {**asdict(job), "workers": job.workers,
                "sizes": sizes},
        "space": [[p.name, list(p.values)] for p in space.params],
        "space_facts": {k: v for k, v in space.facts},
        "iterations": a.iterations, "seed": a.seed,
        "path": "DDP, the runtime behind its comm hook (a session's, issue 59)",
        "warmup": {"one_stream_s": warm, "many_streams_s": many, "probe": probe, "link": link},
        "rows": [],
    }
    t_start = time.time()
    for i, cfg in enumerate(configs):
        switch = iteration(cfg)
        del waits[:]
        times = [iteration(cfg) for _ in range(a.iterations)]
        if cfg.get("compression", "none") == "none":
            check_average(model, want, f"rank {rank}: {cfg}")
        if leader:
            table["rows"].append({"config": cfg, "switch_s": switch, "times_s": times,
                                  "waited_s": list(waits)})
            if i % 10 == 9 or i == len(configs) - 1:
                table["wall_s"] = time.time() - t_start
                table["default_after_s"] = None
                Path(a.out).write_text(json.dumps(table))
                print(f"{a.name}: {i + 1}/{len(configs)} configurations, "
                      f"{time.time() - t_start:.0f} s", flush=True)
    # the default again, to see how much the machine drifted over the recording
    after = [iteration(default) for _ in range(1 + a.iterations)][1:]
    rt.sync(stop=True) if leader else rt.sync()
    rt.shutdown()
    if leader:
        table["default_after_s"] = after
        table["wall_s"] = time.time() - t_start
        table["machine"] = machine()
        Path(a.out).write_text(json.dumps(table))


def default_only(a: argparse.Namespace, iteration: Any, default: dict, model: Any,
                 want: float, rank: int) -> None:
    """The default alone, as :func:`rank_main` records a row: the warm-up's three
    iterations, a first one and ``--iterations`` scored ones."""
    from autotune.workload import check_average

    warm = [iteration(default) for _ in range(3)]
    first = iteration(default)
    times = [iteration(default) for _ in range(a.iterations)]
    check_average(model, want, f"rank {rank}: the default")
    if rank == 0:
        Path(a.out).write_text(json.dumps({"one_stream_s": warm, "switch_s": first,
                                           "times_s": times, "machine": machine()}))


def record_default_ddp(a: argparse.Namespace, job: Job) -> Path:
    """Measure the default as a session runs it, DDP's own all-reduce
    (:func:`default_only`), on the job's cluster and put it into the recorded table: its
    row's times and the warm-up's; what the runtime measured for the default before stays
    beside them (``runtime_default``)."""
    out = Path(a.out_dir) / f"{job.name}.json"
    table = json.loads(out.read_text())
    fresh = out.with_suffix(".ddp.json")
    _launch(job, fresh, a.timeout, "--iterations", str(a.iterations), "--default-ddp")
    ddp = json.loads(fresh.read_text())
    fresh.unlink()
    from measured import MeasuredJob

    default = MeasuredJob.load(out).space.default()
    row = table["rows"][0]  # the sample puts the default first
    if row["config"] != default:
        raise SystemExit(f"{out}: the first row is {row['config']}, not the default {default}")
    table.setdefault("runtime_default", {  # what the runtime measured, kept once
        "switch_s": row["switch_s"], "times_s": row["times_s"],
        "one_stream_s": table["warmup"]["one_stream_s"]})
    row["switch_s"], row["times_s"] = ddp["switch_s"], ddp["times_s"]
    table["warmup"]["one_stream_s"] = ddp["one_stream_s"]
    table["default_ddp"] = {"recorded": time.strftime("%Y-%m-%d %H:%M"), "machine": ddp["machine"],
                            "command": "benchmarks/record_tables.py " + " ".join(sys.argv[1:])}
    out.write_text(json.dumps(table))
    before = table["runtime_default"]["times_s"]
    print(f"{job.name}: the default as DDP runs it, median {median(ddp['times_s']):.4f} s "
          f"(first recorded: {median(before):.4f} s)")
    return out


# ---- driver ---------------------------------------------------------------------------

def _launch(job: Job, out: Path, timeout: float, *args: str) -> None:
    """This file's rank program for ``job`` on a new emulated cluster of its hosts, writing
    ``out``; ``args``: its other options."""
    from autotune.emulate import Cluster

    with Cluster(hosts=job.machines + job.servers, rate=job.rate, flow_cap=job.flow_cap) as c:
        print(f"{job.name}: {job.what}; {c.describe()}", file=sys.stderr)
        argv = [sys.executable, os.path.abspath(__file__), "--job", job.name,
                "--spec", json.dumps(asdict(job)), "--out", str(out), *args]
        c.launch(argv, workers=job.workers, servers=job.servers, hosts=job.hosts,
                 timeout_s=timeout, echo=sys.stderr).check()


def run_job(job: Job, out: Path, *, configs: int, iterations: int, seed: int,
            timeout: float) -> dict:
    """Record ``job`` on a new emulated cluster into ``out``; the table."""
    from rich.console import Console

    con = Console(stderr=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    _launch(job, out, timeout, "--configs", str(configs), "--iterations", str(iterations),
            "--seed", str(seed))
    table = json.loads(out.read_text())
    con.print(f"{job.name}: {len(table['rows'])} configurations in {table['wall_s']:.0f} s -> {out}")
    return table


def record(a: argparse.Namespace, job: Job) -> Path:
    out = Path(a.out_dir) / f"{job.name}.json"
    if a.default_ddp:  # the default's row as a session runs it today: DDP itself
        return record_default_ddp(a, job)
    if a.warmup_only:  # a new warm-up (e.g. a changed probe) for a table already recorded
        table = json.loads(out.read_text())
        fresh = run_job(job, out.with_suffix(".warmup.json"), configs=1, iterations=1,
                        seed=a.seed, timeout=a.timeout)
        out.with_suffix(".warmup.json").unlink()
        table["warmup"] = {**fresh["warmup"], "recorded_apart": time.strftime("%Y-%m-%d %H:%M"),
                           "command": "benchmarks/record_tables.py " + " ".join(sys.argv[1:])}
        out.write_text(json.dumps(table))
        return out
    table = run_job(job, out, configs=a.configs, iterations=a.iterations, seed=a.seed,
                    timeout=a.timeout)
    table["command"] = "benchmarks/record_tables.py " + " ".join(sys.argv[1:])
    out.write_text(json.dumps(table))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", default=",".join(JOBS), help=f"comma list of {', '.join(JOBS)}")
    p.add_argument("--configs", type=int, default=300, help="configurations per job")
    p.add_argument("--iterations", type=int, default=6, help="scored iterations each")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per job")
    p.add_argument("--out-dir", default=str(DATA))
    p.add_argument("--warmup-only", action="store_true",
                   help="record only the warm-up again, into the existing tables")
    p.add_argument("--default-ddp", action="store_true",
                   help="record only the default again, as DDP runs it (a session's default "
                        "since issue 59), into the existing tables")
    p.add_argument("--job", dest="name", default=None, help=argparse.SUPPRESS)
    p.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.name:
        rank_main(a)
        return
    names = [n.strip() for n in a.jobs.split(",") if n.strip()]
    bad = [n for n in names if n not in JOBS]
    if bad:
        p.error(f"unknown jobs {bad}; known: {', '.join(JOBS)}")
    if a.configs < 1 or a.iterations < 1:
        p.error("--configs and --iterations must be >= 1")
    require_emulator(p.prog)
    for n in names:
        record(a, JOBS[n])


if __name__ == "__main__":
    main()
