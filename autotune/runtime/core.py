"""The :class:`Runtime`: one rank's runtime, the public face of its parts.

Protocol, per iteration, on every rank of the ``torch.distributed`` world::

    cfg = rt.sync(config)   # all ranks (servers too); the leader's config wins
    loss.backward()         # workers: hooks pack gradients, chunks leave when ready
    rt.wait()               # workers: .grad now holds the average over workers
    # servers, meanwhile: rt.serve_iteration()  (autotune.server.serve loops over both)

``allreduce`` iterations may also run without a ``sync`` each (hooks arm the next
iteration under the active configuration); ``pushpull`` needs one per iteration because
servers serve exactly one iteration per ``sync``.

The parts, one concept each: joining the job (:mod:`~autotune.runtime.control.bootstrap`), the
control plane's groups and bounded waits (:mod:`~autotune.runtime.control.control`), the collective
``sync`` with its vote (:mod:`~autotune.runtime.control.sync`), reconfiguration
(:mod:`~autotune.runtime.control.reconfigure`), the gradient hooks and averaging rounds
(:mod:`~autotune.runtime.data.averager`), a round's end as the protocol counts it (a failure
blamed on a rank: :mod:`~autotune.runtime.control.rounds`), fault attribution
(:mod:`~autotune.runtime.control.blame`). The Runtime checks each call against the
protocol (:class:`UsageError`) and keeps whether the job was stopped and the runtime shut
down (whether a fault broke it is :attr:`Blame.broken`).

Faults: see :class:`~autotune.runtime.errors.RuntimeFault`, :mod:`autotune.runtime.control.faults`
and :mod:`autotune.runtime.control.blame`. ``.grad`` is written only after every chunk of the
iteration completed, so a failed ``wait`` leaves the local gradients intact; after a
*recoverable* fault all ranks ``sync`` again (the leader with a known-good configuration)
and workers call :meth:`Runtime.wait` again to average the same gradients.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
import torch.distributed as dist

from autotune.runtime.config import FALLBACK_STREAMS, Limits, RuntimeConfig
from autotune.runtime.control.blame import Blame
from autotune.runtime.control.bootstrap import Joined, join, take
from autotune.runtime.control.control import ControlPlane
from autotune.runtime.control.faults import FaultInjector, Liveness
from autotune.runtime.control.groups import GroupCache
from autotune.runtime.control.prepared import Setup
from autotune.runtime.control.reconfigure import Active
from autotune.runtime.control.rounds import Rounds
from autotune.runtime.control.sync import SyncProtocol
from autotune.runtime.data.averager import Averager
from autotune.runtime.data.engine import OpError
from autotune.runtime.data.layout import Layout
from autotune.runtime.data.staging import stage_cpu_from_env
from autotune.runtime.errors import RuntimeFault, UsageError


class Runtime:
    """Gradient averaging under any :class:`RuntimeConfig` within :attr:`limits` (see the
    module docstring). Its parts: the :class:`ControlPlane` (control groups, bounded
    collectives), the :class:`Layout` (registered gradients and their order),
    :class:`SyncProtocol` (``sync``), :class:`Active` (reconfiguration),
    :class:`Averager` (hooks, averaging rounds), :class:`Rounds` (a round completed,
    counted, or its failure blamed) and :class:`Blame` (faults that name a rank; the broken
    state); the Runtime runs the protocol between them."""

    def __init__(self, joined: Joined, heartbeat: float, control_timeout: float,
                 faults: FaultInjector | None = None, copy_cpu: bool | None = None,
                 grad_views: bool | None = None):
        info = self.info = joined.info
        self.limits = joined.limits
        self.timeout = float(joined.timeout)
        self._joined = joined
        self._groups = GroupCache(info, self.timeout)
        self._faults = faults if faults is not None else FaultInjector((), info.rank)
        self._liveness = Liveness(joined.store, info.rank, heartbeat)
        self._liveness.start()
        self._plane = ControlPlane(self._liveness, self.timeout, control_timeout, joined.control,
                                   joined.workers_group, range(info.world_size), info.workers)
        self._layout = Layout()               # registration (workers)
        self._active = Active(info, self._layout, self._groups, self._faults)
        self._averager = Averager(info, self._active, self._layout, self._groups, self._faults,
                                  self._liveness, self.timeout, joined.describe,
                                  stage_cpu_from_env() if copy_cpu is None else copy_cpu,
                                  grad_views)
        self._blame = Blame(info, self._liveness, joined.describe, self._plane, self._groups,
                            self._active, self._layout, self._averager)
        self._sync = SyncProtocol(info, self.limits, self._layout, self._active, self._groups,
                                  self._plane, self._blame.op, joined.describe)
        self._rounds = Rounds(self._averager, self._blame)
        self._stopped = False
        self._closed = False

    @classmethod
    def bootstrap(cls, timeout: float = 300.0, *, role: str | None = None,
                  max_streams: int = Limits.max_streams,
                  control_timeout: float = 3600.0, heartbeat: float = 0.5,
                  faults: FaultInjector | None = None,
                  copy_cpu: bool | None = None,
                  grad_views: bool | None = None) -> "Runtime":
        """Collective on an initialised ``torch.distributed`` world (every rank, servers
        too): learn roles and machines, create the control and worker groups
        (:func:`~autotune.runtime.control.bootstrap.join`; a worker that joined early, as
        ``autotune.workers_group()`` does, is built from that, its ``timeout`` and
        ``max_streams``). With servers, the all-reduce groups of :data:`FALLBACK_STREAMS`
        streams are made here, so that losing a server is not fatal (:class:`ServerLost`).

        ``timeout``: seconds any communication wait may take (keep it above the longest
        backward pass). ``control_timeout``: how long a rank may wait in ``sync`` for
        others that are alive (default one hour); a peer whose heartbeat (every
        ``heartbeat`` seconds) stopped ends any wait after ``timeout``
        (:mod:`autotune.runtime.control.control`). ``role``: ``worker`` or ``server`` (default
        ``AUTOTUNE_ROLE``, else worker); servers adopt the leader's ``timeout`` and
        ``max_streams``. ``faults``: injected faults for tests (default: the rules of
        ``AUTOTUNE_FAULT``). ``copy_cpu``: CPU gradients go through host staging too
        (tests; default ``AUTOTUNE_STAGE_CPU``). ``grad_views``: CPU ``.grad`` tensors
        become views of the averages, not copies (default ``AUTOTUNE_GRAD_VIEWS``;
        :mod:`autotune.runtime.data.copies`)."""
        joined = take() or join(timeout, role, max_streams)
        faults = faults if faults is not None else FaultInjector.from_env(joined.info.rank)
        rt = cls(joined, heartbeat, control_timeout, faults, copy_cpu, grad_views)
        if joined.info.servers:
            streams = min(FALLBACK_STREAMS, joined.limits.max_streams)
            rt._groups.ensure([("ar", s) for s in range(streams)])
        return rt

    # ================================================================== inspection
    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def iterations(self) -> int:
        """Iterations this rank completed (workers: wrote ``.grad``; servers: served)."""
        return self._rounds.iterations

    @property
    def config(self) -> RuntimeConfig | None:
        """The active configuration (``None`` before the first ``sync``)."""
        return self._active.config

    @property
    def setup(self) -> Setup | None:
        return self._active.setup

    @property
    def needs_sync(self) -> bool:
        """Whether every iteration needs a :meth:`sync`: push/pull (one round per sync),
        or server ranks waiting in their loop's sync."""
        return bool(self.info.servers) or (self.setup is not None and self.setup.pushpull)

    @property
    def lost_servers(self) -> tuple[int, ...]:
        """Servers given up after they stopped; the workers go on alone."""
        return self._active.lost_servers

    @property
    def process_groups(self) -> int:
        """Stream process groups created so far (each once)."""
        return len(self._groups)

    @property
    def threads(self) -> int:
        return self._averager.pool.size

    @property
    def gradient_order(self) -> list[int]:
        """Workers: registration indices of the gradients in the active layout order."""
        return list(self._layout.order)

    @property
    def round(self) -> int:
        """Rounds started on this rank: the codecs' next ``Context.iteration``."""
        return self._averager.round

    @property
    def residual_norms(self) -> dict[str, float]:
        """L2 norm of the error feedback held here, per buffer (``worker``/``summation``)."""
        return self._active.residuals.norms()

    @property
    def progress(self) -> tuple[int, int]:
        """Workers: (chunks completed, chunks) of the round under way (overlap shows)."""
        return self._averager.progress()

    def describe(self, rank: int) -> str:
        """``rank`` named for an error: its role, machine and pid."""
        return self._joined.describe(rank)

    def _check_alive(self) -> None:
        if self._closed:
            raise UsageError("the runtime was shut down")
        broken = self._blame.broken
        if broken is not None:
            raise RuntimeFault(f"the runtime is unusable after an earlier fault: {broken}",
                               rank=broken.rank)

    def _need_worker(self, what: str) -> None:
        if not self.info.is_worker:
            raise UsageError(f"{what} is for workers; this rank is a server")

    # ================================================================== registration
    def register(self, params: Iterable[torch.nn.Parameter],
                 gate: Callable[[], bool] | None = None) -> None:
        """Workers: the parameters to average (``requires_grad``, each once), hooked (they
        send only while ``gate()``, if given). In force at the next ``sync``; the first
        iteration teaches the leader the ready order."""
        self._check_alive()
        self._need_worker("register")
        if self._averager.current is not None:
            raise UsageError("register() during an iteration (between backward and wait)")
        live = self._usable if gate is None else (lambda: self._usable() and gate())
        self._averager.hook(self._layout.register(params), live)

    def _usable(self) -> bool:
        return not self._closed and self._blame.broken is None

    # ================================================================== sync
    def sync(self, config: Mapping[str, Any] | None = None, stop: bool = False, *,
             background: bool = False) -> dict[str, Any]:
        """Collective on ALL ranks at an iteration boundary; returns the active config. The
        leader (the first worker) passes the configuration (``None``: keep the active one,
        or the default) and ``stop=True`` at the end; the others pass nothing. Raises
        :class:`ConfigError` (bad configuration, registrations that disagree) or a
        recoverable :class:`RuntimeFault` (a rank could not apply it) alike on every rank,
        the previous configuration kept (:class:`SyncProtocol`).

        ``background=True`` (every worker at the same sync, the leader with no
        configuration; servers wait as always): keep the active configuration and return
        at once; the control message's round trip overlaps the next iteration and is
        waited for, bounded, at the next ``sync`` (:mod:`~autotune.runtime.control.sync`).
        For a caller that knows nothing changes, as a settled session."""
        self._check_alive()
        if self._stopped:
            raise UsageError("sync() after the job was stopped")
        if background and (config is not None or stop or not self.info.is_worker
                           or self._active.config is None or self._layout.dirty):
            raise UsageError("sync(background=True) keeps the active configuration: only on "
                             "a worker, with no configuration and no stop, after a sync, with "
                             "nothing registered since")
        if self.info.is_worker and self._averager.open():
            self._rounds.discard_open()
        if self._sync.run(config, stop, background):
            self._stopped = True
            return (self._active.config or RuntimeConfig()).as_dict()
        self._averager.served = self._faults.refuses(self._active.config)
        return self._active.config.as_dict()  # type: ignore[union-attr]

    # ================================================================== iterations
    def wait(self) -> None:
        """Workers, after backward: return when every registered parameter's ``.grad``
        holds the average over workers. Parameters whose gradient did not arrive by now
        contribute their current ``.grad`` (zeros if ``None``); one that had no gradient
        here gets one only if the average is non-zero. Raises :class:`RuntimeFault` on a
        dead peer, a timeout or an injected fault, leaving ``.grad`` untouched."""
        self._check_alive()
        self._need_worker("wait")
        self._check_registration()
        self._rounds.complete()

    @property
    def layout_in_force(self) -> bool:  # workers: a sync put the registration in force
        return self._active.setup is not None and not self._layout.dirty

    def _check_registration(self) -> None:
        if self._layout.dirty:
            raise UsageError("register() takes effect at the next sync(): call rt.sync() on all "
                             "ranks after register() and before backward")

    # ================================================================== the workers
    def injects_faults(self, config: Mapping[str, Any]) -> bool:
        """Whether ``AUTOTUNE_FAULT`` (tests) has a rule for ``config``: its rounds must
        run here, not in DDP's own all-reduce."""
        return self._faults.targets(config)

    def blame(self, what: str, peers: Sequence[int], cause: BaseException) -> RuntimeFault:
        """The fault that names the rank to blame for ``what`` (an operation among
        ``peers`` outside the runtime, e.g. DDP's all-reduce) failing with ``cause``: a
        peer that posted its failure, lost or without a heartbeat, else the only other
        peer. It breaks the runtime, as any fault of a collective it cannot retry."""
        return self._blame.fault(OpError(what, peers, cause), fatal=True)

    def worker_max(self, x: float | Sequence[float]) -> Any:
        """All-reduce MAX of ``x`` over the workers (e.g. the slowest worker's time); of
        each element, in one message, when ``x`` is a sequence (then a list)."""
        many = not isinstance(x, (int, float))
        t = torch.tensor([float(v) for v in x] if many else [float(x)], dtype=torch.float64)
        self._worker_reduce("worker_max", t, dist.ReduceOp.MAX)
        return t.tolist() if many else float(t.item())

    @property
    def workers_group(self) -> Any:
        """The workers' process group (gloo; servers are not in it)."""
        return self._plane.workers_group

    def worker_sum(self, t: torch.Tensor) -> None:
        """All-reduce SUM of the float tensor ``t``, in place, over the workers."""
        self._worker_reduce("worker_sum", t, dist.ReduceOp.SUM)

    def _worker_reduce(self, what: str, t: torch.Tensor, op: Any) -> None:
        self._need_worker(what)
        self._check_alive()
        self._blame.op(what, dist.all_reduce, t, op=op, group=self._plane.workers_group)

    # ================================================================== servers
    def serve_iteration(self) -> None:
        """Servers: sum this iteration's owned chunks under the active configuration."""
        self._check_alive()
        if self.info.is_worker:
            raise UsageError("serve_iteration is for servers")
        self._rounds.serve()

    # ================================================================== shutdown
    def shutdown(self, failed: BaseException | None = None) -> None:
        """Idempotent: remove the hooks, stop and join this runtime's threads (the open
        round aborted, every operation it started ended), then, on the clean path,
        destroy every process group the runtime made and let go of them, so that their
        gloo threads end too (the leader's ``sync(stop=True)`` lets the servers go).
        After a fault (``failed``, or a peer or server given up) the groups are left:
        destroying one that a peer is still inside deadlocks. ``failed``: what this rank
        stops for, posted first so that the peers name it (:meth:`Liveness.fail`)."""
        if self._closed:
            return
        self._closed = True
        if failed is not None:
            self._liveness.fail(failed)
        if failed is None and self._blame.broken is None:
            try:  # a background sync's message, before its group goes
                self._sync.drain()
            except RuntimeFault as e:
                failed = e
                self._liveness.fail(e)
        self._averager.close(timeout=2.0 if self._blame.broken else 10.0)
        self._liveness.leave()
        self._liveness.stop()
        if failed is None and self._blame.broken is None and not self._active.lost_servers:
            self._groups.destroy()
            self._plane.release(self._joined.owns_workers_group)
            self._joined.let_go()
        self._active.release()

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
