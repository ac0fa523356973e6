"""Who is who in the job: every rank's role (worker or server) and machine.

At bootstrap each rank contributes its role and machine name (``AUTOTUNE_MACHINE``, else
the hostname) as a fixed-size int64 row to one all-gather, so every rank holds the same
:class:`WorldInfo`. Nothing is pickled: a machine name travels as its UTF-8 bytes.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import cached_property
from typing import Any

ROLES = ("worker", "server")
NAME_BYTES = 64


def local_machine() -> str:
    """This process's machine name: ``AUTOTUNE_MACHINE`` if set (emulated machines), else
    the hostname."""
    name = os.environ.get("AUTOTUNE_MACHINE") or socket.gethostname()
    return name


def local_role(role: str | None = None) -> str:
    """``role`` if given, else ``AUTOTUNE_ROLE`` (default ``worker``)."""
    role = role or os.environ.get("AUTOTUNE_ROLE") or "worker"
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r} (AUTOTUNE_ROLE?)")
    return role


@dataclass(frozen=True)
class WorldInfo:
    """The roles and machines of all ranks, as seen from ``rank``.

    ``machines``: machine name per rank. ``workers``/``servers``: ranks by role, ascending.
    ``worker_machines``: the distinct machines that run workers, ordered by their first
    worker's rank; ``n_machines`` is their number. ``workers_per_machine`` is the number of
    workers on every worker machine when that number is the same everywhere, else 1 (then
    only ``intra=flat`` is offered). ``local_index``: this worker's index among the workers
    of its machine (-1 on a server). Derived facts are computed once, on first use.
    """

    rank: int
    world_size: int
    roles: tuple[str, ...]
    machines: tuple[str, ...]

    # --------------------------------------------------------------- per rank
    @property
    def role(self) -> str:
        return self.roles[self.rank]

    @property
    def machine(self) -> str:
        return self.machines[self.rank]

    @property
    def is_worker(self) -> bool:
        return self.role == "worker"

    # ---------------------------------------------------------------- derived
    @cached_property
    def workers(self) -> tuple[int, ...]:
        return tuple(r for r, role in enumerate(self.roles) if role == "worker")

    @cached_property
    def servers(self) -> tuple[int, ...]:
        return tuple(r for r, role in enumerate(self.roles) if role == "server")

    @property
    def leader(self) -> int:
        """The worker whose configuration and gradient order everyone follows."""
        return self.workers[0]

    @cached_property
    def worker_machines(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.machines[r] for r in self.workers))

    @cached_property
    def n_machines(self) -> int:
        return len(self.worker_machines)

    @cached_property
    def _machine_workers(self) -> dict[str, tuple[int, ...]]:
        out: dict[str, list[int]] = {}
        for r in self.workers:
            out.setdefault(self.machines[r], []).append(r)
        return {m: tuple(rs) for m, rs in out.items()}

    def machine_workers(self, machine: str) -> tuple[int, ...]:
        return self._machine_workers.get(machine, ())

    @cached_property
    def uniform(self) -> bool:
        counts = {len(self.machine_workers(m)) for m in self.worker_machines}
        return len(counts) == 1

    @cached_property
    def workers_per_machine(self) -> int:
        if not self.uniform:
            return 1
        return len(self.machine_workers(self.worker_machines[0]))

    def local_index_of(self, rank: int) -> int:
        if self.roles[rank] != "worker":
            return -1
        return self.machine_workers(self.machines[rank]).index(rank)

    @property
    def local_index(self) -> int:
        return self.local_index_of(self.rank)

    def machine_index_of(self, rank: int) -> int:
        """Index of ``rank``'s machine in :attr:`worker_machines` (-1 for a server machine)."""
        try:
            return self.worker_machines.index(self.machines[rank])
        except ValueError:
            return -1

    @cached_property
    def summation_hosts(self) -> tuple[int, ...]:
        """Per worker machine, the worker that hosts its colocated Summation Service
        (the machine's first worker)."""
        return tuple(self.machine_workers(m)[0] for m in self.worker_machines)

    def describe(self, rank: int) -> str:
        return f"rank {rank} ({self.roles[rank]} on {self.machines[rank]!r})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank, "world_size": self.world_size, "role": self.role,
            "machine": self.machine, "workers": list(self.workers), "servers": list(self.servers),
            "machines": list(self.machines), "workers_per_machine": self.workers_per_machine,
            "local_index": self.local_index, "n_machines": self.n_machines,
        }


def encode_identity(role: str, machine: str) -> list[int]:
    """One rank's row for the bootstrap all-gather: role code, name length, name bytes."""
    raw = machine.encode("utf-8")
    if len(raw) > NAME_BYTES:
        raise ValueError(f"machine name {machine!r} is longer than {NAME_BYTES} bytes")
    return [ROLES.index(role), len(raw)] + list(raw) + [0] * (NAME_BYTES - len(raw))


def decode_identity(row: list[int]) -> tuple[str, str]:
    role_code, n = int(row[0]), int(row[1])
    if not 0 <= role_code < len(ROLES) or not 0 <= n <= NAME_BYTES:
        raise ValueError(f"malformed identity row {row[:4]}...")
    name = bytes(int(b) for b in row[2:2 + n]).decode("utf-8")
    return ROLES[role_code], name


def discover(rank: int, world_size: int, role: str, machine: str, group: Any) -> WorldInfo:
    """All-gather every rank's role and machine over ``group`` (all ranks, gloo)."""
    import torch

    from autotune.runtime.compat import all_gather as _all_gather

    mine = torch.tensor(encode_identity(role, machine), dtype=torch.int64)
    out = torch.zeros(world_size * mine.numel(), dtype=torch.int64)
    _all_gather(out, mine, group=group)
    rows = out.view(world_size, -1).tolist()
    roles, machines = zip(*(decode_identity(r) for r in rows))
    info = WorldInfo(rank, world_size, tuple(roles), tuple(machines))
    if not info.workers:
        raise ValueError("the job has no worker rank (every rank says AUTOTUNE_ROLE=server)")
    return info
