"""The cluster graph: network bandwidth between machines, measured over torch.distributed.

Call :func:`probe_cluster` on every rank of an initialised world. Ranks learn each other's
machine (``AUTOTUNE_MACHINE`` or the hostname) and GPU count through one ``all_gather`` of
int64 tensors; the first rank of each machine is its *leader*. Leaders meet in a
round-robin tournament (disjoint pairs per round, so the rounds run in parallel over the
fabric) and, per direction, the sender:

1. ping-pongs a tiny control tensor a few times (both ends ready; round-trip time),
2. sends growing payloads until one takes ``min_transfer_s`` or reaches ``max_bytes``
   (steady state), then ``repeats`` timed payloads, each answered by a tiny ack,
3. keeps the median bandwidth (payload bits / (time - rtt/2)).

A per-direction share of ``time_budget_s`` cuts repetitions short (one sample at least),
so the whole probe takes about ``time_budget_s`` for any number of machines. Results
cross ranks as one float64 ``all_reduce``: every rank returns the same ``nx.DiGraph``
(see :mod:`autotune.probes.graph`). Nothing is pickled.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from typing import Any

import networkx as nx

from autotune.probes.graph import cluster_graph

MAX_NAME_BYTES = 255
_STOP, _DATA, _PING = 0, 1, 2


def machine_name() -> str:
    """This process's machine: ``AUTOTUNE_MACHINE`` or the hostname."""
    return os.environ.get("AUTOTUNE_MACHINE") or socket.gethostname()


