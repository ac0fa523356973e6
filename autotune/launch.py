"""``autotune launch``: start a job's processes on this machine.

    autotune launch --workers N --servers K [--machines M] script.py [args...]

Ranks ``0..N-1`` are workers running ``python script.py args``; ranks ``N..N+K-1`` are
servers running ``python -m autotune.server``. The launcher hosts the rendezvous store on a
free loopback port (``MASTER_ADDR``/``MASTER_PORT``, ``TORCHELASTIC_USE_AGENT_STORE=True``
as under ``torchrun``), so the store outlives any rank and the survivors can tell which
peer died. With ``--machines M`` the workers are split into ``M`` emulated machines
(``AUTOTUNE_MACHINE=node0..``; servers are ``server0..``), which is how the intra-machine
modes run on one host. Every line a process prints is streamed with a ``[w<rank>]`` or
``[s<rank>]`` prefix as soon as it ends; rank 0's tuning bar is drawn here, live, when
this output is a terminal (plain lines per trial otherwise; :mod:`autotune.progress`). If a worker fails, the others get ``grace`` seconds to finish on
their own, then are stopped; the launcher exits with the failing worker's code and
repeats its last lines: the worker whose own code failed (it posted its exception in the
store, :meth:`~autotune.runtime.control.faults.Liveness.fail`; its peers fail after it, naming
it), else the first worker to exit non-zero. A worker that a signal stopped (it posted
the signal's name, whatever its exit code) is no failure: one line names it, nothing is
repeated, and the launcher exits 128 + the signal. A server that fails is reported and
the job goes on: the workers drop lost servers (see ``ServerLost``); the exit code is the
workers'.

A bad job shape (no workers, negative servers, machines that do not divide the workers,
more processes than :func:`process_limit` allows here) is a usage error (exit code 2)
before the rendezvous store or any process starts.

For several real machines use ``torchrun`` (see docs/runtime.md).
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import sys
from dataclasses import dataclass
from typing import IO, Sequence

import click

from autotune import forked, progress, ranks
from autotune.ranks import Rank, describe_exit

TAIL_LINES = 25
ONE_LINE = "autotune: "  # how a rank's one-line error begins (autotune.errors.install_excepthook)
MIN_PROCESS_LIMIT = 64
PROCESSES_PER_CPU = 8


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def process_limit(cpus: int | None = None, nproc: int | None = None) -> tuple[int, str]:
    """How many processes ``autotune launch`` may start on this machine, and why.

    ``max(64, 8 x CPUs)`` (every rank is a whole Python process on this one machine; far
    beyond that they only time-share and time out), lowered to half of ``ulimit -u``
    (``RLIMIT_NPROC``, which counts threads too: each process also costs the launcher a
    reader thread) where that limit is finite. ``cpus``/``nproc`` default to this
    machine's (usable CPUs, soft ``RLIMIT_NPROC``)."""
    cpus = _cpus() if cpus is None else cpus
    if nproc is None:
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    limit = max(MIN_PROCESS_LIMIT, PROCESSES_PER_CPU * cpus)
    why = (f"max({MIN_PROCESS_LIMIT}, {PROCESSES_PER_CPU} x {cpus} CPUs): every rank is a "
           "Python process on this machine")
    if nproc != resource.RLIM_INFINITY and nproc >= 0 and nproc // 2 < limit:
        limit = max(1, nproc // 2)
        why = (f"half of `ulimit -u` = {nproc}: the limit counts threads too, and each "
               "process costs the launcher a reader thread")
    return limit, why


def check_world(workers: int, servers: int = 0, machines: int | None = None) -> None:
    """Reject a job shape before anything starts (``click.BadParameter``, exit code 2)."""
    if workers < 1:
        raise click.BadParameter(f"must be >= 1, got {workers}", param_hint="'--workers'")
    if servers < 0:
        raise click.BadParameter(f"must be >= 0, got {servers}", param_hint="'--servers'")
    if machines is not None and machines < 1:
        raise click.BadParameter(f"must be >= 1, got {machines}", param_hint="'--machines'")
    if machines is not None and workers % machines:
        raise click.BadParameter(
            f"--machines {machines} must divide --workers {workers} (same workers per machine)",
            param_hint="'--machines'")
    limit, why = process_limit()
    if workers + servers > limit:
        hint = "'--workers'" if workers > limit or not servers else "'--workers' + '--servers'"
        raise click.BadParameter(
            f"{workers} workers + {servers} servers = {workers + servers} processes, more than "
            f"this machine's limit of {limit} ({why}). For more ranks use several machines "
            "with torchrun (docs/runtime.md).", param_hint=hint)


def misplaced_options(args: Sequence[str]) -> list[str]:
    """``autotune launch``'s own options (``--servers``, ``-n``, ``--grace=5``, ...) among
    the arguments after the script, which go to the script; none after a ``--``."""
    own = {name for p in launch.params if isinstance(p, click.Option)
           for name in (*p.opts, *p.secondary_opts)}
    found: list[str] = []
    for arg in args:
        if arg == "--":
            break
        name = arg.split("=", 1)[0]
        if name in own and name not in found:
            found.append(name)
    return found


@dataclass
class Proc:
    """One process of a job as :func:`plan_processes` plans it."""

    rank: int
    role: str
    cmd: list[str]
    env: dict[str, str]

    def as_rank(self) -> Rank:
        return Rank(self.rank, self.role, self.cmd, self.env, tag=f"{self.role[0]}{self.rank}")


def plan_processes(script: Sequence[str], workers: int, servers: int = 0,
                   machines: int | None = None, port: int = 29500,
                   python: str = sys.executable) -> list[Proc]:
    """The processes of a job (commands and environments), without starting them."""
    check_world(workers, servers, machines)
    world = workers + servers
    per = workers // machines if machines else workers
    base = {k: v for k, v in os.environ.items()
            if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "AUTOTUNE_ROLE", "AUTOTUNE_MACHINE")}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world),
                TORCHELASTIC_USE_AGENT_STORE="True", PYTHONUNBUFFERED="1")
    base.setdefault("OMP_NUM_THREADS", "1")
    procs = []
    for rank in range(world):
        env = dict(base, RANK=str(rank))
        if rank < workers:
            role, cmd = "worker", [python, *script]
            local, local_world = rank % per, per
            if machines:
                env["AUTOTUNE_MACHINE"] = f"node{rank // per}"
        else:
            role, cmd = "server", [python, "-m", "autotune.server"]
            local, local_world = 0, 1
            if machines:
                env["AUTOTUNE_MACHINE"] = f"server{rank - workers}"
        env.update(AUTOTUNE_ROLE=role, LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(local_world))
        procs.append(Proc(rank, role, cmd, env))
    return procs


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def run_job(script: Sequence[str], workers: int, servers: int = 0, machines: int | None = None,
            grace: float = 10.0, out: IO[str] | None = None, err: IO[str] | None = None,
            live: bool | None = None, fork: bool | None = None) -> int:
    """Start the job, stream its output, return 0 or the first failing rank's exit code.

    Every line is passed on as it comes. ``live`` (default: whether ``out`` is a
    terminal): rank 0 sends its tuning progress as events and the bar is drawn here, live,
    below the ranks' lines (:class:`autotune.progress.Terminal`); otherwise rank 0 prints a
    plain line per trial (``AUTOTUNE_PROGRESS``, when set, is left as it is).

    ``fork`` (default: :func:`autotune.forked.default`, yes unless
    ``AUTOTUNE_LAUNCH_FORK=0``): torch is imported here once and the ranks are forked
    from this process (:mod:`autotune.forked`) rather than started as fresh interpreters.

    A bad job shape raises ``click.BadParameter`` before anything starts."""
    check_world(workers, servers, machines)
    out = out or sys.stdout
    err = err or sys.stderr
    live = _is_terminal(out) if live is None else live
    # The rendezvous port is bound before the ranks start and the store is hosted on it
    # after (_Rendezvous): fresh ranks import torch while the launcher does (~1.4 s of
    # CPU); forked ones have it from the launcher. A rank that connects first waits in the
    # socket's backlog.
    rendezvous = _Rendezvous(workers + servers)
    procs = plan_processes(script, workers, servers, machines, port=rendezvous.port)
    fork = forked.default() if fork is None else fork
    # torch imported once here rather than once a rank (in a process that has not yet)
    fork = fork and forked.preload()
    terminal = None
    if live:
        terminal = progress.Terminal(out)
        for p in procs:
            p.env.setdefault(progress.ENV, "events")
    emit = terminal.feed if terminal is not None else ranks.emitter(out)

    def lost(rank: Rank, code: int) -> None:  # the workers go on without it
        emit(f"autotune launch: rank {rank.rank} (server) failed, "
             f"{describe_exit(code)}; the job goes on while its workers do\n")

    try:
        job = ranks.run([p.as_rank() for p in procs], grace=grace, emit=emit,
                        keep=TAIL_LINES, on_lost=lost, on_started=rendezvous.host, fork=fork)
        failed = _to_blame(job, rendezvous.store)
        stopped = _stopped(job, rendezvous.store) if failed is not None else None
    finally:
        if terminal is not None:
            terminal.close()
        rendezvous.close()
    if stopped is not None:  # a signal, not a failure: one line, no replayed output
        rank, name = stopped
        err.write(f"autotune launch: rank {rank} was stopped by {name}; the ranks stopped "
                  "and the run is aborted\n")
        err.flush()
        return 128 + int(signal.Signals[name])
    if failed is None:
        for e in job.lost:
            err.write(f"autotune launch: rank {e.rank.rank} (server) failed, "
                      f"{describe_exit(e.returncode)}; the workers finished without it\n")
        return 0
    code = failed.returncode
    tag = f"[{failed.rank.tag}]"
    said = [line.strip() for line in failed.lines if line.strip()]
    if said and said[-1].startswith(ONE_LINE):  # it said why in one line: not replayed
        err.write(f"autotune launch: rank {failed.rank.rank} ({failed.rank.role}) failed, "
                  f"{describe_exit(code)} (its one-line error is above)\n")
        err.flush()
        return code if code > 0 else 1
    err.write(f"autotune launch: rank {failed.rank.rank} ({failed.rank.role}) failed, "
              f"{describe_exit(code)}; its last output:\n")
    for line in failed.lines:
        err.write(f"  {tag} {line.rstrip(chr(10))}\n")
    if not failed.lines:
        err.write(f"  {tag} (no output)\n")
    err.flush()
    return code if code > 0 else 1


