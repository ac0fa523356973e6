"""Run one process per rank inside the emulated hosts and collect what they did.

A :class:`RankSpec` says where a rank runs (host index, namespace), what it runs and with
which environment; :func:`run_ranks` starts them all, prefixes and collects their output,
enforces a timeout, stops the others soon after one fails, and always kills every
process it started (process groups, SIGTERM then SIGKILL) before returning or raising,
including on KeyboardInterrupt.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from autotune.emulate.netns import EmulatorError, kill_pids


@dataclass
class RankSpec:
    """One process of a job: its rank, role, host and full command line."""

    rank: int
    role: str  # "worker" or "server"
    host: int
    argv: list[str]  # already wrapped to enter the host's namespace
    env: dict[str, str]

    @property
    def tag(self) -> str:
        return f"{'w' if self.role == 'worker' else 's'}{self.rank}@h{self.host}"


@dataclass
class RankResult:
    rank: int
    role: str
    host: int
    returncode: int | None  # None: killed by us (timeout, another rank failed, interrupt)
    output: str
    pid: int

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


@dataclass
class JobResult:
    ranks: list[RankResult]
    wall_s: float
    timed_out: bool = False
    stopped_early: bool = False  # a rank failed and the others were killed
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(r.ok for r in self.ranks)

    def check(self) -> "JobResult":
        """Return self when every rank exited 0, else raise with the failing ranks' output."""
        if self.ok:
            return self
        parts = ["emulated job failed" + (" (timed out)" if self.timed_out else "")]
        for r in self.ranks:
            if not r.ok:
                parts.append(f"--- rank {r.rank} ({r.role}, host {r.host}) exit {r.returncode}:\n"
                             f"{r.tail()}")
        raise EmulatorError("\n".join(parts))

    def output_of(self, rank: int) -> str:
        return next(r.output for r in self.ranks if r.rank == rank)

    def last_json(self, mark: str, rank: int = 0) -> Any:
        """The JSON after ``mark`` on the last line of ``rank``'s output that starts with
        it: how rank programs hand a result back (``print(MARK + json.dumps(...))``)."""
        lines = [ln for ln in self.output_of(rank).splitlines() if ln.startswith(mark)]
        if not lines:
            raise EmulatorError(f"rank {rank} printed no {mark.strip()!r} line:\n"
                                f"{self.output_of(rank)[-2000:]}")
        return json.loads(lines[-1][len(mark):])


def run_ranks(specs: list[RankSpec], timeout_s: float = 300.0,
              echo: TextIO | Callable[[str], None] | None = None,
              fail_grace_s: float = 5.0) -> JobResult:
    """Start every rank, wait for all of them (or the timeout), return their results.

    ``echo``: a stream (e.g. ``sys.stdout``) or callable that gets each output line as it
    comes, prefixed with ``[w0@h0]``-style tags. When a worker exits non-zero, or every
    worker has exited, the others get ``fail_grace_s`` seconds to finish, then are killed
    (a peer stuck in gloo would wait for its own long timeout otherwise). A server that
    fails does not stop the job: the workers go on without it.
    """
    if not specs:
        raise EmulatorError("no ranks to run")
    lock = threading.Lock()
    outputs: dict[int, list[str]] = {s.rank: [] for s in specs}
    emit = _emitter(echo)
    procs: list[tuple[RankSpec, subprocess.Popen]] = []
    readers: list[threading.Thread] = []
    killed: set[int] = set()
    t0 = time.monotonic()
    timed_out = stopped_early = False
    try:
        for spec in specs:
            p = subprocess.Popen(
                spec.argv, env=spec.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, text=True, bufsize=1,
                errors="replace")
            procs.append((spec, p))
            th = threading.Thread(target=_pump, args=(p, spec, outputs[spec.rank], lock, emit),
                                  daemon=True)
            th.start()
            readers.append(th)
        deadline = t0 + timeout_s
        fail_deadline: float | None = None
        while True:
            codes = [p.poll() for _, p in procs]
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            workers = [c for (spec, _), c in zip(procs, codes) if spec.role == "worker"]
            # a failed server is survived (the workers drop it): only a worker's failure,
            # or every worker done, starts the grace period
            if fail_deadline is None and (any(c not in (None, 0) for c in workers)
                                          or all(c is not None for c in workers)):
                fail_deadline = now + fail_grace_s
            if now >= deadline:
                timed_out = True
                break
            if fail_deadline is not None and now >= fail_deadline:
                stopped_early = True
                break
            time.sleep(0.05)
    finally:
        for spec, p in procs:
            if p.poll() is None:
                killed.add(spec.rank)
        _kill_all([p for _, p in procs])
        for th in readers:
            th.join(timeout=5)
    results = [
        RankResult(rank=s.rank, role=s.role, host=s.host,
                   returncode=None if s.rank in killed else p.returncode,
                   output="".join(outputs[s.rank]), pid=p.pid)
        for s, p in procs
    ]
    return JobResult(ranks=results, wall_s=time.monotonic() - t0, timed_out=timed_out,
                     stopped_early=stopped_early)


def _emitter(echo: TextIO | Callable[[str], None] | None) -> Callable[[str], None] | None:
    if echo is None:
        return None
    if callable(echo) and not hasattr(echo, "write"):
        return echo

    def write(line: str) -> None:
        echo.write(line)  # type: ignore[union-attr]
        echo.flush()  # type: ignore[union-attr]

    return write


def _pump(p: subprocess.Popen, spec: RankSpec, sink: list[str], lock: threading.Lock,
          emit: Callable[[str], None] | None) -> None:
    assert p.stdout is not None
    for line in p.stdout:
        sink.append(line)
        if emit is not None:
            with lock:
                emit(f"[{spec.tag}] {line if line.endswith(chr(10)) else line + chr(10)}")


def _kill_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each live process group, then SIGKILL after a grace period, then reap."""
    live = [p for p in procs if p.poll() is None]
    for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        live = [p for p in live if p.poll() is None]
        if not live:
            break
        for p in live:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.poll() is None for p in live):
            time.sleep(0.05)
    for p in procs:
        try:
            p.wait(timeout=1)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            kill_pids([p.pid])
            print(f"autotune.emulate: pid {p.pid} would not die", file=sys.stderr)
