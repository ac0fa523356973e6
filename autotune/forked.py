"""Ranks forked from the launcher once it has imported torch, instead of fresh interpreters.

Every rank of a job imports torch, and its optimizer imports ``torch._dynamo``
(``Optimizer.add_param_group``): about 2.5 CPU-seconds a rank before any work, more than a
short job's training on a small machine. ``autotune launch`` imports them once
(:func:`preload`) and forks each rank from itself (:func:`start`), as Lightning's
``ddp_fork`` strategy and Accelerate's ``notebook_launcher`` start theirs; the pages
share the imported code until written. ``--no-fork`` (or ``AUTOTUNE_LAUNCH_FORK=0``)
starts each rank as a fresh ``python`` instead.

A forked rank is made to look like ``python script.py args`` (or ``python -m module``)
started with the rank's environment:

* ``os.environ`` is the rank's; ``sys.argv``, ``sys.path`` (its ``PYTHONPATH``, its
  script's folder) and ``__main__`` are the script's (:mod:`runpy`); torch uses
  ``OMP_NUM_THREADS`` threads where the rank's environment sets it; stdin is the
  launcher's, stdout and stderr the rank's pipe; every other descriptor is closed (as
  ``subprocess``'s ``close_fds``);
* the launcher's own modules (``autotune``, ``click``, ``rich``) are forgotten, so the
  script imports them afresh, with none of the launcher's state; torch and the standard
  library stay loaded (nothing of them has run but their imports);
* every signal as a fresh interpreter has it: the launcher's handlers go, a signal
  ignored stays ignored (a ``SIGINT`` ignored from a shell's ``&``, which Python and
  the launcher keep); the exception hooks are Python's own; ``random`` and numpy's global
  generator are seeded afresh (they would otherwise repeat in every rank);
* it ends as the interpreter would: non-daemon threads joined, ``atexit`` functions and
  ``weakref`` finalizers run (those of torch's import and the script's, none of the
  launcher's), the streams flushed; the exit code of ``sys.exit``, 1 after an uncaught exception
  (printed by ``sys.excepthook``), death by SIGINT after an uncaught
  ``KeyboardInterrupt``. Then ``os._exit``: objects still alive are not finalised, so a
  gloo process group never left is not torn down by the interpreter's exit.

What differs from a fresh interpreter: ``/proc/<pid>/cmdline`` and ``environ`` show the
launcher's (``ps`` lists every rank as the launch command), string hashes share one seed
across the ranks, and modules the launcher imported stay imported. Forking needs a
launcher whose import of torch was the preload's (:func:`preload`) and with no thread of
its own yet: :func:`autotune.ranks.run` forks every rank before it starts its readers.
"""

from __future__ import annotations

import atexit
import importlib
import io
import os
import runpy
import signal
import subprocess
import sys
import threading
import time
import types
import weakref
from types import TracebackType
from typing import Any, Callable, Sequence

#: imported once by the launcher, before it forks: what every rank imports
PRELOAD = ("torch", "torch.distributed", "torch._dynamo")
#: the launcher's own packages: a forked rank imports them afresh
LAUNCHER_PACKAGES = ("autotune", "click", "rich")
#: ``0`` starts every rank as a fresh interpreter
ENV = "AUTOTUNE_LAUNCH_FORK"
POLL_S = 0.02

#: what Python itself ignores at start
_PYTHON_IGNORES = {signal.SIGPIPE, signal.SIGXFSZ}


def default() -> bool:
    """Whether ranks are forked unless told otherwise: yes, but for ``AUTOTUNE_LAUNCH_FORK=0``."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "no", "false", "off")


def forkable(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is this Python running a script or a module (what can be forked)."""
    return (len(argv) >= 2 and argv[0] == sys.executable
            and (argv[1] == "-m" and len(argv) >= 3 or not argv[1].startswith("-")))


def can_fork(argvs: Sequence[Sequence[str]]) -> bool:
    """Whether these ranks can be forked from this process now: :func:`preload` made it
    ready, it has no thread of its own yet, and each runs this Python."""
    return (_Preloaded.done and threading.active_count() == 1
            and all(forkable(argv) for argv in argvs))


