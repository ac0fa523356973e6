"""Run a job's rank processes on this machine: the one rank launcher.

Both ``autotune launch`` (:mod:`autotune.launch`, ranks as plain processes) and the
emulated cluster (:mod:`autotune.emulate.launcher`, ranks that enter a host's network
namespace) start their ranks through :func:`run`. It starts one process per
:class:`Rank`, streams every output line as ``[tag] line``, keeps each rank's lines (all,
or the last few), and applies the one failure policy:

* a worker that exits non-zero gives the others ``grace`` seconds to finish on their own,
  then they are stopped;
* a server that exits non-zero is reported (``on_lost``) and the job goes on: the workers
  drop lost servers (see ``ServerLost``);
* once every worker has exited, servers still running get ``grace`` seconds, then are
  stopped;
* the grace period ends early once every rank still running is stopped (SIGSTOP: it
  cannot exit on its own), and stopping a rank sends SIGCONT after SIGTERM, so that a
  stopped one takes its SIGTERM at once (as a shell's ``kill`` does for a stopped job);
* an optional ``timeout_s`` stops everything.

Every process it started is stopped (SIGTERM, then SIGKILL) and reaped before :func:`run`
returns or raises, KeyboardInterrupt included; its wait is a safe point
(:func:`autotune.signals.check`), where a stop signal recorded meanwhile is raised.
:func:`pid_alive` and :func:`kill_pids` serve processes this module did not start (an
emulated host's leftovers, a state file's owner).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence, TextIO

from autotune import forked
from autotune.progress import is_event
from autotune.signals import check

POLL_S = 0.05
KILL_WAIT_S = 2.0  # after SIGKILL, how long to wait before reporting a process that stays


@dataclass
class Rank:
    """One process to start: its rank, role (``"worker"`` or ``"server"``), command line,
    environment, and the tag its output lines are shown with (``[tag] line``).
    ``wrapper`` goes before ``argv`` in a fresh process (``ip netns exec NS``);
    ``enter()`` does its work in a forked one (a rank with a wrapper and no ``enter`` is
    never forked)."""

    rank: int
    role: str
    argv: list[str]
    env: dict[str, str]
    tag: str
    wrapper: list[str] = field(default_factory=list)
    enter: Callable[[], None] | None = None


@dataclass
class Exit:
    """How one rank ended."""

    rank: Rank
    returncode: int | None  # None: still running when the job was stopped
    lines: list[str]  # its output lines as read (newlines kept): all, or the last ``keep``
    pid: int


@dataclass
class Outcome:
    """How a job ended: every rank's :class:`Exit`, in the order given to :func:`run`."""

    exits: list[Exit]
    wall_s: float
    failed: Exit | None = None  # the first worker seen to exit non-zero
    lost: list[Exit] = field(default_factory=list)  # servers that exited non-zero, as seen
    timed_out: bool = False
    stopped_early: bool = False  # the grace period ran out with ranks still running


def emitter(echo: TextIO | Callable[[str], None] | None) -> Callable[[str], None] | None:
    """A stream (written and flushed) or a callable, as a function of one line."""
    if echo is None:
        return None
    if callable(echo) and not hasattr(echo, "write"):
        return echo

    def write(line: str) -> None:
        echo.write(line)  # type: ignore[union-attr]
        echo.flush()  # type: ignore[union-attr]

    return write