class _Rendezvous:
    """The job's rendezvous store (torch's ``TCPStore``), on a loopback port bound at once
    and hosted by :meth:`host` once the ranks are started."""

    def __init__(self, world: int) -> None:
        self._listener: socket.socket | None = socket.create_server(
            ("127.0.0.1", 0), backlog=max(128, world))
        self.port: int = self._listener.getsockname()[1]
        self.world = world
        self.store: object = None

    def host(self) -> None:
        from torch.distributed import TCPStore  # torch only here

        if self._listener is None:
            raise RuntimeError("the rendezvous store is hosted once")
        fd, self._listener = self._listener.detach(), None
        self.store = TCPStore("127.0.0.1", self.port, self.world, True,
                              wait_for_workers=False, master_listen_fd=fd)

    def close(self) -> None:
        if self._listener is not None:  # never hosted: the ranks failed to start
            self._listener.close()
        self.store = None


def _stopped(job: ranks.Outcome, store: object) -> tuple[int, str] | None:
    """``(rank, signal name)`` of the first worker that exited after a stop signal, as it
    posted in the rendezvous ``store`` (:meth:`~autotune.runtime.control.faults.Liveness.fail`),
    whatever its exit code (a framework may turn Ctrl-C into exit code 1); None if none
    did."""
    from autotune.runtime.control.faults import Liveness

    for e in job.exits:
        key = f"{Liveness.STOPPED}{e.rank.rank}"
        try:
            if e.rank.role == "worker" and store.check([key]):  # type: ignore[attr-defined]
                name = store.get(key).decode()  # type: ignore[attr-defined]
                if name in signal.Signals.__members__:
                    return e.rank.rank, name
        except Exception:  # noqa: BLE001 - the store is ours; unreadable: not stopped
            return None
    return None


