"""Helpers for the stop-signal tests (tests/session/test_signals.py, tests/offline/test_tune.py)."""

from __future__ import annotations

import os
import signal


class SigintWhenFreed:
    """An object whose finaliser sends this process SIGINT: made and dropped
    (``SigintWhenFreed()``), its ``__del__`` runs at once, and the signal's handler runs
    inside it, where Python drops an exception raised."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        self.sent = True  # bytecode after the signal: its handler runs in here
