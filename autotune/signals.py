"""Stop signals without races: recorded inside the library, raised at safe points.

Python turns SIGINT into :class:`KeyboardInterrupt`, raised wherever the main thread happens
to be; SIGTERM kills the process outright, so a run in the results store would stay
``running`` for ever. Neither is safe inside the library: an exception raised by a signal
handler while ``threading.Condition.wait`` re-acquires its lock leaves the lock broken
(``RuntimeError('release unlocked lock')``), and the run was then closed as ``failed`` with
an internal error (issue 38).

:class:`TerminateAsInterrupt` installs one handler for the signals it is given (a session
gives SIGINT and SIGTERM). Outside library code (the user's own, ``depth == 0``) it raises
:class:`Terminated`, a :class:`KeyboardInterrupt`, at once, as Python would. Inside a
library section (:func:`deferred`: a session's ``step()``, its start and end, the gradient
hooks) it only records the signal; the section raises it at its end, and long waits call
:func:`check` between bounded slices, where nothing is held. So it does inside a
finaliser (``__del__``) the user's code happens to run, since Python drops an exception
raised there, and the stop with it: the next safe point (``step()``) raises it. Once a
stop was received, :func:`status_of` closes the run as ``aborted`` whatever exception
follows (a peer that left, a broken collective). :func:`shielded` keeps further stop
signals from cutting the closing short. Import-light: standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Callable, Iterator

__all__ = ["Terminated", "TerminateAsInterrupt", "status_of", "shielded", "exit_code",
           "deferred", "check", "pending", "received"]


class Terminated(KeyboardInterrupt):
    """A stop signal (SIGTERM, or SIGINT under a session) arrived; raised like Ctrl-C's
    KeyboardInterrupt."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = int(signum)


def exit_code(exc: BaseException) -> int:
    """The shell's exit code for a process stopped by ``exc``: 128 + the signal (130 for
    Ctrl-C, 143 for SIGTERM)."""
    return 128 + (exc.signum if isinstance(exc, Terminated) else int(signal.SIGINT))


def status_of(exc: BaseException | None) -> str:
    """The status a run closes with after ``exc``: ``finished`` (none), ``aborted``
    (KeyboardInterrupt, SIGTERM included; an error that says it ``aborts``: another rank
    was stopped by a signal; or anything once a stop signal was :func:`received`: what
    broke was broken by the stop, and the watcher thread has already closed the run as
    ``aborted``), else ``failed``."""
    if (isinstance(exc, KeyboardInterrupt) or getattr(exc, "aborts", False)
            or received() is not None):
        return "aborted"
    return "finished" if exc is None else "failed"


class _Stops:
    """This process's stop state (touched by the main thread and its signal handler)."""

    def __init__(self) -> None:
        self.depth = 0                 # library sections the main thread is inside
        self.pending: int | None = None   # a stop recorded, not yet raised
        self.received: int | None = None  # the first stop since the handler was installed


_STOPS = _Stops()


def received() -> int | None:
    """The stop signal received since a :class:`TerminateAsInterrupt` was installed, or
    None."""
    return _STOPS.received


def pending() -> bool:
    """Whether a stop was recorded inside a library section and not yet raised."""
    return _STOPS.pending is not None


def check() -> None:
    """A safe point: raise the stop recorded inside a library section, if any (main thread;
    elsewhere nothing). Call it where no lock is held and nothing is half-done."""
    signum = _STOPS.pending
    if signum is not None and _main():
        _STOPS.pending = None
        raise Terminated(signum)


@contextlib.contextmanager
def deferred(raise_at_end: bool = True) -> Iterator[None]:
    """A library section: a stop signal arriving inside is recorded, not raised (main
    thread). At the end of the outermost section (``raise_at_end``) it is raised; when the
    section ended by another exception after a stop, the stop is raised from it (the
    exception is what the stop broke). Sections inside code the library does not own the
    frames of (gradient hooks inside autograd) pass ``raise_at_end=False``: the stop waits
    for the next section's end (the session's ``step()``)."""
    if not _main():
        yield
        return
    _STOPS.depth += 1
    try:
        yield
    except Exception as exc:
        _STOPS.depth -= 1
        if _STOPS.depth == 0 and raise_at_end and _STOPS.pending is not None:
            signum, _STOPS.pending = _STOPS.pending, None
            raise Terminated(signum) from exc
        raise
    except BaseException:
        _STOPS.depth -= 1
        raise
    _STOPS.depth -= 1
    if _STOPS.depth == 0 and raise_at_end:
        check()


