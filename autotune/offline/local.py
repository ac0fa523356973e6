"""``autotune tune`` on real processes: the synthetic job through the session machinery.

:func:`tune_local` writes a spec, starts the job's ranks (workers run
:mod:`autotune.offline.worker`, servers ``python -m autotune.server``) either on this
machine through ``autotune launch``'s machinery (:func:`autotune.launch.run_job`) or on
the emulated cluster (:mod:`autotune.emulate`, root only), passes rank 0's progress
events (:mod:`autotune.progress`: the ranks run with ``AUTOTUNE_PROGRESS=events``, the
events are read with :func:`autotune.progress.parse`) to the caller as they come, and
returns the report rank 0 wrote together with the run the session stored. With
``compare_ddp`` the same synthetic job also runs under PyTorch DDP on the same workers.

Each worker holds the model's parameters, their gradients and the runtime's buffers
(about :data:`COPIES` copies of the gradient bytes), so big models on many local workers
are refused above a memory bound (:func:`memory_check`) rather than swapping.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from autotune import progress
from autotune.errors import AutotuneError
from autotune.store.location import is_url, shown
from autotune.tuning.tuner import DEFAULT_TECHNIQUES

#: Copies of the gradient bytes one worker holds: parameters, gradients, the runtime's
#: packed input and output buffers, and the Summation Service's working buffers.
COPIES = 5
#: Fixed memory of one rank (Python, torch, gloo), bytes.
RANK_OVERHEAD = 400 << 20
#: lines of the ranks' output kept for an error message
TAIL = 40


class TuneError(AutotuneError, RuntimeError):
    """The offline job could not run or failed; the message says why."""


@dataclass
class LocalTune:
    """Everything one offline job needs (built and checked by the command)."""

    model: str
    workers: int
    servers: int = 0
    machines: int | None = None
    budget: int = 100
    db: str = "autotune.db"
    compute_ms: float = 0.0
    backward_fraction: float = 2 / 3
    seed: int = 0
    techniques: tuple[str, ...] = DEFAULT_TECHNIQUES
    trial_iterations: int | None = None
    allow_lossy: bool = False
    timeout: float = 3600.0
    emulate: str | None = None
    job: str = ""
    verify_iterations: int = 8
    verify_seconds: float = 0.0  # the DDP reference and the re-timing, each at least so long
    ddp_iterations: int = 8
    ddp_warmup: int = 2
    compare_ddp: bool = False
    fixed: dict[str, Any] = field(default_factory=dict)  # knobs pinned (--fix)
    extra_env: dict[str, str] = field(default_factory=dict)

    def spec(self, mode: str, result: str) -> dict[str, Any]:
        """What the rank program runs (``mode`` tune or ddp); rank 0 writes its report to
        ``result``."""
        return {
            "mode": mode, "result": result, "ddp_in_job": self.compare_ddp and self.servers == 0,
            "model": self.model, "budget": self.budget,
            "db": self.db if is_url(self.db) else str(Path(self.db).resolve()),
            "compute_ms": self.compute_ms,
            "backward_fraction": self.backward_fraction, "seed": self.seed,
            "techniques": list(self.techniques), "trial_iterations": self.trial_iterations,
            "allow_lossy": self.allow_lossy, "timeout": min(self.timeout, 600.0),
            "job": self.job, "verify_iterations": self.verify_iterations,
            "verify_seconds": self.verify_seconds,
            "ddp_iterations": self.ddp_iterations, "ddp_warmup": self.ddp_warmup,
            "fixed": self.fixed,
        }


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def memory_needed(grad_bytes: int, workers: int, servers: int) -> int:
    """Bytes a local job of these ranks needs, roughly (see :data:`COPIES`)."""
    return workers * (COPIES * grad_bytes + RANK_OVERHEAD) + servers * (grad_bytes + RANK_OVERHEAD)


def memory_check(model: str, grad_bytes: int, workers: int, servers: int,
                 limit_bytes: int | None) -> None:
    """Raise :class:`TuneError` when the job would need more than ``limit_bytes`` (default:
    half of the available memory)."""
    need = memory_needed(grad_bytes, workers, servers)
    if limit_bytes is None:
        avail = available_memory()
        if avail is None:
            return
        limit_bytes = avail // 2
    if need > limit_bytes:
        gib = 1 << 30
        raise TuneError(
            f"{model} has {grad_bytes / 2**20:.0f} MiB of gradients; {workers} local worker(s) "
            f"and {servers} server(s) would need about {need / gib:.1f} GiB (each worker holds "
            f"~{COPIES} copies: parameters, gradients, communication buffers), more than the "
            f"limit of {limit_bytes / gib:.1f} GiB. Use fewer --workers, tune on a simulated "
            f"cluster (--simulate cluster.json), or raise --max-memory (GiB).")


class _Output:
    """The ranks' prefixed output as it comes: progress events (:func:`progress.parse`;
    only rank 0 sends them) go to ``on_event``, every other line to a tail for error
    messages. Usable as a stream (``write``) or a callable."""

    def __init__(self, on_event: Callable[[dict], None] | None) -> None:
        self.on_event = on_event
        self.tail: list[str] = []
        self._buf = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._buf += text
            *lines, self._buf = self._buf.split("\n")
        for line in lines:
            self._line(line)
        return len(text)

    def __call__(self, text: str) -> None:
        self.write(text if text.endswith("\n") else text + "\n")

    def flush(self) -> None:
        pass

    def _line(self, line: str) -> None:
        ev = progress.parse(line)
        if ev is None:
            self.tail = (self.tail + [line])[-TAIL:]
        elif self.on_event is not None:
            self.on_event(ev[1])


def _env(tune: LocalTune) -> dict[str, str]:
    # A factory "pkg.module:attr" must import in the ranks as it did here.
    paths = [os.getcwd()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)), "OMP_NUM_THREADS": "1",
            "AUTOTUNE_TIMEOUT": str(min(tune.timeout, 600.0)), progress.ENV: "events",
            **tune.extra_env}


def _run(tune: LocalTune, mode: str, workers: int, servers: int,
         on_event: Callable[[dict], None] | None) -> dict:
    """One job (``mode`` tune or ddp) on ``workers`` + ``servers`` ranks; rank 0's report."""
    output = _Output(on_event)
    with tempfile.TemporaryDirectory(prefix="autotune-tune-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(json.dumps(tune.spec(mode, str(result_path))))
        argv = [sys.executable, "-m", "autotune.offline.worker", str(spec_path)]
        if tune.emulate:
            failure = _run_emulated(tune, argv, workers, servers, output)
        else:
            failure = _run_loopback(tune, argv, workers, servers, output)
        result = json.loads(result_path.read_text()) if result_path.exists() else None
    if failure is not None or result is None:
        tail = "\n".join(output.tail[-25:])
        why = failure or "rank 0 wrote no report"
        raise TuneError(f"the {mode} job failed: {why}\n{tail}")
    return result


def _run_loopback(tune: LocalTune, argv: list[str], workers: int, servers: int,
                  output: _Output) -> str | None:
    import io

    from autotune.launch import run_job

    err = io.StringIO()
    saved = {k: os.environ.get(k) for k in _env(tune)}
    os.environ.update(_env(tune))  # run_job hands this process's environment to the ranks
    try:
        code = run_job(argv[1:], workers, servers, tune.machines, grace=10.0, out=output, err=err)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if code != 0:
        return err.getvalue().strip() or f"exit code {code}"
    return None


def _run_emulated(tune: LocalTune, argv: list[str], workers: int, servers: int,
                  output: _Output) -> str | None:
    from autotune.emulate import Cluster, EmulatorError

    machines = tune.machines or workers
    per = workers // machines
    hosts = [r // per for r in range(workers)] + [machines + s for s in range(servers)]
    try:
        with Cluster(hosts=machines + servers, rate=tune.emulate) as cluster:
            job = cluster.launch(argv, workers=workers, servers=servers,
                                 server_argv=[sys.executable, "-m", "autotune.server"],
                                 timeout_s=tune.timeout, env=_env(tune), echo=output,
                                 hosts=hosts)
    except EmulatorError as exc:
        return str(exc)
    if not job.ok:
        bad = [r for r in job.ranks if not r.ok]
        what = "timed out" if job.timed_out else f"rank {bad[0].rank} exit {bad[0].returncode}"
        return what + "\n" + (bad[0].tail() if bad else "")
    return None


def tune_local(tune: LocalTune, on_event: Callable[[dict], None] | None = None) -> dict:
    """Run the offline tuning job (and, with ``tune.compare_ddp``, the DDP reference: in
    the same world without servers, else as a second job on the workers); return rank
    0's report with the stored run (``run``, ``trials``) and the DDP result (``ddp``),
    which the run then holds too (``runs.ddp``, :meth:`~autotune.store.Store.record_ddp`).
    ``on_event`` gets rank 0's progress events as they come (to show them, e.g. with a
    :class:`autotune.progress.Viewer`)."""
    from autotune.store import Store

    with Store(tune.db) as store:
        before = max((r["id"] for r in store.runs(limit=1)), default=0)
    result = _run(tune, "tune", tune.workers, tune.servers, on_event)
    with Store(tune.db) as store:
        runs = [r for r in store.runs(job=tune.job) if r["id"] > before]
        if not runs:
            raise TuneError(f"the job ran but no run was recorded in {shown(tune.db)}")
        result["run"] = runs[0]
        result["trials"] = store.trials(runs[0]["id"])
    if tune.compare_ddp and result.get("ddp") is None:
        result["ddp"] = _run(tune, "ddp", tune.workers, 0, on_event)
    if result.get("ddp"):  # stored with the run: db show and report show it too
        from autotune.speedup import measure_times

        with Store(tune.db) as store:
            store.record_ddp(result["run"]["id"], measure_times(result["ddp"]["times_s"]),
                             measure_times(result["verify_times_s"]))
            result["run"] = store.run(result["run"]["id"])
    return result
