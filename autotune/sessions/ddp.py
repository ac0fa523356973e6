"""Keep DDP, add autotune: the session of a ``DistributedDataParallel`` model.

``autotune.session(ddp_model, ...)`` leaves DDP in charge of everything it owns (the start,
buffers, ``no_sync``, unused and static-graph handling, buckets and their CUDA streams,
checkpoints) and tunes how each bucket crosses the wire: autotune's comm hook
(:class:`~autotune.runtime.ddp_hook.BucketTransport`) averages it under the current
configuration. It is the native session's runtime (:class:`~autotune.sessions.native.Session`)
with DDP in front: the same ``Runtime`` joins the world (servers included), puts the
leader's configuration in force at every ``step()`` (``Runtime.sync``, the configuration
as int64s, nothing pickled), and runs push/pull through the Summation Services and the
intra-machine step and the all-reduce among the workers on DDP's buckets
(:mod:`autotune.runtime.ddp_buckets`). ``step()`` only counts the iteration (DDP has
averaged the gradients when backward returns), measures it and puts in force what runs
next.

**Servers.** DDP's process group must hold only the workers: a Summation Service runs no
forward or backward. With servers, build DDP on :func:`workers_group` (one line,
``DDP(model, process_group=autotune.workers_group())``); the servers are
``python -m autotune.server`` processes (``autotune launch -k K`` starts them; under
``torchrun``, a second command), as for the native runtime (``docs/ddp.md``).

A rank whose own code fails posts its exception in the rendezvous store as it leaves; a
rank whose session then ends by an error (DDP's own all-reduce broken in backward)
raises the :class:`~autotune.runtime.errors.PeerFailed` that names the failed rank and its
cause instead.
"""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta
from typing import Any, Mapping

import torch.distributed as dist

from autotune.errors import AutotuneError
from autotune.runtime.bootstrap import hold, join, rendezvous_store
from autotune.runtime.config import Limits
from autotune.runtime.errors import ServerLost, UsageError
from autotune.runtime.faults import Liveness
from autotune.sessions.base import DDP
from autotune.sessions.native import Session, init_world
from autotune.sessions.options import SessionOptions
from autotune.sessions.tuners import job_space
from autotune.tuning.space import Config

DEFAULT_TIMEOUT = 300.0


_JOINED: list[Any] = []  # [the world's default group, what it joined, {backend: group}]


