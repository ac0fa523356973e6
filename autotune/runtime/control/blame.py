"""Fault attribution: which rank a failure is blamed on, and what the fault does to the
runtime (broken, or servers given up).

Every failure of a rank's runtime passes through its :class:`Blame`: control-plane
operations run through :meth:`Blame.op` (bounded by the
:class:`~autotune.runtime.control.control.ControlPlane`), the averaging rounds' errors through
:meth:`Blame.fault`. A fault that is not recoverable breaks the runtime
(:attr:`Blame.broken`): its groups may hold half-finished operations.

A failed operation comes back as an :class:`~autotune.runtime.data.engine.OpError` naming the
ranks it involved, which seldom says which of them failed. :meth:`Blame.fault_from` turns
it into the :class:`~autotune.runtime.errors.RuntimeFault` that names one, a
:class:`~autotune.runtime.errors.PeerFailed`: a rank that posted its own failure (its
code raised; the cause it posted is given), else a peer posted as lost by another rank,
else one whose heartbeat stopped and that did not leave on purpose
(:class:`~autotune.runtime.control.faults.Liveness`), else the only peer involved.

When every rank to blame is a server, the servers are given up instead
(:meth:`Blame.drop_servers`): every rank is told through the store, the groups the
servers are in are never freed, and a worker goes on without servers (the control plane
over the workers' group, all-reduce only); the fault is a recoverable
:class:`~autotune.runtime.errors.ServerLost`.
"""

from __future__ import annotations

from typing import Any, Callable

from autotune.runtime.control.control import ControlPlane
from autotune.runtime.control.faults import Liveness
from autotune.runtime.control.groups import GroupCache, keep_forever
from autotune.runtime.control.reconfigure import Active
from autotune.runtime.control.world import WorldInfo
from autotune.runtime.data.averager import Averager
from autotune.runtime.data.engine import OpError
from autotune.runtime.data.layout import Layout
from autotune.runtime.errors import PeerFailed, RuntimeFault, ServerLost


class Blame:
    """One rank's fault attribution (see the module docstring). ``describe`` names a rank
    in an error; ``plane`` runs the control-plane operations; the other parts are those a
    server loss changes."""

    def __init__(self, info: WorldInfo, liveness: Liveness, describe: Callable[[int], str],
                 plane: ControlPlane, groups: GroupCache, active: Active, layout: Layout,
                 averager: Averager):
        self.info = info
        self.liveness = liveness
        self.describe = describe
        self.plane = plane
        self.groups = groups
        self.active = active
        self.layout = layout
        self.averager = averager
        self.broken: RuntimeFault | None = None   # the fault that made the runtime unusable

    def op(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A control-plane operation, its wait bounded (:meth:`ControlPlane.op`); a failure
        is raised as the fault that names the rank to blame (:meth:`fault`)."""
        try:
            return self.plane.op(what, fn, *args, **kwargs)
        except Exception as e:
            raise self.fault(e) from e

    def fault(self, err: BaseException, fatal: bool = False) -> RuntimeFault:
        """:meth:`fault_from`; a fault that is not recoverable (any fault, with ``fatal``)
        breaks the runtime."""
        fault = self.fault_from(err)
        if fatal or not fault.recoverable:
            self.broken = fault
        return fault

    def fault_from(self, err: BaseException) -> RuntimeFault:
        """``err`` (a fault already, an :class:`OpError`, or an internal error) as the
        fault that names the rank to blame."""
        if isinstance(err, RuntimeFault):
            return err
        if not isinstance(err, OpError):
            return RuntimeFault(f"internal error in a communication stream: {err!r}")
        me = self.info.rank
        if not self.info.is_worker and me in self.liveness.lost():
            return ServerLost(f"this server ({self.describe(me)}) was given up by the workers "
                              "(it stopped answering): they go on without servers", servers=(me,))
        failed = self.liveness.failure(range(self.info.world_size), self.describe)
        if failed is not None:  # its own code raised: that is the cause, not what we saw
            return failed
        peers = [p for p in err.peers if p != me]
        posted = sorted(set(self.liveness.lost()) & set(peers))
        dead = posted or (self.liveness.dead(peers) if peers else None)
        if dead and set(dead) <= set(self.info.servers):
            return self.drop_servers(dead, err)
        if dead:
            rank, state = dead[0], "stopped (no heartbeat: dead?)"
        elif len(peers) == 1:
            rank, state = peers[0], "failed to answer"
        else:
            rank, state = None, ""
        if rank is not None:
            return PeerFailed(f"{self.describe(rank)} {state} during {err.what}: {err.cause}",
                              rank=rank)
        return RuntimeFault(f"{err.what} failed: {err.cause}", rank=None, recoverable=False)

    def drop_servers(self, dead: list[int], err: OpError) -> ServerLost:
        """Servers ``dead`` stopped: tell every rank, and on a worker go on without any
        server (control over the workers' group, all-reduce only; the iteration's
        gradients are intact, so it is averaged again: ``sync`` then ``wait``)."""
        self.liveness.post_lost(dead)
        who = ", ".join(self.describe(r) for r in dead)
        if self.plane.group is not self.plane.workers_group:
            for group in [self.plane.group, *self.groups.with_any_of(self.info.servers)]:
                keep_forever(group)  # operations on them may never end: no destructor at exit
        if self.info.is_worker:
            self.active.lost_servers = tuple(sorted(set(self.active.lost_servers)
                                                    | set(self.info.servers)))
            self.plane.without_servers()
            self.layout.seen = -1        # every worker takes the leader's layout again
            self.averager.reset()
            text = (f"{who} stopped (no heartbeat) during {err.what}: {err.cause}. The workers "
                    "go on without servers (all-reduce); the gradients are intact: sync() and "
                    "wait() again")
        else:
            text = f"{who} stopped during {err.what}: the workers go on without servers"
        return ServerLost(text, servers=tuple(dead))