def _to_blame(job: ranks.Outcome, store: object) -> ranks.Exit | None:
    """The failed worker to report: one that posted its own failure in the rendezvous
    ``store`` (its peers failed because of it, perhaps exiting sooner), else the first
    worker seen to exit non-zero."""
    from autotune.runtime.control.faults import Liveness

    for e in job.exits:
        if e.rank.role == "worker" and e.returncode:
            try:
                if store.check([f"{Liveness.FAILED}{e.rank.rank}"]):  # type: ignore[attr-defined]
                    return e
            except Exception:  # noqa: BLE001 - the store is ours; unreadable: the first
                break
    return job.failed


@click.command("launch", context_settings={"ignore_unknown_options": True,
                                           "allow_interspersed_args": False})
@click.option("--workers", "-n", type=int, required=True,
              help="Worker processes (ranks 0..N-1). Workers plus servers may be at most "
                   "max(64, 8 x CPUs) (and half of `ulimit -u`).")
@click.option("--servers", "-k", type=int, default=0, show_default=True,
              help="Summation Service processes (python -m autotune.server).")
@click.option("--machines", "-m", type=int, default=None,
              help="Emulate this many machines (sets AUTOTUNE_MACHINE); must divide --workers.")
@click.option("--grace", type=float, default=10.0, show_default=True,
              help="Seconds the others may take to finish after one process failed.")
