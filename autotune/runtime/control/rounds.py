"""One rank's averaging rounds as the protocol sees them: finished, counted, or blamed.

The :class:`~autotune.runtime.data.averager.Averager` runs a round (hooks, streams, the copies
back into ``.grad``); :class:`Rounds` stands between it and the
:class:`~autotune.runtime.core.Runtime`'s calls: a round that fails becomes the
:class:`~autotune.runtime.errors.RuntimeFault` that names the rank to blame
(:class:`~autotune.runtime.control.blame.Blame`; a server's failure is fatal), a round left open
before a ``sync`` is completed and its result discarded, and the rounds that wrote
``.grad`` (or that a server served) are counted: :attr:`Runtime.iterations`.
"""

from __future__ import annotations

import warnings

from autotune.runtime.control.blame import Blame
from autotune.runtime.data.averager import Averager
from autotune.runtime.errors import RuntimeFault, UsageError


class Rounds:
    """Completes and counts one rank's rounds (module docstring)."""

    def __init__(self, averager: Averager, blame: Blame) -> None:
        self._averager = averager
        self._blame = blame
        self.iterations = 0  # rounds that wrote .grad (workers) or were served (servers)

    def complete(self, write: bool = True) -> None:
        """Complete the open round (:meth:`Averager.complete`), its failure as a fault."""
        try:
            self._averager.complete(write)
        except UsageError:
            raise
        except Exception as e:
            fault = self._blame.fault(e)
            raise fault from (None if fault is e else e)
        if write:
            self.iterations += 1

    def discard_open(self) -> None:
        """Before a sync (called from :meth:`Runtime.sync`): complete a round left open, so
        the servers' round ends; a recoverable fault in it is dropped with the result."""
        warnings.warn("rt.sync() before rt.wait(): the open iteration is completed and its "
                      "result discarded", RuntimeWarning, stacklevel=3)
        try:
            self.complete(write=False)
        except RuntimeFault as e:
            if not e.recoverable:
                raise

    def serve(self) -> None:
        """Servers: sum this round's owned chunks; any failure is fatal."""
        try:
            self._averager.serve()
        except Exception as e:
            fault = self._blame.fault(e, fatal=True)
            raise fault from (None if fault is e else e)
        self.iterations += 1
