"""Reconfiguration: what each rank does around the vote on a new configuration.

A switch happens in three steps (:class:`~autotune.runtime.control.sync.SyncProtocol` runs them at
a ``sync`` whose configuration or layout changed):

1. :meth:`Active.prepare` builds the new :class:`~autotune.runtime.control.prepared.Setup` and its flat
   buffers *aside*, checking the configuration against this rank's gradients and, after a
   server loss, against the groups that still exist. It raises; nothing is changed yet.
2. every rank votes (over the control plane); a single failure cancels the switch on
   every rank, so all keep the old configuration;
3. :meth:`Active.commit` swaps the candidate in and moves the error-feedback residuals
   along (re-laid out when the gradient order changed; a Summation Service's residual
   handed back to a worker when it no longer re-encodes the same units, see
   :mod:`autotune.runtime.data.compression`).

:class:`Active` is also where the iteration side reads the configuration it runs under.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from autotune.runtime.config import FALLBACK_STREAMS, ConfigError, RuntimeConfig, Transport
from autotune.runtime.control.faults import FaultInjector
from autotune.runtime.control.groups import GroupCache, needed_groups
from autotune.runtime.control.prepared import Setup, build_setup
from autotune.runtime.control.world import WorldInfo
from autotune.runtime.data.compression import Residuals, summation_key
from autotune.runtime.data.layout import DTYPES, Layout, moves
from autotune.runtime.data.summation import BufferPool
from autotune.runtime.errors import RuntimeFault



@dataclass
class Candidate:
    """A configuration built aside, not yet active."""
    config: RuntimeConfig
    setup: Setup
    inp: dict[str, torch.Tensor]
    out: dict[str, torch.Tensor]
    order: list[int]          # registration indices in the new gradient order
    version: int              # the leader's layout version it was built from
    relaid: bool              # the layout changed
    reregistered: bool        # some worker registered anew (residuals are reset)
    give_back: bool           # this rank's Summation Service hands its residual back
    pinned: bool = False      # the buffers are pinned host memory (CUDA gradients)


class Active:
    """The active configuration of one rank and what it runs with: its Setup, the flat
    input/output buffers (workers), a buffer pool per stream, and the residuals."""

    def __init__(self, info: WorldInfo, layout: Layout, groups: GroupCache,
                 faults: FaultInjector):
        self.info = info
        self.layout = layout
        self.groups = groups
        self.faults = faults
        self.config: RuntimeConfig | None = None
        self.setup: Setup | None = None
        self.inp: dict[str, torch.Tensor] = {}
        self.out: dict[str, torch.Tensor] = {}
        self.pools: list[BufferPool] = []
        self.pinned = False                   # inp/out are pinned (CUDA gradients staged)
        self.residuals = Residuals()          # error feedback, kept across configurations
        self.spares: dict[str, dict[str, torch.Tensor]] = {"inp": {}, "out": {}}  # rotate()
        self.lost_servers: tuple[int, ...] = ()  # servers given up; the workers go on alone

    def release(self) -> None:
        """Let go of the buffers (at shutdown)."""
        self.inp, self.out, self.pools = {}, {}, []
        self.spares = {"inp": {}, "out": {}}

    def rotate(self, which: str, dtypes: set[str]) -> None:
        """``.grad`` tensors now show the ``which`` (``"inp"`` or ``"out"``) buffers of
        ``dtypes``: from the next round on, work in a spare of each instead (made on first
        use, then the two alternate), so that no reduction writes into what ``.grad``
        shows (:mod:`autotune.runtime.data.copies`)."""
        bufs, spares = getattr(self, which), self.spares[which]
        for d in dtypes:
            spare = spares.get(d)
            if spare is None or spare.shape != bufs[d].shape:
                spare = torch.empty(bufs[d].shape, dtype=bufs[d].dtype, pin_memory=self.pinned)
            spares[d], bufs[d] = bufs[d], spare

    # ------------------------------------------------------------------ step 1
    def prepare(self, config: RuntimeConfig, rows: list[list[int]] | None, version: int,
                reregistered: bool) -> Candidate:
        """Build ``config`` aside over the leader's layout ``rows`` (``None``: the active
        layout). Raises :class:`ConfigError` when it cannot run here, anything else (e.g.
        out of memory for the buffers) when building it failed."""
        order = self.layout.order
        if rows is not None:
            sizes = [(int(n), DTYPES[int(c)]) for _, n, c in rows]
            if self.info.is_worker:
                order = self.layout.verify(rows, self.info.rank, self.info.leader)
            else:
                order = [int(r[0]) for r in rows]
        else:
            sizes = list(self.setup.sizes) if self.setup else []
        if self.faults.configure_fails(config):
            raise RuntimeFault("injected configure fault (AUTOTUNE_FAULT)")
        if self.lost_servers:
            self._check_without_servers(config)
        setup = build_setup(config, sizes, self.info)
        pinned = self.info.is_worker and any(p.is_cuda for p in self.layout.params)
        inp, out = self._buffers_for(setup, pinned)
        res = self.residuals
        give_back = (not reregistered and res.summation_pending()
                     and (rows is not None or summation_key(setup) != res.summation_key))
        return Candidate(config, setup, inp, out, order, version, rows is not None,
                         reregistered, give_back, pinned)

    def _check_without_servers(self, config: RuntimeConfig) -> None:
        """After a server loss only groups made before it can be used: all-reduce among the
        workers, on the streams whose groups exist."""
        missing = [k for k in needed_groups(config, self.info) if k not in self.groups]
        if config.transport == Transport.PUSHPULL or missing:
            raise ConfigError(
                f"servers {list(self.lost_servers)} were lost: only all-reduce among the "
                f"workers with intra=flat and at most {FALLBACK_STREAMS} streams is possible "
                f"now, not {config.as_dict()}")

    def _buffers_for(self, setup: Setup, pinned: bool) -> tuple[dict, dict]:
        """Flat buffers for ``setup`` (workers), reusing the active ones when they fit.
        ``pinned``: page-locked host memory, so that CUDA gradients are staged into them
        and back without blocking (:mod:`autotune.runtime.data.staging`)."""
        if not self.info.is_worker:
            return {}, {}
        totals = dict(setup.totals)
        same = ({d: t.numel() for d, t in self.inp.items()} == totals
                and pinned == self.pinned)

        def alloc(d: str, n: int) -> torch.Tensor:
            return torch.zeros(n, dtype=getattr(torch, d), pin_memory=pinned)

        inp = self.inp if same else {d: alloc(d, n) for d, n in totals.items()}
        out: dict = {}
        if setup.needs_out:
            out = self.out if (same and self.out) else {d: alloc(d, n) for d, n in totals.items()}
        return inp, out

    # ------------------------------------------------------------------ step 3
    def commit(self, cand: Candidate, senders: list[int],
               control_op: Callable[..., Any]) -> None:
        """Swap ``cand`` in (after every rank voted yes), then move the residuals.
        ``senders``: the dedicated servers that hand their residual back to the leader,
        through ``control_op`` (the Runtime's bounded point-to-point)."""
        old, old_order = self.setup, self.layout.order
        self.config, self.setup = cand.config, cand.setup
        for which in ("inp", "out"):  # spares of buffers no longer in use
            if getattr(cand, which) is not getattr(self, which):
                self.spares[which] = {}
        self.inp, self.out, self.pinned = cand.inp, cand.out, cand.pinned
        self.pools = [BufferPool() for _ in range(cand.setup.streams)]
        if cand.relaid:
            self.layout.adopt(cand.order, cand.version)
        self._move_residuals(old, old_order, cand, senders, control_op)

    def _move_residuals(self, old: Setup | None, old_order: list[int], cand: Candidate,
                        senders: list[int], control_op: Callable[..., Any]) -> None:
        """Re-lay out or reset the residuals, hand a Summation Service's residual back to a
        worker (locally on a worker machine; dedicated servers in ``senders`` send it to
        the leader), and allocate what the new configuration writes from several threads."""
        res, setup = self.residuals, cand.setup
        if cand.relaid:
            if cand.reregistered or old is None:
                res.reset()
            else:
                res.relayout(moves(old, old_order, setup, self.layout.order))
        if cand.give_back and self.info.is_worker:
            for dtype, values in res.take_summation().items():
                res.absorb(dtype, values)
        me, leader = self.info.rank, self.info.leader
        for r in senders:
            taken = res.take_summation() if me == r else {}
            for dtype, n in setup.totals:
                if me == r:
                    t = taken.get(dtype, torch.zeros(n, dtype=torch.float32))
                    control_op("residual hand-back", dist.isend, t, leader)
                elif me == leader:
                    t = torch.empty(n, dtype=torch.float32)
                    control_op("residual hand-back", dist.irecv, t, r)
                    res.absorb(dtype, t)
        codec = setup.compression.codec
        res.prepare(dict(setup.totals), worker=self.info.is_worker and setup.compression.lossy,
                    summation=bool(summation_key(setup)),
                    codec=codec.name if setup.compression.lossy else None)
        res.summation_key = summation_key(setup)
        if cand.relaid or cand.give_back or senders:
            res.refresh_dirty()
