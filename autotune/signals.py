"""Stop signals as exceptions, so that what was started is closed (issue 28).

Python turns SIGINT into :class:`KeyboardInterrupt`; SIGTERM kills the process outright,
so a run in the results store would stay ``running`` for ever. :class:`TerminateAsInterrupt`
turns SIGTERM into :class:`Terminated`, a :class:`KeyboardInterrupt`, in the main
thread, so one ``except KeyboardInterrupt`` (or the ``with`` block's ``__exit__``) handles
both and closes the run as ``aborted``. :func:`status_of` says which status an exception
closes a run with; :func:`shielded` keeps further stop signals from cutting the closing
short. Import-light: standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Callable, Iterator

__all__ = ["Terminated", "TerminateAsInterrupt", "status_of", "shielded", "exit_code"]


class Terminated(KeyboardInterrupt):
    """A stop signal (SIGTERM) arrived; raised like Ctrl-C's KeyboardInterrupt."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = int(signum)


def exit_code(exc: BaseException) -> int:
    """The shell's exit code for a process stopped by ``exc``: 128 + the signal (130 for
    Ctrl-C, 143 for SIGTERM)."""
    return 128 + (exc.signum if isinstance(exc, Terminated) else int(signal.SIGINT))


def status_of(exc: BaseException | None) -> str:
    """The status a run closes with after ``exc``: ``finished`` (none), ``aborted``
    (KeyboardInterrupt, SIGTERM included), else ``failed``."""
    if exc is None:
        return "finished"
    if isinstance(exc, KeyboardInterrupt):
        return "aborted"
    return "failed"


def _main() -> bool:
    return threading.current_thread() is threading.main_thread()


class TerminateAsInterrupt:
    """While installed (main thread only; elsewhere it does nothing), SIGTERM raises
    :class:`Terminated` once; a repeat while that is being handled is ignored.
    :meth:`restore` puts the previous handler back (idempotent).

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
        self.fired = False

    def install(self) -> "TerminateAsInterrupt":
        if self._old or not _main():
            return self
        for sig in self.signals:
            self._old[sig] = signal.getsignal(sig)
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
            threading.Thread(target=self._watch, args=(r,), daemon=True,
                             name="autotune-signals").start()
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
        raise Terminated(signum)

    def restore(self) -> None:
        if not _main():
            return
        for sig, old in self._old.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._old.clear()
        if self._wakeup is not None:
            r, w, old_fd = self._wakeup
            self._wakeup = None
            signal.set_wakeup_fd(old_fd)
            os.close(w)  # the watcher reads EOF, closes the read end and ends

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