class _Preloaded:
    """What the preload's imports left to run at exit (``atexit`` functions, ``weakref``
    finalizers): a forked rank keeps these, as a fresh interpreter importing torch makes
    them, and none of the launcher's own (a temporary folder's clean-up among them).
    ``path``: ``sys.path`` without the preloading process's own ``PYTHONPATH`` entries
    and script folder, what a fresh interpreter's path is built on.

    The class is kept in a module of its own in ``sys.modules`` (:data:`STATE`), outside
    the packages a forked rank forgets: a launcher that was itself forked (by
    ``tests/zygote.py``) finds its preload done and forks its own ranks."""

    at_exit: list[tuple[Callable[..., Any], tuple, dict]] = []
    finalizers: set[weakref.finalize] = set()
    path: list[str] = []
    done = False


#: where the preload's record outlives a fresh import of this module (in a forked process)
STATE = "_autotune_forked_preload"
if STATE in sys.modules:
    _Preloaded = sys.modules[STATE].Preloaded  # type: ignore[misc]  # noqa: F811
else:
    sys.modules[STATE] = types.ModuleType(STATE, "autotune.forked's preload, kept across a fork")
    sys.modules[STATE].Preloaded = _Preloaded  # type: ignore[attr-defined]


def preload(extra: Sequence[str] = ()) -> bool:
    """Import what every rank imports (:data:`PRELOAD`), and the modules ``extra``, once,
    in the launcher; whether its ranks may be forked. Only a process where these imports
    are torch's first may fork (``autotune launch``, ``tune``, ``selftest``): there what
    torch leaves to run at exit is known (:class:`_Preloaded`); elsewhere (a notebook, a
    test process that has imported torch) the ranks are fresh interpreters."""
    if _Preloaded.done:
        return True
    if "torch" in sys.modules:
        return False
    register = atexit.register
    before = set(weakref.finalize._registry)  # type: ignore[attr-defined]

    def record(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        _Preloaded.at_exit.append((func, args, kwargs))
        return register(func, *args, **kwargs)

    atexit.register = record
    try:
        for name in (*PRELOAD, *extra):
            importlib.import_module(name)
    finally:
        atexit.register = register
    _Preloaded.finalizers = set(weakref.finalize._registry) - before  # type: ignore[attr-defined]
    own = set(_pythonpath(os.environ))
    _Preloaded.path = [p for p in sys.path[1:] if p not in own]
    # CUDA cannot be used in a child forked after it was initialised: nothing imported
    # here initialises it, and a launcher where something did starts fresh ranks
    _Preloaded.done = not sys.modules["torch"].cuda.is_initialized()
    return _Preloaded.done


class Forked:
    """A forked rank, with the part of :class:`subprocess.Popen` that
    :func:`autotune.ranks.run` uses: ``pid``, ``stdout`` (its output, as text lines),
    ``returncode``, :meth:`poll` and :meth:`wait`."""

    def __init__(self, pid: int, stdout: io.TextIOBase) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its code is lost
                self.returncode = 1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout)
            time.sleep(POLL_S)
        assert self.returncode is not None
        return self.returncode


def start(argv: Sequence[str], env: dict[str, str], *, detach: bool = False,
          enter: Callable[[], None] | None = None) -> Forked:
    """Fork a rank that runs ``argv`` (``[sys.executable, script, ...]`` or
    ``[sys.executable, "-m", module, ...]``) with ``env``; its stdout and stderr are one
    pipe, read through the returned :class:`Forked`'s ``stdout``. ``detach``: the rank
    leads a session of its own (its process group can be signalled) and reads no stdin,
    as ``subprocess``'s ``start_new_session`` and ``stdin=DEVNULL``. ``enter()`` runs in
    the rank before the script (an emulated host's namespaces); an ``OSError`` from it is
    printed to the rank's output and the rank exits 1."""
    if not can_fork([argv]):
        raise RuntimeError(f"cannot fork {list(argv)} here (see can_fork)")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the rank: never returns into the launcher's code
        try:
            os.close(read)
            stdin = None
            if detach:
                os.setsid()
                stdin = os.open(os.devnull, os.O_RDONLY)
        except BaseException:
            os._exit(1)
        become(list(argv[1:]), env, write, stdin=stdin, enter=enter)
    os.close(write)
    if detach:  # its group exists before the launcher may signal it
        deadline = time.monotonic() + 5.0
        while _pgid(pid) not in (pid, None) and time.monotonic() < deadline:
            time.sleep(0.001)
    return Forked(pid, open(read, encoding="utf-8", errors="replace", buffering=1))


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def become(args: list[str], env: dict[str, str], out: int, err: int | None = None,
           stdin: int | None = None, enter: Callable[[], None] | None = None) -> None:
    """Turn a child just forked from a preloaded process into ``python ARGS`` with
    ``env`` (the module docstring says how alike): stdout to ``out``, stderr to ``err``
    (else ``out`` too), stdin from ``stdin`` (else this process's); ``enter()`` first,
    where given (see :func:`start`); never returns."""
    code = 1
    try:
        if stdin is not None:
            os.dup2(stdin, 0)
        os.dup2(out, 1)
        os.dup2(out if err is None else err, 2)
        os.closerange(3, _max_fd())
        _fresh_signals()
        os.environ.clear()
        os.environ.update(env)
        for name in [m for m in sys.modules if m.split(".")[0] in LAUNCHER_PACKAGES]:
            del sys.modules[name]
        sys.path[1:] = _pythonpath(env) + _Preloaded.path
        # OpenMP read OMP_NUM_THREADS when torch loaded, in the preloading process
        threads = env.get("OMP_NUM_THREADS", "").strip()
        if threads.isdigit() and int(threads) > 0:
            sys.modules["torch"].set_num_threads(int(threads))
        sys.stdout = sys.__stdout__ = _stream(1, "strict")
        sys.stderr = sys.__stderr__ = _stream(2, "backslashreplace")
        if enter is not None:
            try:
                enter()
            except OSError as e:
                print(f"autotune: cannot start {' '.join(args)}: {e}", file=sys.stderr)
                return
        sys.excepthook = sys.__excepthook__
        threading.excepthook = threading.__excepthook__
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        _fresh_exit()
        code = _run(args)
    finally:
        os._exit(code)


