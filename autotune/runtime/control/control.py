"""The control plane: its groups, and bounded waits for every collective at an iteration
boundary.

The control group holds every rank (made at bootstrap); once servers are lost a worker's
control plane runs over the workers' group instead (:meth:`ControlPlane.without_servers`),
which also carries the workers-only collectives (``worker_max``, the leader's broadcast).

A rank in ``sync`` waits for the others to finish their iteration: servers wait while the
workers run forward and backward, workers wait for a worker that evaluates or writes a
checkpoint. So a wait may not simply end after ``timeout``. Instead it is started
asynchronously and waited on in slices of a second; between slices it

* ends at once if a member was posted as lost by another rank
  (:meth:`~autotune.runtime.control.faults.Liveness.post_lost`);
* after ``timeout``, and every ``timeout`` after that, checks the members' heartbeats:
  a member whose heartbeat stopped (killed, stopped with SIGSTOP, its machine gone) ends
  the wait, named;
* ends after ``idle_timeout`` even when every member is alive (a rank stuck in user code
  with its heartbeat thread still running).

Each end is an :class:`~autotune.runtime.data.engine.OpError` whose ``peers`` are the ranks to
blame; the runtime turns it into a :class:`~autotune.runtime.errors.RuntimeFault`
(:class:`~autotune.runtime.control.blame.Blame`).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, Callable, Sequence

import torch.distributed as dist

from autotune.runtime.control.faults import Liveness
from autotune.runtime.control.groups import destroy
from autotune.runtime.data.engine import OpError

SLICE_S = 1.0


def _timed_out(exc: BaseException) -> bool:
    return "timed out" in str(exc).lower()


class ControlPlane:
    """The control group, the workers' group, and bounded waits on ``torch.distributed``
    work (see the module docstring)."""

    def __init__(self, liveness: Liveness, timeout: float, idle_timeout: float, group: Any,
                 workers_group: Any, everyone: Sequence[int], workers: Sequence[int]):
        self.liveness = liveness
        self.timeout = float(timeout)
        self.idle_timeout = max(float(idle_timeout), self.timeout)
        self.group = group                    # the control group
        self.members: tuple[int, ...] = tuple(everyone)
        self.workers_group = workers_group
        self.workers: tuple[int, ...] = tuple(workers)

    def without_servers(self) -> None:
        """Servers were given up: the control plane runs over the workers' group now."""
        self.group, self.members = self.workers_group, self.workers

    def release(self, own_workers_group: bool) -> None:
        """Clean shutdown: destroy the control group, and the workers' group when the
        runtime owns it (:attr:`Joined.owns_workers_group
        <autotune.runtime.control.bootstrap.Joined.owns_workers_group>`), and let go of both."""
        if self.group is not self.workers_group:
            destroy(self.group)
        if own_workers_group:
            destroy(self.workers_group)
        self.group = self.workers_group = None
        self.members = self.workers = ()

    def op(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` as a control-plane operation: a collective
        (``all_reduce``, ``broadcast``) through :meth:`call`, a point-to-point one
        (``isend``, ``irecv``) through :meth:`wait`, anything else (group creation, DDP's
        coalesced broadcast, bounded by its group's timeout) called as it is. A failure is
        an :class:`OpError` naming the members of ``group`` (the workers when it is the
        workers' group, else the control group's members)."""
        members = self.workers if kwargs.get("group") is self.workers_group else self.members
        try:
            if fn in (dist.all_reduce, dist.broadcast):
                return self.call(what, fn, *args, members=members, **kwargs)
            if fn in (dist.isend, dist.irecv):
                return self.wait(fn(*args, **kwargs), what, members)
            return fn(*args, **kwargs)
        except OpError:
            raise
        except Exception as e:
            raise OpError(what, members, e) from e

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
