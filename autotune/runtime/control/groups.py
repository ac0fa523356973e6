"""The process groups of the streams, created once each, on first use.

Every stream has its own groups, so concurrent streams are separate connections (AIACC's
N communication links). Keys:

* ``("ar", s)``: all workers (``allreduce``, ``intra=flat``);
* ``("pp", s)``: all ranks, for the point-to-point push and pull of ``pushpull``;
* ``("mach", s, m)``: the workers of worker machine ``m`` (intra-machine reduce/broadcast,
  reduce-scatter/all-gather);
* ``("cross", s, j)``: the workers with local index ``j`` on every machine (the
  cross-machine all-reduce of ``intra=root``/``scatter``).

``new_group`` is collective over the whole world, so groups are only created inside
``Runtime.sync`` (where every rank is), in the deterministic order of
:func:`needed_groups`; a configuration that needs no new group creates none. Groups are
never re-created, so reconfiguring leaks nothing.
"""

from __future__ import annotations

import threading
import time
import warnings
from datetime import timedelta
from typing import Any, Mapping

from autotune.runtime.config import Intra, RuntimeConfig, Transport
from autotune.runtime.control.world import WorldInfo

Key = tuple


def members(key: Key, info: WorldInfo) -> tuple[int, ...]:
    kind = key[0]
    if kind == "ar":
        return info.workers
    if kind == "pp":
        return tuple(range(info.world_size))
    if kind == "mach":
        return info.machine_workers(info.worker_machines[key[2]])
    if kind == "cross":
        return tuple(info.machine_workers(m)[key[2]] for m in info.worker_machines)
    raise ValueError(f"unknown group key {key!r}")


def needed_groups(config: Mapping[str, Any], info: WorldInfo) -> list[Key]:
    """The groups ``config`` uses, in creation order."""
    cfg = RuntimeConfig.of(config)
    keys: list[Key] = []
    for s in range(cfg.streams):
        if cfg.transport == Transport.PUSHPULL:
            keys.append(("pp", s))
        if cfg.intra == Intra.FLAT:
            if cfg.transport == Transport.ALLREDUCE:
                keys.append(("ar", s))
            continue
        keys += [("mach", s, m) for m in range(info.n_machines)]
        if cfg.transport == Transport.ALLREDUCE and info.n_machines > 1:
            if cfg.intra == Intra.ROOT:
                keys.append(("cross", s, cfg.reduce_root))
            else:
                keys += [("cross", s, j) for j in range(info.workers_per_machine)]
    return keys


class GroupCache:
    """Process groups by key; :meth:`ensure` creates the missing ones (collective)."""

    def __init__(self, info: WorldInfo, timeout: float, backend: str = "gloo"):
        self.info = info
        self.timeout = timedelta(seconds=timeout)
        self.backend = backend
        self._groups: dict[Key, Any] = {}

    def __len__(self) -> int:
        return len(self._groups)

    def __contains__(self, key: Key) -> bool:
        return key in self._groups

    def ensure(self, keys: list[Key]) -> int:
        """Create the groups of ``keys`` not created yet; returns how many were created.
        Every rank must call this with the same keys in the same order."""
        import torch.distributed as dist

        made = 0
        for key in keys:
            if key in self._groups:
                continue
            ranks = list(members(key, self.info))
            self._groups[key] = dist.new_group(ranks, timeout=self.timeout, backend=self.backend)
            made += 1
        return made

    def get(self, key: Key) -> Any:
        try:
            return self._groups[key]
        except KeyError:
            raise RuntimeError(f"process group {key} was not created (internal error)") from None

    def with_any_of(self, ranks: Any) -> list[Any]:
        """The groups created so far that count any of ``ranks`` among their members."""
        ranks = set(ranks)
        return [g for k, g in self._groups.items() if ranks & set(members(k, self.info))]

    def destroy(self) -> None:
        """Destroy every group made so far (clean path only: see :func:`destroy`) and let
        go of them all at once. Freeing a gloo group waits (about 16 ms on loopback) for
        its connections to close, not for the CPU: one after another, the 37 groups of a
        40-iteration search took 0.6 s at the session's end; each in a thread of its own,
        all together take about one (each wait bounded by the groups' timeout)."""
        for g in self._groups.values():
            destroy(g)
        boxes = [[g] for g in self._groups.values()]  # the last references, one a thread
        self._groups.clear()
        threads = [threading.Thread(target=box.clear, name="autotune-free-group",
                                    daemon=True) for box in boxes]
        for t in threads:
            t.start()
        deadline = time.monotonic() + self.timeout.total_seconds()
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = sum(t.is_alive() for t in threads)
        if stuck:
            warnings.warn(f"{stuck} of the runtime's {len(threads)} process groups were not "
                          f"freed within {self.timeout.total_seconds():.0f} s; left to free "
                          "in the background", RuntimeWarning)


def destroy(group: Any) -> None:
    """Destroy ``group``, which the runtime made. Only on the clean path, once every
    operation on it completed: destroying a group a peer is still inside a collective of
    deadlocks. Its gloo threads end once the last reference to it is dropped, so the
    caller lets go of it too. A group already gone with the world (the user destroyed
    it first) is left as it is."""
    import torch.distributed as dist

    if group is None or group == dist.GroupMember.NON_GROUP_MEMBER or not dist.is_initialized():
        return
    try:
        dist.destroy_process_group(group)
    except ValueError:  # "Invalid process group specified": no longer the world's
        pass


def keep_forever(group: Any) -> None:
    """Never free ``group``. A gloo group whose operation waits on a stopped member (SIGSTOP,
    a frozen machine) cannot be destroyed: its destructor joins the thread blocked in that
    operation, so the process would hang at exit. After a member is given up, its groups
    are left to the operating system instead."""
    import ctypes

    import torch

    if group is None:
        return
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(group))
    try:
        backend = group._get_backend(torch.device("cpu"))
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(backend))
    except Exception:
        pass
