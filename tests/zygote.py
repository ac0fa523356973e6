"""The tests' own ``python`` processes, forked from one that has imported torch already.

A test that runs ``python -m autotune.cli launch ...`` (or ``tune``, or a job's script)
pays about 3 CPU-seconds before the process does anything: importing torch and
``torch._dynamo``. The suite starts about a hundred of them on two cores. A *zygote*
(one per test process, started on first use) imports them once, and what a tuning
session imports besides (:data:`PRELOAD`; :func:`autotune.forked.preload`), and forks
each of these processes from itself, as ``autotune launch`` forks its ranks
(:mod:`autotune.forked`: what a forked process shares with a fresh interpreter and what
it does not). A launcher forked so finds its preload done and forks its own ranks in
turn.

:class:`Popen` is :class:`subprocess.Popen` with only the start changed: its pipes,
``communicate``, timeouts, signals (the process has its own pid; ``start_new_session``
makes it a session leader) and exit codes are ``subprocess``'s, the exit status read
from the zygote, which is the process's parent. :func:`run` is :func:`subprocess.run` on
it. A command that is not this Python running a script or a module, or that asks for
what a fork cannot give (``preexec_fn``, ``pass_fds``, another executable, a shell),
starts as a fresh process, as ``subprocess`` starts it; so does every command where
``AUTOTUNE_TEST_ZYGOTE=0``.

The protocol, over a ``SOCK_SEQPACKET`` socket pair: the test sends one JSON message
(``argv``, ``env``, ``cwd``, ``session``) with four descriptors (stdin, stdout, stderr,
and the write end of a pipe for the exit status); the zygote answers with the child's
pid, and once the child has ended writes its exit status (``subprocess``'s
``returncode``) into that pipe and closes it. Nothing but these JSON messages crosses.
"""

from __future__ import annotations

import atexit
import inspect
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ENV = "AUTOTUNE_TEST_ZYGOTE"
MAX_MESSAGE = 1 << 20
POLL_S = 0.02
START_S = 120.0
TESTS = Path(__file__).resolve().parent
#: imported by the zygote beside torch: what a tuning session's leader imports (the
#: tuner's scikit-optimize and scikit-learn, with scipy and pandas: about 1.2 CPU-s) and
#: the store's (SQLAlchemy, networkx)
PRELOAD = ("skopt", "sklearn.gaussian_process", "sqlalchemy", "networkx")

# Popen._execute_child's parameters on the Pythons this was written against (3.11+):
# another signature means a fresh process for every command
_PARAMETERS = ["args", "executable", "preexec_fn", "close_fds", "pass_fds", "cwd", "env",
               "startupinfo", "creationflags", "shell", "p2cread", "p2cwrite", "c2pread",
               "c2pwrite", "errread", "errwrite", "restore_signals", "gid", "gids", "uid",
               "umask", "start_new_session", "process_group"]
_SUPPORTED = list(inspect.signature(subprocess.Popen._execute_child).parameters)[1:] \
    == _PARAMETERS


# ------------------------------------------------------------------ the zygote's side
def serve(fd: int) -> None:
    """The zygote: preload torch, then fork a child for each request on socket ``fd``
    until the other end closes; reap the children and write their exit statuses."""
    from autotune import forked

    sock = socket.socket(fileno=fd)
    if not forked.preload(extra=PRELOAD):
        raise SystemExit("zygote: torch was imported before the preload")
    statuses: dict[int, int] = {}  # child pid -> the write end of its status pipe
    while True:  # until the tests' process closes its end (it has ended)
        ready, _, _ = select.select([sock], [], [], POLL_S)
        if ready and not _serve_one(sock, statuses):
            return
        _reap(statuses)


def _serve_one(sock: socket.socket, statuses: dict[int, int]) -> bool:
    from autotune import forked

    msg, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 4)
    if not msg:
        return False
    req = json.loads(msg)
    stdin, out, err, status = fds
    pid = os.fork()
    if pid == 0:  # the child: never returns here
        try:
            if req["session"]:
                os.setsid()
            os.chdir(req["cwd"])
        except BaseException as e:  # noqa: BLE001 - as exec's failure: said, exit 1
            os.write(err, f"zygote: {e}\n".encode())
            os._exit(1)
        forked.become(req["argv"][1:], req["env"], out, err, stdin)
    for f in (stdin, out, err):
        os.close(f)
    statuses[pid] = status
    sock.send(json.dumps({"pid": pid}).encode())
    return True


def _reap(statuses: dict[int, int]) -> None:
    while statuses:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = statuses.pop(pid, None)
        if fd is not None:
            try:
                os.write(fd, str(os.waitstatus_to_exitcode(st)).encode())
            except OSError:
                pass
            os.close(fd)