def _main() -> bool:
    return threading.current_thread() is threading.main_thread()


def _in_finaliser(frame: Any) -> bool:
    """Whether ``frame`` runs inside a finaliser (an object's ``__del__``, a
    ``weakref.finalize`` callback), where an exception raised is printed and dropped."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or (code.co_name == "__call__"
                                          and code.co_filename.endswith("weakref.py")):
            return True
        frame = frame.f_back
    return False


class TerminateAsInterrupt:
    """While installed (main thread only; elsewhere it does nothing), each of ``signals``
    (SIGTERM by default) raises :class:`Terminated` once, at once outside library sections
    and at the section's safe point inside one (module docstring); a repeat is ignored.
    :meth:`restore` puts the previous handlers back (idempotent). A signal that the process
    ignores when this is installed (inherited as ignored: a background job of a shell
    script, ``nohup``) stays ignored, as it does in the launcher and in every rank that
    inherits it.

    ``on_signal(signum)``, if given, is called once, from a thread of its own, as soon
    as SIGINT or SIGTERM arrives, even while the main thread is blocked in C (a
    collective waiting for a peer that the same signal has just stopped, where Python's
    handler would only run after the collective's timeout): through
    :func:`signal.set_wakeup_fd`, which is put back at :meth:`restore`."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM,),
                 on_signal: Callable[[int], None] | None = None) -> None:
        self.signals = signals
        self.on_signal = on_signal
        self._old: dict[int, Any] = {}
        self._wakeup: tuple[int, int, int] | None = None  # read end, write end, old fd
        self._watcher: threading.Thread | None = None
        self.fired = False

    def install(self) -> "TerminateAsInterrupt":
        if self._old or not _main():
            return self
        _STOPS.pending = _STOPS.received = None
        for sig in self.signals:
            old = signal.getsignal(sig)
            if old == signal.SIG_IGN:
                # ignored, as a background job or nohup inherits it: it stays ignored here
                # as in the launcher and every other rank (which inherit it alike)
                continue
            self._old[sig] = old
            signal.signal(sig, self._handle)
        if self.on_signal is not None:
            r, w = os.pipe()
            os.set_blocking(w, False)
            try:
                old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            except (ValueError, OSError):  # pragma: no cover - not the main interpreter
                os.close(r)
                os.close(w)
                return self
            self._wakeup = (r, w, old)
            self._watcher = threading.Thread(target=self._watch, args=(r,), daemon=True,
                                             name="autotune-signals")
            self._watcher.start()
        return self

    def _watch(self, fd: int) -> None:
        called = False
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                data = b""
            if not data:
                with contextlib.suppress(OSError):
                    os.close(fd)
                return
            if not called and any(b in (signal.SIGINT, signal.SIGTERM) for b in data):
                called = True
                try:
                    self.on_signal(next(b for b in data if b in (signal.SIGINT, signal.SIGTERM)))
                except Exception:  # noqa: BLE001 - never let the watcher kill anything
                    pass

    def _handle(self, signum: int, frame: Any) -> None:
        if self.fired:
            return
        self.fired = True
        _STOPS.received = signum
        if _STOPS.depth > 0 or _in_finaliser(frame):
            # inside the library: raised at its safe point; inside a finaliser, where
            # Python prints an exception and drops it (and the stop with it): raised at
            # the next safe point (a session's step())
            _STOPS.pending = signum
            return
        raise Terminated(signum)

    def restore(self) -> None:
        if not _main():
            return
        for sig, old in self._old.items():
            # only where ours is still in place: a framework that set its own handler
            # meanwhile (Lightning ignores SIGINT while it tears down) keeps it
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._old.clear()
        _STOPS.pending = _STOPS.received = None
        if self._wakeup is not None:
            r, w, old_fd = self._wakeup
            self._wakeup = None
            signal.set_wakeup_fd(old_fd)
            os.close(w)  # the watcher reads EOF, closes the read end and ends
        if self._watcher is not None and self._watcher is not threading.current_thread():
            # joined, so that no thread of ours outlives the session (an on_signal still
            # running, e.g. stopping the ranks, gets a few seconds)
            self._watcher.join(timeout=5.0)
            self._watcher = None

    def __enter__(self) -> "TerminateAsInterrupt":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()


@contextlib.contextmanager
def shielded(on: bool = True) -> Iterator[None]:
    """SIGINT and SIGTERM ignored inside (main thread, ``on`` only): the closing of a run
    that a signal stopped is not itself cut short by the next one."""
    if not on or not _main():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
