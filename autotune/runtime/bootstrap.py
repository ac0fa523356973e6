"""Joining the job: the collective that starts every rank's runtime.

:func:`join` runs on every rank of an initialised ``torch.distributed`` world, servers
too: it makes the control group (every rank, gloo), learns every rank's role and machine
(:func:`~autotune.runtime.world.discover`, one all-gather), adopts the leader's timeout and
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
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .compat import all_gather as _all_gather
from .config import SIGNATURE, ConfigError, Limits
from .errors import UsageError
from .world import WorldInfo, discover, local_machine, local_role

PID_KEY = "autotune/pid/"


@dataclass(frozen=True)
class Joined:
    """What :func:`join` learnt: who is who, what the job allows, the leader's
    ``timeout``, the control group (every rank) and the workers' group, and the
    rendezvous store (``None`` when it cannot be used)."""

    info: WorldInfo
    limits: Limits
    timeout: float
    control: Any
    workers_group: Any
    store: Any

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
    store = rendezvous_store()
    try:
        if store is not None:
            store.set(f"{PID_KEY}{rank}", f"{os.getpid()}")
    except Exception:
        store = None
    return Joined(info, limits, timeout, control, workers_group, store)


_HELD: list[tuple[Any, Joined]] = []  # (the world's default group, what it joined)


def hold(joined: Joined) -> None:
    """Keep ``joined`` for this process's next runtime (module docstring)."""
    _HELD[:] = [(dist.distributed_c10d._get_default_group(), joined)]


def take() -> Joined | None:
    """What :func:`hold` kept, once, if the world it joined is still this process's."""
    if not _HELD or not dist.is_initialized():
        _HELD.clear()
        return None
    world, joined = _HELD.pop()
    return joined if world is dist.distributed_c10d._get_default_group() else None


def rendezvous_store() -> Any:
    """The world's rendezvous store (``torch.distributed``'s default store), or ``None``
    when it cannot be had."""
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None
