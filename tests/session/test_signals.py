"""autotune.signals (issue 28): SIGTERM as an exception, the status a run closes with,
the watcher that acts at once."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from autotune.signals import Terminated, TerminateAsInterrupt, exit_code, shielded, status_of


def test_status_and_exit_code_of_an_exception():
    assert status_of(None) == "finished"
    assert status_of(KeyboardInterrupt()) == "aborted" == status_of(Terminated())
    assert status_of(RuntimeError("x")) == "failed"
    assert exit_code(KeyboardInterrupt()) == 130 and exit_code(Terminated()) == 143


def test_sigterm_raises_once_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    seen: list[int] = []
    with pytest.raises(Terminated):
        with TerminateAsInterrupt(on_signal=seen.append):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler raises here
    assert signal.getsignal(signal.SIGTERM) is before
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [signal.SIGTERM]


def test_off_the_main_thread_nothing_is_installed():
    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=lambda: TerminateAsInterrupt().install())
    t.start()
    t.join()
    assert signal.getsignal(signal.SIGTERM) is before


def test_shielded_ignores_stop_signals_inside():
    with shielded():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
