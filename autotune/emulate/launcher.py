"""Run one process per rank inside the emulated hosts and collect what they did.

A :class:`RankSpec` says where a rank runs (host index, namespace), what it runs and with
which environment; :func:`run_ranks` starts them all through the one rank launcher
(:func:`autotune.ranks.run`: prefixed output, the failure policy, a timeout), forked
from this process once it has imported torch (:mod:`autotune.forked`; ``ip netns exec``
before a fresh interpreter where it cannot fork, or ``AUTOTUNE_LAUNCH_FORK=0``), collects
their whole output, and always kills every process it started (process groups, SIGTERM
then SIGKILL) before returning or raising, including on KeyboardInterrupt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from autotune import forked, ranks
from autotune.emulate.netns import EmulatorError
from autotune.ranks import Rank


@dataclass
class RankSpec:
    """One process of a job: its rank, role, host and full command line."""

    rank: int
    role: str  # "worker" or "server"
    host: int
    argv: list[str]
    env: dict[str, str]
    wrapper: list[str] = field(default_factory=list)  # enters the host in a fresh process
    enter: Callable[[], None] | None = None  # enters it in a forked one

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
              fail_grace_s: float = 5.0, fork: bool | None = None) -> JobResult:
    """Start every rank, wait for all of them (or the timeout), return their results.

    ``echo``: a stream (e.g. ``sys.stdout``) or callable that gets each output line as it
    comes, prefixed with ``[w0@h0]``-style tags. When a worker exits non-zero, or every
    worker has exited, the others get ``fail_grace_s`` seconds to finish, then are killed
    (a peer stuck in gloo would wait for its own long timeout otherwise). A server that
    fails does not stop the job: the workers go on without it.
    """
    if not specs:
        raise EmulatorError("no ranks to run")
    fork = forked.default() if fork is None else fork
    # torch imported once here rather than once a rank (where this process has not yet),
    # when every rank runs this Python
    fork = fork and all(forked.forkable(s.argv) for s in specs) and forked.preload()
    job = ranks.run([Rank(s.rank, s.role, s.argv, s.env, s.tag, wrapper=s.wrapper,
                          enter=s.enter) for s in specs],
                    grace=fail_grace_s, timeout_s=timeout_s, emit=ranks.emitter(echo),
                    detach=True, term_s=2.0, fork=fork)
    results = [RankResult(rank=s.rank, role=s.role, host=s.host, returncode=e.returncode,
                          output="".join(e.lines), pid=e.pid)
               for s, e in zip(specs, job.exits)]
    return JobResult(ranks=results, wall_s=job.wall_s, timed_out=job.timed_out,
                     stopped_early=job.stopped_early)