def describe_exit(code: int) -> str:
    """``exit code 3`` or ``killed by SIGKILL``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def run(ranks: Sequence[Rank], *, grace: float, timeout_s: float | None = None,
        emit: Callable[[str], None] | None = None, keep: int | None = None,
        detach: bool = False, on_lost: Callable[[Rank, int], None] | None = None,
        term_s: float = 5.0, on_started: Callable[[], None] | None = None,
        fork: bool = False) -> Outcome:
    """Start every rank, wait under the failure policy (module docstring), stop the rest.

    ``emit`` gets each output line as ``[tag] line\\n``, one at a time; ``keep`` bounds
    the lines kept per rank (None: all). ``detach`` starts each rank in its own session
    with no stdin and signals its whole process group (for ranks behind a wrapper such as
    ``ip netns exec``, whose children would outlive a signal to the wrapper alone).
    ``on_lost(rank, code)`` is called when a server is seen to fail.
    ``on_started()`` is called once every rank is started, before the wait (what it
    raises stops them). Stopping sends SIGTERM, then SIGKILL after ``term_s`` seconds.
    ``fork``: the ranks are forked from this process where
    :func:`autotune.forked.can_fork` allows (after :func:`autotune.forked.preload`),
    otherwise started as fresh processes."""
    lock = threading.Lock()
    started: list[tuple[Rank, subprocess.Popen | forked.Forked, collections.deque]] = []
    readers: list[threading.Thread] = []
    t0 = time.monotonic()
    seen = _Seen()
    fork = (fork and all(r.enter is not None or not r.wrapper for r in ranks)
            and forked.can_fork([r.argv for r in ranks]))
    try:
        for r in ranks:  # every rank started before any reader thread (a fork needs that)
            if fork:
                p: subprocess.Popen | forked.Forked = forked.start(
                    r.argv, r.env, detach=detach, enter=r.enter)
            else:
                extra = dict(stdin=subprocess.DEVNULL, start_new_session=True) if detach else {}
                p = subprocess.Popen(r.wrapper + r.argv, env=r.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace",
                                     bufsize=1, **extra)
            started.append((r, p, collections.deque(maxlen=keep)))
        for r, p, sink in started:
            th = threading.Thread(target=_pump, args=(p, r.tag, sink, lock, emit), daemon=True)
            th.start()
            readers.append(th)
        if on_started is not None:
            on_started()
        _wait([(r, p) for r, p, _ in started], seen, grace,
              None if timeout_s is None else t0 + timeout_s, on_lost, lock)
    finally:
        running = {i for i, (_, p, _) in enumerate(started) if p.poll() is None}
        stop([p for _, p, _ in started], term_s=term_s, group=detach)
        for th in readers:
            th.join(timeout=5)
    exits = [Exit(r, None if i in running else p.returncode, list(sink), p.pid)
             for i, (r, p, sink) in enumerate(started)]
    return Outcome(exits=exits, wall_s=time.monotonic() - t0,
                   failed=None if seen.failed is None else exits[seen.failed],
                   lost=[exits[i] for i in seen.lost], timed_out=seen.timed_out,
                   stopped_early=seen.stopped_early)


@dataclass
class _Seen:
    failed: int | None = None
    lost: list[int] = field(default_factory=list)
    timed_out: bool = False
    stopped_early: bool = False


def _wait(procs: list[tuple[Rank, subprocess.Popen]], seen: _Seen, grace: float,
          deadline: float | None, on_lost: Callable[[Rank, int], None] | None,
          lock: threading.Lock) -> None:
    """Poll the ranks until all exit, the grace period runs out, or the deadline passes,
    noting in ``seen`` the first failed worker and each lost server as they show."""
    grace_end: float | None = None
    while True:
        codes = [p.poll() for _, p in procs]
        for i, ((r, _), c) in enumerate(zip(procs, codes)):
            if c in (None, 0):
                continue
            if r.role == "server" and i not in seen.lost:
                seen.lost.append(i)
                if on_lost is not None:
                    with lock:  # between whole output lines
                        on_lost(r, c)
            elif r.role == "worker" and seen.failed is None:
                seen.failed = i
                grace_end = time.monotonic() + grace
        if all(c is not None for c in codes):
            return
        now = time.monotonic()
        if grace_end is None and all(c is not None for (r, _), c in zip(procs, codes)
                                     if r.role == "worker"):
            # servers leave at the leader's stop; one that cannot (stopped, or dropped
            # after a loss) gets the grace period, then is stopped
            grace_end = now + grace
        if deadline is not None and now >= deadline:
            seen.timed_out = True
            return
        if grace_end is not None and (now >= grace_end or all(
                _state(p.pid) == "T" for (_, p), c in zip(procs, codes) if c is None)):
            seen.stopped_early = True
            return
        check()  # a safe point: a stop recorded (e.g. inside a finaliser) is raised here
        time.sleep(POLL_S)


def _pump(p: subprocess.Popen, tag: str, sink: collections.deque, lock: threading.Lock,
          emit: Callable[[str], None] | None) -> None:
    """Each line as it comes (ranks run unbuffered, and a line is passed on as soon as it
    ends). Progress events (:mod:`autotune.progress`) go to ``emit`` but are not kept."""
    assert p.stdout is not None
    for line in p.stdout:
        if not is_event(line):
            sink.append(line)
        if emit is not None:
            with lock:
                emit(f"[{tag}] {line if line.endswith(chr(10)) else line + chr(10)}")


def stop(procs: Sequence[subprocess.Popen], term_s: float = 5.0, group: bool = False) -> None:
    """SIGTERM every live process (its process group with ``group``), SIGKILL what is left
    after ``term_s`` seconds, then reap them all."""
    live = list(procs)
    for sig, wait_s in ((signal.SIGTERM, term_s), (signal.SIGKILL, KILL_WAIT_S)):
        live = [p for p in live if p.poll() is None]
        if not live:
            break
        for p in live:
            _signal(p.pid, sig, group)
            if sig == signal.SIGTERM:  # a stopped process takes it once continued
                _signal(p.pid, signal.SIGCONT, group)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(p.poll() is None for p in live):
            time.sleep(POLL_S)
    for p in procs:
        try:
            p.wait(timeout=1)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            kill_pids([p.pid])
            print(f"autotune: pid {p.pid} would not die", file=sys.stderr)


def _signal(pid: int, sig: int, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_pids(pids: list[int], grace_s: float = 2.0) -> None:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL what is still alive (processes this
    module did not start: see :func:`stop` for those it did)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return
        for p in alive:
            _signal(p, sig, group=False)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(pid_alive(p) for p in alive):
            time.sleep(POLL_S)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a zombie child of ours is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    state = _state(pid)
    if state == "Z":
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return state not in (None, "Z")


def _state(pid: int) -> str | None:
    """Process ``pid``'s state letter from ``/proc`` (``T``: stopped, ``Z``: a zombie);
    ``None`` when it is gone or cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] or None
    except (OSError, IndexError):
        return None