@click.option("--fork/--no-fork", default=None,
              help="Fork the ranks from this launcher once it has imported torch (the "
                   "default, saving each rank about 2.5 CPU-s of imports; "
                   "AUTOTUNE_LAUNCH_FORK=0 changes the default), or start each as a "
                   "fresh python.")
@click.argument("script")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def launch(workers: int, servers: int, machines: int | None, grace: float, fork: bool | None,
           script: str, args: tuple[str, ...]) -> None:
    """Run SCRIPT as N workers plus K servers on this machine.

    Everything after SCRIPT goes to the script: autotune launch's own options come
    before it (one found after it is passed on, with a hint on stderr).

    \b
    Examples:
      autotune launch --workers 2 train.py
      autotune launch --workers 4 --servers 2 train.py --epochs 3
      autotune launch -n 8 -k 2 --machines 2 train.py
    """
    if not os.path.exists(script):
        raise click.BadParameter(f"no such script: {script}", param_hint="SCRIPT")
    for option in misplaced_options(args):
        click.echo(f"autotune launch: {option} comes after the script, so {script} gets it; "
                   f"to give it to autotune launch, put it before {script}", err=True)
    check_world(workers, servers, machines)  # before the rendezvous store or any process
    from autotune.signals import TerminateAsInterrupt, exit_code

    # Ctrl-C (SIGINT) or SIGTERM: the ranks get SIGTERM (run_job stops them on the way
    # out; the leader closes its run as aborted), then this exits 130 or 143
    try:
        with TerminateAsInterrupt((signal.SIGINT, signal.SIGTERM)):
            code = run_job([script, *args], workers, servers, machines, grace, fork=fork)
    except KeyboardInterrupt as exc:
        code = exit_code(exc)
        sys.stderr.write(f"autotune launch: {'stopped by SIGTERM' if code == 143 else 'interrupted'}"
                         "; the ranks were stopped\n")
    sys.exit(code)


def main() -> None:
    launch()


if __name__ == "__main__":
    main()