def workers_group(backend: str | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> Any:
    """The process group of the job's workers, for DDP: ``DDP(model,
    process_group=autotune.workers_group())``. The first call in a world is collective on
    every rank, servers included: it joins the job (the runtime's bootstrap, which the
    servers run too) and keeps what it learnt for ``autotune.session(ddp_model)``; later
    calls return the same group (or, for another ``backend``, one over the same workers).
    ``backend``: the group's (default: the world's; gloo is the joined workers' group
    itself). On a rank whose ``AUTOTUNE_ROLE`` is ``server`` it serves as a Summation
    Service until the job stops, then exits the process (as ``python -m autotune.server``
    does). ``timeout``: seconds any communication wait may take. Initialises
    ``torch.distributed`` from the environment when it is not yet."""
    init_world(timeout)
    world = dist.distributed_c10d._get_default_group()
    if not _JOINED or _JOINED[0] is not world:
        joined = hold(join(timeout, None, Limits.max_streams))
        if joined.info.role == "server":
            from autotune.runtime.core import Runtime
            from autotune.server import serve_to_the_end

            serve_to_the_end(Runtime.bootstrap(timeout=timeout))
            raise SystemExit(0)
        _JOINED[:] = [world, joined, {"gloo": joined.workers_group}]
    _, joined, groups = _JOINED
    backend = str(backend or dist.get_backend())
    if backend not in groups:
        groups[backend] = dist.new_group(list(joined.info.workers), backend=backend,
                                         timeout=timedelta(seconds=joined.timeout),
                                         use_local_synchronization=True)
    return groups[backend]


class DDPSession(Session):
    """The session of a DDP model (module docstring). Made by ``autotune.session(ddp_model,
    ...)``."""

    takes_ddp = True
    grad_views = False  # the runtime writes the averages into DDP's bucket buffers

    def __init__(self, model: DDP, options: SessionOptions | None = None) -> None:
        if not isinstance(model, DDP):
            raise TypeError(f"DDPSession needs a DistributedDataParallel model, got "
                            f"{type(model).__name__}: autotune.session(model) picks the kind")
        super().__init__(model, options)
        self.transport: Any = None
        self._liveness: Liveness | None = None  # reads the failure a peer posted
        self._averaged = 0  # the hook's count of buckets averaged, at the last step

    def _start(self) -> None:
        """Workers: DDP's group checked, the hook installed, the space built, the first
        configuration in force."""
        from autotune.runtime.ddp_hook import BucketTransport

        self.info = info = self.rt.info
        ranks = list(dist.get_process_group_ranks(self.model.process_group))
        if ranks != list(info.workers):
            raise UsageError(
                f"DDP's process group holds ranks {ranks}, the job's workers are "
                f"{list(info.workers)}"
                + (f" (ranks {list(info.servers)} are Summation Service servers): build DDP "
                   "with process_group=autotune.workers_group()" if info.servers else
                   ": autotune inside DDP averages among every worker of the world"))
        self._liveness = Liveness(rendezvous_store(), info.rank)
        self.transport = BucketTransport.install(self.model, self.rt)
        self.space = job_space(self.rt, allow_lossy=self.options.allow_lossy,
                               fixed=self.options.fixed)
        params = [p for p in self.model.module.parameters() if p.requires_grad]
        self._measures(params)
        self.transport.sample = self._efficiency_probe.sample if self._efficiency_probe is not None else None
        self._apply(self._lead(params, dist.get_backend(self.model.process_group))
                    if self.is_leader else None)

    def _await_average(self) -> tuple[str | None, float | None] | None:
        """DDP has averaged the gradients when backward returns (a round the runtime
        failed was averaged again by the hook: the fallback is put in force, lost servers
        dropped). A step whose backward sent no bucket ran inside ``no_sync()`` (a
        micro-step of gradient accumulation, as Accelerate's ``accumulate()`` runs): not
        an iteration."""
        averaged = self.transport.averaged
        if averaged == self._averaged:
            if not any(p.grad is not None for p in self.model.parameters()):
                raise UsageError("tuner.step() before any backward: call it once per "
                                 "iteration, after loss.backward()")
            return None
        self._averaged = averaged
        # the exposed communication: from the last bucket's hook call to backward's end
        waited = time.perf_counter() - self.transport.last_bucket_at
        failure = self.transport.buckets.take_failure()
        if failure is None:
            return None, waited
        if isinstance(failure, ServerLost):
            self._lose_servers(failure)
        self._apply(self.schedule.fallback() if self.is_leader else None, retrying=True)
        return str(failure), None

    def _accumulate(self) -> contextlib.AbstractContextManager[None]:
        return self.model.no_sync()  # DDP's own (``ddp_model.no_sync()`` is the same)

    def _put_in_force(self, config: Config | None) -> Mapping[str, Any]:
        return self.transport.sync(config)  # the runtime's world and the hook alike

    def _close(self, exc: BaseException | None) -> None:
        # DDP's own all-reduce broke in backward (torch's error, which names no rank):
        # the failure another rank posted, if any; autotune's errors name their cause
        peer = None
        if (isinstance(exc, Exception) and not isinstance(exc, (AutotuneError, TypeError))
                and self._liveness is not None):
            peer = self._liveness.failure(self.info.workers, lambda r: f"rank {r}")
        try:
            super()._close(peer or exc)
        finally:
            if self.transport is not None:
                self.transport.detach()  # the model is plain DDP again, ready for another
        if peer is not None:
            raise peer from exc
