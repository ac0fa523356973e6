"""The control plane's waits: every collective at an iteration boundary is bounded.

A rank in ``sync`` waits for the others to finish their iteration: servers wait while the
workers run forward and backward, workers wait for a worker that evaluates or writes a
checkpoint. So a wait may not simply end after ``timeout``. Instead it is started
asynchronously and waited on in slices of a second; between slices it

* ends at once if a member was posted as lost by another rank
  (:meth:`~autotune.runtime.faults.Liveness.post_lost`);
* after ``timeout``, and every ``timeout`` after that, checks the members' heartbeats:
  a member whose heartbeat stopped (killed, stopped with SIGSTOP, its machine gone) ends
  the wait, named;
* ends after ``idle_timeout`` even when every member is alive (a rank stuck in user code
  with its heartbeat thread still running).

Each end is an :class:`~autotune.runtime.engine.OpError` whose ``peers`` are the ranks to
blame; the runtime turns it into a :class:`~autotune.runtime.errors.RuntimeFault`.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, Callable, Sequence

from .engine import OpError
from .faults import Liveness

SLICE_S = 1.0


def _timed_out(exc: BaseException) -> bool:
    return "timed out" in str(exc).lower()


class ControlPlane:
    """Bounded waits on ``torch.distributed`` work (see the module docstring)."""

    def __init__(self, liveness: Liveness, timeout: float, idle_timeout: float):
        self.liveness = liveness
        self.timeout = float(timeout)
        self.idle_timeout = max(float(idle_timeout), self.timeout)

    def call(self, what: str, fn: Callable[..., Any], *args: Any,
             members: Sequence[int], **kwargs: Any) -> None:
        """``fn(*args, async_op=True, **kwargs)`` (a collective), waited on, bounded."""
        try:
            work = fn(*args, async_op=True, **kwargs)
        except Exception as e:  # gloo fails at once on a closed connection
            raise OpError(what, members, e) from e
        self.wait(work, what, members)

    def wait(self, work: Any, what: str, members: Sequence[int]) -> None:
        start = time.monotonic()
        next_check = start + self.timeout
        while True:
            try:
                work.wait(timedelta(seconds=SLICE_S))
                return
            except Exception as e:
                if not _timed_out(e):
                    raise OpError(what, members, e) from e
            gone = sorted(set(self.liveness.lost()) & set(members))
            if gone:
                raise OpError(what, gone, "given up as lost by another rank")
            now = time.monotonic()
            if now >= next_check:
                dead = self.liveness.dead(members)
                if dead:
                    raise OpError(what, dead, f"no heartbeat (waited {now - start:.0f}s)")
                next_check = now + self.timeout
            if now - start >= self.idle_timeout:
                raise OpError(what, (), f"every rank has a heartbeat, but the operation did not "
                                        f"complete in {now - start:.0f}s (idle_timeout)")