def _pythonpath(env: dict[str, str] | os._Environ) -> list[str]:
    """The entries ``PYTHONPATH`` puts on a fresh interpreter's path."""
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _fresh_exit() -> None:
    """Only what the preload's imports registered runs at this rank's exit: none of the
    launcher's ``atexit`` functions or ``weakref`` finalizers (they would clean up its
    temporary folders under it)."""
    for f in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        if f not in _Preloaded.finalizers:
            f.detach()
    atexit._clear()
    # the finalizers' exit function first (it runs last), wherever the launcher registered
    # it: the class believes it registered, and the script's finalizers count on it
    atexit.register(weakref.finalize._exitfunc)  # type: ignore[attr-defined]
    weakref.finalize._registered_with_atexit = True  # type: ignore[attr-defined]
    for func, args, kwargs in _Preloaded.at_exit:
        if func != weakref.finalize._exitfunc:  # type: ignore[attr-defined]
            atexit.register(func, *args, **kwargs)


def _fresh_signals() -> None:
    """Each signal as a fresh interpreter would have it: one ignored here stays ignored
    (inherited so, as from a shell's ``&``: the launcher keeps a stop signal inherited as
    ignored), the launcher's handlers go: ``SIGINT`` raises ``KeyboardInterrupt``, the
    rest take their default action, but those Python itself ignores."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            if signal.getsignal(sig) == signal.SIG_IGN or sig in _PYTHON_IGNORES:
                how = signal.SIG_IGN
            elif sig == signal.SIGINT:
                how = signal.default_int_handler
            else:
                how = signal.SIG_DFL
            signal.signal(sig, how)
        except (OSError, ValueError, TypeError):  # one that cannot be set (a real-time one)
            pass


def _run(args: list[str]) -> int:
    """Run the script as ``__main__``, then end as the interpreter would; the exit code."""
    interrupted = False
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]  # runpy puts the module's file first
            sys.path[0] = os.getcwd()  # as ``python -m`` has it
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
            runpy.run_path(args[0], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = _exit_code(e.code)
    except BaseException as e:  # noqa: BLE001 - printed as the interpreter prints it
        tb = _from_script(e.__traceback__)
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        code, interrupted = 1, isinstance(e, KeyboardInterrupt)
    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if interrupted:  # as Python ends after an uncaught KeyboardInterrupt: killed by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _from_script(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the script's own frames on, as ``python script.py`` shows it
    (without this module's and runpy's)."""
    skip = {__file__, runpy.__file__, "<frozen runpy>"}
    while tb is not None and tb.tb_next is not None and \
            tb.tb_frame.f_code.co_filename in skip:
        tb = tb.tb_next
    return tb


def _exit_code(code: object) -> int:
    """``sys.exit(code)``'s exit status, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _stream(fd: int, errors: str) -> io.TextIOWrapper:
    """A text stream on ``fd`` as an unbuffered interpreter makes it (the launcher runs
    its ranks with ``PYTHONUNBUFFERED=1``): every write goes straight to the pipe."""
    return io.TextIOWrapper(open(fd, "wb", buffering=0, closefd=False), encoding="utf-8",
                            errors=errors, line_buffering=True, write_through=True)


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        return 1024
