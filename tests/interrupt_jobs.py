"""Interrupt real 2-worker jobs at random moments and report how each run closed.

``python tests/interrupt_jobs.py OUT.json --jobs 20 --seed 0``: torch and autotune are
imported once; each job forks two rank processes (a fresh process group, real
``torch.distributed`` over gloo on loopback, a real store), each training a small MLP under
``autotune.session`` for ever, every other job a DDP model (DDP kept, its hook tuned) (``--parallel`` jobs at a time). Once the leader has opened
its run, after a random delay,
the job is stopped in one of three ways, in turn: SIGINT to the whole process group (as a
terminal's Ctrl-C), SIGINT then SIGTERM (as ``autotune launch`` does after a Ctrl-C), or
SIGTERM alone. Every wait is bounded; a rank still alive after ``--grace`` seconds is
killed and reported. OUT.json lists, per job: the way, the delay, each rank's exit code
and output tail, and the run's status in the store.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import select
import signal
import sqlite3
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

import autotune
import autotune.probes
import autotune.runtime.core
import autotune.sessions
import autotune.store.db
import autotune.tuning.search  # imported once here, not in every forked rank
from autotune.signals import exit_code

WAYS = ("sigint-group", "sigint-then-sigterm", "sigterm")


def _rank(rank: int, port: int, db: Path, log: Path, ddp: bool, device: str) -> None:
    """A rank's life in the forked child: train until stopped (``ddp``: a
    DistributedDataParallel model, DDP kept) on ``device``; never returns."""
    code = 1
    with open(log, "w") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            # the rendezvous store is this script's (held open by a keeper process, as
            # `autotune launch` holds its own): no port picked, closed and then bound
            # again, which another process may take in between
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                              WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                              TORCHELASTIC_USE_AGENT_STORE="True")
            torch.manual_seed(0)
            model: torch.nn.Module = torch.nn.Sequential(
                torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
            if ddp:
                dist.init_process_group("gloo", timeout=timedelta(seconds=30))
                model = torch.nn.parallel.DistributedDataParallel(model)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            gen = torch.Generator().manual_seed(rank + 1)
            # the handlers the session finds and puts back at its end: a second signal
            # that lands after the session has ended (the SIGTERM after a SIGINT, before
            # the except clause below blocks it) must not kill this harness's own exit
            # and hide the exit code the session chose
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, _late_signal)
            # tuning all along (configurations switch under the signal), without the
            # physics prior's CPU cost
            with autotune.session(model, budget=10**6, db=db, verbose=False, timeout=30,
                                  prior=False, job="interrupt", spend=None) as session:
                while True:
                    x = torch.randn(16, 32, generator=gen).to(device)
                    torch.nn.functional.mse_loss(model(x), x[:, :1]).backward()
                    session.step()
                    opt.step()
                    opt.zero_grad()
        except KeyboardInterrupt as exc:
            code = exit_code(exc)
            print(f"stopped: {exc!r}", flush=True)
        except BaseException:  # noqa: BLE001 - reported through the log and exit code
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _late_signal(signum: int, frame: object) -> None:
    """A signal after the session has put this handler back: the rank is already on its
    way out with the session's exit code: not acted on (nor printed: a print inside a
    handler may land inside another print)."""


def _status(db: Path) -> str | None:
    if not db.exists():
        return None
    try:
        with sqlite3.connect(db, timeout=5) as con:
            row = con.execute("SELECT status FROM runs ORDER BY id DESC LIMIT 1").fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


class Job:
    """One job: its two forked ranks, then its stop, driven by :meth:`poll`."""

    def __init__(self, index: int, way: str, delay: float, root: Path, ddp: bool,
                 device: str = "cpu") -> None:
        self.index, self.way, self.delay, self.ddp = index, way, delay, ddp
        self.db = root / f"job{index}.db"
        self.keeper, port = _keep_store()
        self.logs = [root / f"job{index}.rank{r}.log" for r in range(2)]
        self.pids: list[int] = []
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:  # see _keep_store
            raise RuntimeError(f"{threads} threads in the process that forks the ranks")
        for r in range(2):
            pid = os.fork()
            if pid == 0:
                os.setpgid(0, 0 if r == 0 else self.pids[0])
                _rank(r, port, self.db, self.logs[r], ddp, device)
            try:
                os.setpgid(pid, pid if r == 0 else self.pids[0])
            except OSError:  # the child did it first
                pass
            self.pids.append(pid)
        self.codes: list[int | None] = [None, None]
        self.opened_at: float | None = None
        self.steps = self._plan()
        self.started = time.monotonic()
        self.killed = 0
        self.signalled = 0.0

    def _plan(self) -> list[tuple[float, str]]:
        """(seconds after the run opened, what to send), in order."""
        if self.way == "sigint-group":
            return [(self.delay, "int-group")]
        if self.way == "sigint-then-sigterm":
            return [(self.delay, "int-group"), (self.delay + random.uniform(0, 0.3), "term")]
        return [(self.delay, "term")]

    def poll(self, grace: float) -> bool:
        """Move the job on; True once both ranks are reaped."""
        now = time.monotonic()
        if self.opened_at is None:
            if _status(self.db) == "running":
                self.opened_at = now
            elif now - self.started > 60:
                self.opened_at = now  # never opened: stop it anyway, reported below
        while self.opened_at is not None and self.steps and now >= self.opened_at + self.steps[0][0]:
            what = self.steps.pop(0)[1]
            if what == "int-group":
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pids[0], signal.SIGINT)
            else:
                for pid in self.pids:
                    _signal(pid, signal.SIGTERM)
            self.signalled = now
        for i, pid in enumerate(self.pids):
            if self.codes[i] is None:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    self.codes[i] = os.waitstatus_to_exitcode(status)
        if None in self.codes and not self.steps and now - self.signalled > grace:
            for i, pid in enumerate(self.pids):
                if self.codes[i] is None:
                    self.killed += 1
                    _signal(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    self.codes[i] = -9
        if None not in self.codes and self.keeper:
            _signal(self.keeper, signal.SIGKILL)
            os.waitpid(self.keeper, 0)
            self.keeper = 0
        return None not in self.codes

    def result(self) -> dict:
        return {"job": self.index, "way": self.way, "ddp": self.ddp,
                "delay_s": round(self.delay, 3),
                "opened": _status(self.db) is not None, "codes": self.codes,
                "killed": self.killed, "status": _status(self.db),
                "logs": [p.read_text()[-2000:] if p.exists() else "" for p in self.logs]}


def _keep_store() -> tuple[int, int]:
    """A process that holds a job's rendezvous store (as ``autotune launch`` holds its
    ranks'), until killed; its pid and the store's port. The store's server thread runs
    there, not here: this process forks every rank, and a fork is only safe from a
    process with no thread but the forking one (one rank in a full run once hung before
    its first collective, forked while another job's store thread ran here)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                  timeout=timedelta(seconds=60))
            os.write(write, str(store.port).encode())
            os.close(write)
            while True:
                time.sleep(60)
        finally:
            os._exit(1)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 60)
    port = os.read(read, 16) if ready else b""
    os.close(read)
    if not port:
        _signal(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise RuntimeError("no rendezvous store in 60 s")
    return pid, int(port)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-delay", type=float, default=1.5)
    ap.add_argument("--grace", type=float, default=40.0)
    ap.add_argument("--parallel", type=int, default=2, help="jobs running at once")
    ap.add_argument("--device", default="cpu",
                    help="where the ranks' models live (cuda: one GPU, shared)")
    a = ap.parse_args()
    random.seed(a.seed)
    torch.set_num_threads(1)
    root = Path(a.out).parent
    results = []
    for first in range(0, a.jobs, a.parallel):
        batch = [Job(i, WAYS[i % len(WAYS)], random.uniform(0.0, a.max_delay), root,
                     ddp=i % 2 == 1, device=a.device)
                 for i in range(first, min(a.jobs, first + a.parallel))]
        while not all([job.poll(a.grace) for job in batch]):
            time.sleep(0.05)
        for job in batch:
            results.append(job.result())
            print(json.dumps({k: v for k, v in results[-1].items() if k != "logs"}), flush=True)
    Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