def round_robin(m: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs ``(i, j)``, ``i < j``, covering every pair of ``m`` once."""
    players: list[int | None] = list(range(m)) + ([None] if m % 2 else [])
    n = len(players)
    rounds = []
    for _ in range(n - 1):
        pairs = []
        for k in range(n // 2):
            a, b = players[k], players[n - 1 - k]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(pairs)
        players = [players[0], players[-1]] + players[1:-1]
    return [r for r in rounds if r]


def _gather_identity(dist: Any, torch: Any, group: Any, name: str, n_gpus: int,
                     world: int) -> tuple[list[str], list[int]]:
    raw = name.encode("utf-8")
    mine = torch.zeros(MAX_NAME_BYTES + 2, dtype=torch.int64)
    mine[0] = n_gpus
    if 0 < len(raw) <= MAX_NAME_BYTES:
        mine[1] = len(raw)
        mine[2:2 + len(raw)] = torch.tensor(list(raw), dtype=torch.int64)
    else:
        mine[1] = -1  # invalid: every rank raises below, none hangs
    parts = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(parts, mine, group=group)
    names, gpus = [], []
    for r, t in enumerate(parts):
        n = int(t[1])
        if n < 0:
            raise ValueError(f"rank {r}: machine name must be 1..{MAX_NAME_BYTES} bytes of "
                             "UTF-8 (set AUTOTUNE_MACHINE)")
        names.append(bytes(t[2:2 + n].tolist()).decode("utf-8"))
        gpus.append(int(t[0]))
    return names, gpus


class _Link:
    """Point-to-point measurement between this leader and one peer (global ranks)."""

    def __init__(self, dist: Any, torch: Any, group: Any, peer: int) -> None:
        self.dist, self.torch, self.group, self.peer = dist, torch, group, peer
        self.ctrl = torch.zeros(2, dtype=torch.int64)
        self.ack = torch.zeros(1, dtype=torch.int64)

    def _send_ctrl(self, nbytes: int, op: int) -> None:
        self.ctrl[0], self.ctrl[1] = nbytes, op
        self.dist.send(self.ctrl, self.peer, group=self.group)

    def send_side(self, *, min_bytes: int, max_bytes: int, min_transfer_s: float,
                  repeats: int, budget_s: float) -> tuple[float, float]:
        """Measure this rank -> peer; returns (Gbit/s median, round-trip seconds)."""
        dist, torch = self.dist, self.torch
        rtts = []
        for _ in range(3):
            t0 = time.perf_counter()
            self._send_ctrl(0, _PING)
            dist.recv(self.ack, self.peer, group=self.group)
            rtts.append(time.perf_counter() - t0)
        rtt = statistics.median(rtts)
        deadline = time.perf_counter() + budget_s
        size = min_bytes
        payload = torch.zeros(size, dtype=torch.uint8)
        steady = False
        samples: list[float] = []
        while True:
            if payload.numel() != size:
                payload = torch.zeros(size, dtype=torch.uint8)
            self._send_ctrl(size, _DATA)
            t0 = time.perf_counter()
            dist.send(payload, self.peer, group=self.group)
            dist.recv(self.ack, self.peer, group=self.group)
            elapsed = time.perf_counter() - t0
            now = time.perf_counter()
            if not steady:
                if elapsed < min_transfer_s and size < max_bytes and now < deadline:
                    size = min(size * 4, max_bytes)
                    continue
                steady = True
            transfer = max(elapsed - rtt / 2, elapsed / 2, 1e-9)
            samples.append(size * 8 / transfer / 1e9)
            if len(samples) >= repeats or now >= deadline:
                break
        self._send_ctrl(0, _STOP)
        return statistics.median(samples), rtt

    def recv_side(self) -> None:
        """Serve the peer's measurement of peer -> this rank until it says stop."""
        dist, torch = self.dist, self.torch
        buf = torch.zeros(0, dtype=torch.uint8)
        while True:
            dist.recv(self.ctrl, self.peer, group=self.group)
            nbytes, op = int(self.ctrl[0]), int(self.ctrl[1])
            if op == _STOP:
                return
            if op == _DATA:
                if buf.numel() != nbytes:
                    buf = torch.empty(nbytes, dtype=torch.uint8)
                dist.recv(buf, self.peer, group=self.group)
            dist.send(self.ack, self.peer, group=self.group)


def probe_cluster(*, machine: str | None = None, n_gpus: int | None = None,
                  time_budget_s: float = 10.0, repeats: int = 5, min_bytes: int = 1 << 20,
                  max_bytes: int = 64 << 20, min_transfer_s: float = 0.05,
                  group: Any = None) -> nx.DiGraph:
    """Measure the network between machines; call on every rank; returns the cluster graph.

    ``machine``: this rank's machine (default ``AUTOTUNE_MACHINE`` or the hostname).
    ``n_gpus``: GPUs on this machine (default ``torch.cuda.device_count()``).
    ``group``: a gloo process group spanning the world (default: the world when its backend
    is gloo, else a new gloo group).
    """
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError("probe_cluster needs an initialised torch.distributed world")
    if group is None and dist.get_backend() != "gloo":
        group = dist.new_group(backend="gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    if n_gpus is None:
        n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    started = time.perf_counter()
    names, gpus = _gather_identity(dist, torch, group, machine or machine_name(), n_gpus,
                                   world)
    machines: list[str] = list(dict.fromkeys(names))
    leaders = [names.index(m) for m in machines]
    m = len(machines)
    gbps = torch.zeros(m, m, dtype=torch.float64)
    rtt = torch.zeros(m, m, dtype=torch.float64)
    rounds = round_robin(m)
    per_direction = time_budget_s / max(1, 2 * len(rounds))
    if rank in leaders:
        me = leaders.index(rank)
        for pairs in rounds:
            for i, j in pairs:
                if me not in (i, j):
                    continue
                other = j if me == i else i
                link = _Link(dist, torch, group, leaders[other])
                for src in (i, j):  # lower index sends first, then the other way
                    if src == me:
                        bw, r = link.send_side(min_bytes=min_bytes, max_bytes=max_bytes,
                                               min_transfer_s=min_transfer_s,
                                               repeats=repeats, budget_s=per_direction)
                        gbps[me, other], rtt[me, other] = bw, r
                    else:
                        link.recv_side()
    dist.all_reduce(gbps, group=group)
    dist.all_reduce(rtt, group=group)
    return cluster_graph(machines, names, gpus, gbps.tolist(), rtt.tolist(),
                         time.perf_counter() - started, time_budget_s)


_cluster_graph = cluster_graph  # the name this builder had here before it moved to graph.py
