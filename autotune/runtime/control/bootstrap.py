"""Joining the job: the collective that starts every rank's runtime.

:func:`join` runs on every rank of an initialised ``torch.distributed`` world, servers
too: it makes the control group (every rank, gloo), learns every rank's role and machine
(:func:`~autotune.runtime.control.world.discover`, one all-gather), adopts the leader's timeout and
stream limit (a second all-gather, which also checks that every rank encodes
configurations alike), makes the workers' group and publishes this rank's pid in the
rendezvous store, so that a fault can name the process. What it learnt is a
:class:`Joined`, which :class:`~autotune.runtime.core.Runtime` is built from.

A job whose workers must know their group before any runtime exists (DDP is built on
the workers' group, then ``autotune.session(ddp_model)`` starts the runtime) joins early:
:func:`hold` keeps that :class:`Joined` and the next :meth:`Runtime.bootstrap
<autotune.runtime.core.Runtime.bootstrap>` of this process takes it (:func:`take`)
instead of joining again, which the servers, already in their runtime, would not match.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from autotune.runtime.compat import all_gather as _all_gather
from autotune.runtime.config import SIGNATURE, ConfigError, Limits
from autotune.runtime.control.faults import Liveness
from autotune.runtime.control.world import WorldInfo, discover, local_machine, local_role
from autotune.runtime.errors import UsageError

PID_KEY = "autotune/pid/"


@dataclass
class Joined:
    """What :func:`join` learnt: who is who, what the job allows, the leader's
    ``timeout``, the control group (every rank) and the workers' group, and the
    rendezvous store (``None`` when it cannot be used). ``owns_workers_group``: whether
    the runtime built from it destroys the workers' group when it shuts down (not when
    :func:`hold` lent it to the user's DDP, whose model outlives the session)."""

    info: WorldInfo
    limits: Limits
    timeout: float
    control: Any
    workers_group: Any
    store: Any
    owns_workers_group: bool = True

    def let_go(self) -> None:
        """The runtime built from this shut down cleanly and destroyed its groups: forget
        them (the workers' group only where it was the runtime's), so that nothing keeps
        their threads alive."""
        self.control = None
        if self.owns_workers_group:
            self.workers_group = None

    def describe(self, rank: int) -> str:
        """``rank`` named for an error: its role, machine and (when the store has it) pid."""
        text = self.info.describe(rank)
        if self.store is not None:
            try:
                text = text[:-1] + f", pid {self.store.get(f'{PID_KEY}{rank}').decode()})"
            except Exception:
                pass
        return text


def join(timeout: float, role: str | None, max_streams: int) -> Joined:
    """Collective on every rank: see the module docstring. ``timeout``: this rank's
    seconds per communication wait; ``role``: ``worker`` or ``server`` (default
    ``AUTOTUNE_ROLE``, else worker); ``max_streams``: the streams whose groups may be made.
    The leader's ``timeout`` and ``max_streams`` hold everywhere (servers start with
    defaults)."""
    if not dist.is_available() or not dist.is_initialized():
        raise UsageError("Runtime.bootstrap needs an initialised torch.distributed world "
                         "(torch.distributed.init_process_group)")
    rank, world = dist.get_rank(), dist.get_world_size()
    role = local_role(role)
    store = rendezvous_store()
    _forget_left(store, rank)
    # gloo's own limit stays out of the way: ControlPlane bounds every wait
    control = dist.new_group(list(range(world)), backend="gloo", timeout=timedelta(days=7))
    info = discover(rank, world, role, local_machine(), control)
    mine = torch.tensor([SIGNATURE, int(timeout * 1000), max_streams], dtype=torch.int64)
    every = torch.zeros(world * 3, dtype=torch.int64)
    _all_gather(every, mine, group=control)
    rows = every.view(world, 3).tolist()
    _, lead_ms, lead_streams = rows[info.leader]
    timeout = lead_ms / 1000.0
    if SIGNATURE != rows[info.leader][0]:
        raise ConfigError(f"rank {rank} encodes configurations differently from the leader "
                          "(same autotune version everywhere?)")
    limits = Limits(servers=len(info.servers), workers_per_machine=info.workers_per_machine,
                    max_streams=lead_streams)
    workers_group = dist.new_group(list(info.workers), backend="gloo",
                                   timeout=timedelta(seconds=timeout))
    try:
        if store is not None:
            store.set(f"{PID_KEY}{rank}", f"{os.getpid()}")
    except Exception:
        store = None
    return Joined(info, limits, timeout, control, workers_group, store)


_HELD: list[tuple[Any, Joined]] = []  # (the world's default group, what it joined)


def hold(joined: Joined) -> Joined:
    """Keep ``joined`` for this process's next runtime (module docstring); its workers'
    group is the caller's (DDP is built on it), so that runtime leaves it alone. Returns
    what is kept (the caller's to keep too)."""
    held = replace(joined, owns_workers_group=False)
    _HELD[:] = [(dist.distributed_c10d._get_default_group(), held)]
    return held


def take() -> Joined | None:
    """What :func:`hold` kept, once, if the world it joined is still this process's."""
    if not _HELD or not dist.is_initialized():
        _HELD.clear()
        return None
    world, joined = _HELD.pop()
    return joined if world is dist.distributed_c10d._get_default_group() else None


def _forget_left(store: Any, rank: int) -> None:
    """Before the join's first collective: this rank is no longer one that left on
    purpose (:meth:`Liveness.leave <autotune.runtime.control.faults.Liveness.leave>` of an earlier
    session in this process), so that a peer that stops in this session is seen."""
    try:
        if store is not None:
            store.delete_key(f"{Liveness.LEFT}{rank}")
    except Exception:  # the store is gone or cannot delete: the waits still end by timeout
        pass


def rendezvous_store() -> Any:
    """The world's rendezvous store (``torch.distributed``'s default store), or ``None``
    when it cannot be had."""
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None
