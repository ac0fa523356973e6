"""Keep DDP, add autotune: the session of a ``DistributedDataParallel`` model.

``autotune.session(ddp_model, ...)`` leaves DDP in charge of everything it owns (the start,
buffers, ``no_sync``, unused and static-graph handling, buckets and their CUDA streams,
checkpoints) and tunes how each bucket crosses the wire: autotune's comm hook
(:class:`~autotune.runtime.ddp_hook.BucketTransport`) averages it under the current
configuration, a chunk of the bucket on each stream's process group. ``step()`` only
counts the iteration (DDP has averaged the gradients when backward returns), measures it
(the slowest worker's time) and, between iterations, puts in force what the leader's
trial schedule says runs next: the configuration crosses ranks as int64s
(``RuntimeConfig.encode``) on a gloo group of DDP's ranks, nothing pickled.

A rank whose own code fails posts its exception in the rendezvous store as it leaves
(:meth:`~autotune.runtime.faults.Liveness.fail`); a rank whose session then ends by an
error (a broken collective) raises the :class:`~autotune.runtime.errors.PeerFailed` that
names the failed rank and its cause instead.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from autotune.runtime.bootstrap import rendezvous_store
from autotune.runtime.config import RuntimeConfig
from autotune.runtime.errors import PeerFailed, RuntimeFault, UsageError, install_excepthook
from autotune.runtime.faults import Liveness
from autotune.sessions.base import DDP, TuningSession
from autotune.sessions.options import SessionOptions
from autotune.tuning.space import Config, SearchSpace


class DDPSession(TuningSession):
    """The session of a DDP model (module docstring). Made by ``autotune.session(ddp_model,
    ...)``."""

    def __init__(self, model: DDP, options: SessionOptions | None = None) -> None:
        if not isinstance(model, DDP):
            raise TypeError(f"DDPSession needs a DistributedDataParallel model, got "
                            f"{type(model).__name__}: autotune.session(model) picks the kind")
        super().__init__(model, options)
        self.transport: Any = None
        self._control: Any = None
        self._ranks: list[int] = []
        self._liveness: Liveness | None = None  # posts and reads ranks' failures
        self._averaged = 0  # the hook's count of buckets averaged, at the last step

    @property
    def is_leader(self) -> bool:
        """Whether this rank is the first of DDP's group: it tunes, records and shows."""
        return bool(self._ranks) and dist.get_rank() == self._ranks[0]

    def _open(self) -> None:
        from autotune.runtime.ddp_hook import BucketTransport
        from autotune.runtime.world import discover, local_machine

        group = self.model.process_group
        install_excepthook()  # a peer's failure, uncaught, is one line
        self._liveness = Liveness(rendezvous_store(), dist.get_rank())
        self._ranks = list(dist.get_process_group_ranks(group))
        # the control plane: the leader's configuration and the slowest time, on gloo
        # whatever DDP's backend (tiny int64 messages), with bounded waits
        # (DDP's group may be a subgroup: then only its members make the control group)
        subgroup = len(self._ranks) < dist.get_world_size()
        self._control = dist.new_group(self._ranks, backend="gloo",
                                       timeout=timedelta(seconds=self.options.timeout),
                                       use_local_synchronization=subgroup)
        me = self._ranks.index(dist.get_rank())
        self.info = discover(me, len(self._ranks), "worker", local_machine(), self._control)
        self.transport = BucketTransport.install(self.model, timeout=self.options.timeout)
        self.space = SearchSpace.of(self.transport.limits, allow_lossy=self.options.allow_lossy,
                                    fixed=self.options.fixed)
        params = [p for p in self.model.module.parameters() if p.requires_grad]
        self._measures(params)
        self.transport.sample = self._goodput.sample if self._goodput is not None else None
        try:
            first = (self._lead(params, dist.get_backend(group)) if self.is_leader
                     else None)
            self._apply(first)
        except BaseException as exc:
            self._close(exc)  # posts this rank's failure, closes the leader's run
            raise

    def _await_average(self) -> tuple[str | None, float | None] | None:
        """DDP has averaged the gradients when backward returns. A step whose backward
        sent no bucket ran inside ``no_sync()`` (a micro-step of gradient accumulation,
        as Accelerate's ``accumulate()`` runs): not an iteration."""
        averaged = self.transport.averaged
        if averaged == self._averaged:
            if not any(p.grad is not None for p in self.model.parameters()):
                raise UsageError("tuner.step() before any backward: call it once per "
                                 "iteration, after loss.backward()")
            return None
        self._averaged = averaged
        return None, None

    def _worker_sum(self, t: torch.Tensor) -> None:
        self._collective("the iteration's all-reduce (times, goodput)", dist.all_reduce, t,
                         op=dist.ReduceOp.SUM)

    def _accumulate(self) -> contextlib.AbstractContextManager[None]:
        return self.model.no_sync()  # DDP's own (``ddp_model.no_sync()`` is the same)

    def _put_in_force(self, config: Config | None) -> RuntimeConfig:
        """The leader's ``config`` reaches every rank (int64s) and the hook takes it."""
        msg = torch.zeros(len(RuntimeConfig().encode()), dtype=torch.int64)
        if self.is_leader:
            msg[:] = torch.tensor(RuntimeConfig.of(config).encode(), dtype=torch.int64)
        self._collective("the configuration's broadcast", dist.broadcast, msg,
                         src=self._ranks[0])
        return self.transport.set_config(RuntimeConfig.decode(msg.tolist()))

    def _collective(self, what: str, fn: Any, tensor: torch.Tensor, **kwargs: Any) -> None:
        """``fn`` on the control group (its wait bounded by the session's ``timeout``); a
        failure is a :class:`RuntimeFault` (a peer's: :class:`PeerFailed`)."""
        try:
            fn(tensor, group=self._control, **kwargs)
        except Exception as e:
            raise (self._peer_failure() or RuntimeFault(
                f"{what} among DDP's ranks {self._ranks} failed: {e}")) from e

    def _peer_failure(self) -> PeerFailed | None:
        """The failure another of DDP's ranks posted, if any (module docstring)."""
        return (self._liveness.failure(self._ranks, lambda r: f"rank {r}")
                if self._liveness is not None else None)

    def _close(self, exc: BaseException | None) -> None:
        if exc is None:
            if self.is_leader:
                self._finish(None)
            return
        # after another rank's failure (e.g. DDP's own all-reduce broke in backward):
        # that failure; else this rank's own, posted for the others
        peer = (self._peer_failure()
                if isinstance(exc, Exception) and not isinstance(exc, PeerFailed) else None)
        if peer is None and self._liveness is not None:
            self._liveness.fail(exc)
        if self.is_leader:
            self._finish(peer or exc)
        if peer is not None:
            raise peer from exc
