"""The collective ``sync`` at an iteration boundary: one control message, the leader's
gradient layout, the vote on a new configuration.

The control message is one all-reduce of a few int64 over the control group: the leader's
encoded configuration (:meth:`RuntimeConfig.encode`), a stop flag, the leader's layout
version and length, a count of workers that registered since the last ``sync``, and a flag
for a configuration the leader itself rejected. When the layout changed (a ``register``
or the ready order learnt on the first iteration) the leader's layout
(``[param index, numel, dtype]`` per gradient) follows as one broadcast and every worker
checks its own gradients against it. When the configuration or layout changed, every rank
builds the new :class:`~autotune.runtime.control.prepared.Setup` aside, all ranks vote (one
all-reduce of a per-rank failure vector), and only if all succeeded is it swapped in,
creating any process group it needs for the first time
(:mod:`autotune.runtime.control.reconfigure`); otherwise every rank raises the same error and keeps
the old configuration.

A worker may instead *keep* the active configuration in the background
(``background=True``: no configuration, no stop, nothing registered since the last
``sync``): the same message is started and not waited for, so that its round trip (one
all-reduce over every rank, servers included: about 15-20 ms on eight emulated hosts)
overlaps the next forward and backward instead of adding to the iteration. The leader
then sends the layout version already in force (a learnt order waits for the next
``sync`` that waits). The next ``sync`` (or the shutdown) first waits for that message,
bounded, and checks that it kept everything; a message on a control group given up since
(servers lost) is left behind with its group. Servers always wait: they serve the round
the message announces.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

import torch
import torch.distributed as dist

from autotune.runtime.config import ConfigError, Limits, RuntimeConfig
from autotune.runtime.control.control import ControlPlane
from autotune.runtime.control.groups import GroupCache, needed_groups
from autotune.runtime.control.reconfigure import Active, Candidate
from autotune.runtime.control.world import WorldInfo
from autotune.runtime.data.layout import Layout
from autotune.runtime.errors import RuntimeFault

MAGIC = 0x4155_5401
# control message slots (then the configuration, RuntimeConfig.encode())
_MAGIC, _STOP, _VERSION, _LENGTH, _DIRTY, _BADCFG, _H = 0, 1, 2, 3, 4, 5, 8


class SyncProtocol:
    """One rank's side of ``sync`` (see the module docstring). ``control_op`` is the
    Runtime's bounded control-plane operation, which raises a fault naming the rank to
    blame; ``describe`` names a rank in an error."""

    def __init__(self, info: WorldInfo, limits: Limits, layout: Layout, active: Active,
                 groups: GroupCache, plane: ControlPlane, control_op: Callable[..., Any],
                 describe: Callable[[int], str]):
        self.info = info
        self.limits = limits
        self.layout = layout
        self.active = active
        self.groups = groups
        self.plane = plane
        self.control_op = control_op
        self.describe = describe
        # a background keep not yet waited for: (work, message, control group)
        self.pending: tuple[Any, torch.Tensor, Any] | None = None
        self.background = 0  # background keeps started

    def run(self, config: Mapping[str, Any] | None, stop: bool, background: bool = False) -> bool:
        """Agree on the leader's ``config`` and ``stop`` (warned about and ignored on other
        ranks; called from ``Runtime.sync``, whose caller the warning names) and
        apply the configuration if it or the layout changed. Returns whether the leader
        stopped the job. Raises :class:`ConfigError` or a recoverable
        :class:`RuntimeFault` identically on every rank, the previous configuration kept.
        ``background``: keep the active configuration without waiting (module docstring;
        the caller checked that it may)."""
        self.drain()
        msg = torch.zeros(_H + len(RuntimeConfig()), dtype=torch.int64)
        error: ConfigError | None = None
        if self.info.rank == self.info.leader:
            msg[_MAGIC] = MAGIC
            msg[_STOP] = int(bool(stop))
            msg[_VERSION] = self.layout.seen if background else self.layout.version
            msg[_LENGTH] = len(self.layout.proposed)
            try:
                wanted = (RuntimeConfig.of(config).check(self.limits) if config is not None
                          else self.active.config or RuntimeConfig())
                msg[_H:] = torch.tensor(wanted.encode(), dtype=torch.int64)
            except ConfigError as e:
                error = e
                msg[_BADCFG] = 1
        elif config is not None or stop:  # raising here would leave the others waiting
            warnings.warn(f"only the leader (rank {self.info.leader}) passes config/stop to "
                          "sync(); ignored on this rank", RuntimeWarning, stacklevel=3)
        if self.info.is_worker and self.layout.dirty:
            msg[_DIRTY] = 1
        if background:
            group = self.plane.group
            work = self.control_op("sync", lambda: dist.all_reduce(msg, group=group,
                                                                   async_op=True))
            self.pending = (work, msg, group)
            self.background += 1
            return False
        self.control_op("sync", dist.all_reduce, msg, group=self.plane.group)
        if int(msg[_MAGIC]) != MAGIC:
            raise RuntimeFault("garbled control message: is every rank running the same autotune?")
        if msg[_BADCFG]:
            raise error or ConfigError(f"the leader (rank {self.info.leader}) asked for a "
                                       "configuration this job cannot run (see its error)")
        if msg[_STOP]:
            return True
        new = RuntimeConfig.decode(msg[_H:].tolist())
        version = int(msg[_VERSION])
        layout = None
        if version != self.layout.seen or int(msg[_DIRTY]) > 0:
            layout = self._exchange_layout(int(msg[_LENGTH]))
        if layout is not None or new != self.active.config:
            self._apply(new, layout, version, reregistered=int(msg[_DIRTY]) > 0)
        return False

    def drain(self) -> None:
        """Wait (bounded) for a background keep's message and check that it kept
        everything; one on a control group given up since (servers lost) is left."""
        if self.pending is None:
            return
        work, msg, group = self.pending
        self.pending = None
        if group is not self.plane.group:
            return
        self.control_op("sync", self.plane.wait, work, "sync", self.plane.members)
        kept = (int(msg[_MAGIC]) == MAGIC and not msg[_STOP] and not msg[_BADCFG]
                and not msg[_DIRTY] and int(msg[_VERSION]) == self.layout.seen
                and RuntimeConfig.decode(msg[_H:].tolist()) == self.active.config)
        if not kept:
            raise RuntimeFault("a background sync's control message changed the "
                               f"configuration or the layout (message {msg.tolist()}): every "
                               "worker must pass background=True at the same sync, the "
                               "leader with no configuration", recoverable=False)

    def _exchange_layout(self, n: int) -> list[list[int]]:
        """The leader's proposed gradient order, broadcast to every rank."""
        t = torch.zeros(n * 3, dtype=torch.int64)
        if self.info.rank == self.info.leader and n:
            t[:] = torch.tensor(self.layout.rows(), dtype=torch.int64)
        self.control_op("layout broadcast", dist.broadcast, t, src=self.info.leader,
                        group=self.plane.group)
        return t.view(n, 3).tolist() if n else []

    def _apply(self, config: RuntimeConfig, layout: list[list[int]] | None, version: int,
               reregistered: bool = False) -> None:
        """Reconfigure (see :mod:`autotune.runtime.control.reconfigure`): every rank builds the
        configuration aside, all vote, and only if all succeeded is it swapped in."""
        code, failure, cand = 0, None, None
        try:
            cand = self.active.prepare(config, layout, version, reregistered)
        except ConfigError as e:
            code, failure = 1, e
        except Exception as e:  # e.g. out of memory for the buffers
            code, failure = 2, e
        world = self.info.world_size
        vote = torch.zeros(2 * world, dtype=torch.int64)
        vote[self.info.rank] = code
        vote[world + self.info.rank] = int(cand is not None and cand.give_back
                                           and not self.info.is_worker)
        self.control_op("configuration vote", dist.all_reduce, vote, group=self.plane.group)
        codes = vote[:world].tolist()
        bad = [r for r, v in enumerate(codes) if v]
        if bad:
            where = ", ".join(self.describe(r) for r in bad)
            detail = f": {failure}" if failure is not None else f" (see the log of rank {bad[0]})"
            if any(v == 1 for v in codes):
                raise ConfigError(f"configuration {config} rejected by {where}{detail}")
            raise RuntimeFault(f"configuration {config} could not be applied on {where}{detail}",
                               rank=bad[0], recoverable=True)
        self.control_op("process group creation", self.groups.ensure,
                        needed_groups(config, self.info))
        assert isinstance(cand, Candidate)
        senders = [r for r in range(world) if vote[world + r]]
        self.active.commit(cand, senders,
                           lambda *a: self.control_op(*a, group=self.plane.group))