# ------------------------------------------------------------------ the tests' side
class _Zygote:
    """This process's zygote: started on first use, ended with this process."""

    lock = threading.Lock()
    sock: socket.socket | None = None
    proc: subprocess.Popen | None = None
    owner = 0

    @classmethod
    def ask(cls, req: dict[str, Any], fds: list[int]) -> int:
        with cls.lock:
            if cls.sock is None or cls.owner != os.getpid():
                cls._start()
            assert cls.sock is not None
            socket.send_fds(cls.sock, [json.dumps(req).encode()], fds)
            ready, _, _ = select.select([cls.sock], [], [], START_S)
            if not ready:
                raise RuntimeError(f"the tests' zygote (pid {cls.proc.pid}) did not answer "
                                   f"in {START_S:.0f} s")
            reply = cls.sock.recv(MAX_MESSAGE)
            if not reply:
                raise RuntimeError(f"the tests' zygote (pid {cls.proc.pid}) ended")
            return int(json.loads(reply)["pid"])

    @classmethod
    def _start(cls) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        cls.proc = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.path[0] = {str(TESTS)!r}; "
             f"import zygote; zygote.serve({theirs.fileno()})"],
            pass_fds=[theirs.fileno()], env=env, cwd=TESTS.parent,
            stdin=subprocess.DEVNULL)
        theirs.close()
        cls.sock, cls.owner = ours, os.getpid()
        atexit.register(cls.close)

    @classmethod
    def close(cls) -> None:
        if cls.sock is not None and cls.owner == os.getpid():
            cls.sock.close()
            cls.sock = None


def enabled() -> bool:
    return _SUPPORTED and os.environ.get(ENV, "1").strip() not in ("0", "no", "false", "off")


def _forkable(argv: Any, executable: Any, shell: bool) -> bool:
    """This Python running a script or a module, as :func:`autotune.forked.forkable` says."""
    from autotune import forked

    return (not shell and executable is None and isinstance(argv, (list, tuple))
            and all(isinstance(a, (str, os.PathLike)) for a in argv)
            and forked.forkable([os.fsdecode(a) for a in argv]))


class Popen(subprocess.Popen):
    """:class:`subprocess.Popen`, forked from the zygote where it can be (module doc)."""

    _status: int | None = None

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread,
                       c2pwrite, errread, errwrite, restore_signals, gid, gids, uid,
                       umask, start_new_session, process_group):  # noqa: ANN001
        plain = (preexec_fn is None and not pass_fds and gid is None and not gids
                 and uid is None and umask < 0 and process_group in (None, -1))
        if not (enabled() and plain and _forkable(args, executable, shell)):
            return super()._execute_child(
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread,
                errwrite, restore_signals, gid, gids, uid, umask, start_new_session,
                process_group)
        argv = [os.fsdecode(a) for a in args]
        read, write = os.pipe()
        try:
            fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
                   errwrite if errwrite != -1 else 2, write]
            req = {"argv": argv, "env": dict(os.environ if env is None else env),
                   "cwd": os.path.abspath(os.fsdecode(cwd)) if cwd is not None
                   else os.getcwd(), "session": bool(start_new_session)}
            self.pid = _Zygote.ask(req, fds)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
        self._status = read
        self._child_created = True

    def _read_status(self, timeout: float | None) -> None:
        if self.returncode is not None or self._status is None:
            return
        ready, _, _ = select.select([self._status], [], [], timeout)
        if ready:
            data = b""
            while chunk := os.read(self._status, 64):
                data += chunk
            os.close(self._status)
            self._status = None
            # no status: the zygote died before the child did (as waitpid's ECHILD)
            self.returncode = int(data) if data else 255

    def _internal_poll(self, _deadstate=None, **_: Any):  # noqa: ANN001
        if self._status is None and self.returncode is None:
            return super()._internal_poll(_deadstate=_deadstate)
        self._read_status(0)
        return self.returncode

    def _wait(self, timeout):  # noqa: ANN001
        if self._status is None and self.returncode is None:
            return super()._wait(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read_status(left)
        return self.returncode


def run(*popenargs: Any, input: Any = None, capture_output: bool = False,
        timeout: float | None = None, check: bool = False,
        **kwargs: Any) -> subprocess.CompletedProcess:
    """:func:`subprocess.run`, on :class:`Popen`."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = subprocess.PIPE
        kwargs["stderr"] = subprocess.PIPE
    with Popen(*popenargs, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            exc.stdout, exc.stderr = process.communicate()
            raise
        except BaseException:
            process.kill()
            raise
        retcode = process.poll()
        if check and retcode:
            raise subprocess.CalledProcessError(retcode, process.args, output=stdout,
                                                stderr=stderr)
    return subprocess.CompletedProcess(process.args, retcode, stdout, stderr)
