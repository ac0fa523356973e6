"""The :class:`Runtime`: bootstrap, registration, the collective ``sync``, ``wait``/``retry``.

Protocol, per iteration, on every rank of the ``torch.distributed`` world::

    cfg = rt.sync(config)   # all ranks (servers too); the leader's config wins
    loss.backward()         # workers: hooks pack gradients, chunks leave when ready
    rt.wait()               # workers: .grad now holds the average over workers
    # servers, meanwhile: rt.serve_iteration()  (autotune.server.serve loops over both)

``sync`` is one all-reduce of a few int64 (the leader's encoded configuration, a stop
flag, the leader's gradient-layout version). When the layout changed (a ``register`` or
the ready order learnt on the first iteration) the leader's layout follows as one
broadcast and every worker checks its own gradients against it. When the configuration or
layout changed, every rank builds the new :class:`~autotune.runtime.prepared.Setup` aside,
all ranks vote, and only if all succeeded is it swapped in (creating any process group it
needs for the first time); otherwise every rank raises the same error and keeps the old
configuration. ``allreduce`` iterations may also run without a ``sync`` each (hooks arm
the next iteration under the active configuration); ``pushpull`` needs one per iteration
because servers serve exactly one iteration per ``sync``.

Faults: see :class:`~autotune.runtime.errors.RuntimeFault` and
:mod:`autotune.runtime.faults`. ``.grad`` is written only after every chunk of the
iteration completed, so a failed ``wait`` leaves the local gradients intact; after a
*recoverable* fault all ranks ``sync`` again (the leader with a known-good configuration)
and workers call :meth:`Runtime.retry` to average the same gradients again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import warnings
from datetime import timedelta
from typing import Any, Iterable, Iterator, Mapping, Sequence

import torch
import torch.distributed as dist


from .averager import Averager
from .compat import all_gather as _all_gather
from .config import FALLBACK_STREAMS, SIGNATURE, ConfigError, Limits, RuntimeConfig
from .control import ControlPlane
from .engine import OpError
from .errors import RuntimeFault, ServerLost, UsageError
from .faults import FaultInjector, Liveness
from .groups import GroupCache, keep_forever, needed_groups
from .layout import Layout
from .prepared import Setup
from .reconfigure import Active, Candidate
from .world import WorldInfo, discover, local_machine, local_role

MAGIC = 0x4155_5401
# control message slots (then the configuration, RuntimeConfig.encode())
_MAGIC, _STOP, _VERSION, _LENGTH, _DIRTY, _BADCFG, _H = 0, 1, 2, 3, 4, 5, 8


class Runtime:
    """Gradient averaging under any :class:`RuntimeConfig` within :attr:`limits` (see the
    module docstring). Its parts: the :class:`ControlPlane` (bounded control collectives),
    the :class:`Layout` (registered gradients and their order), :class:`Active`
    (reconfiguration) and :class:`Averager` (the averaging rounds); the Runtime runs the
    protocol between them and turns failures into faults that name a rank."""

    def __init__(self, info: WorldInfo, limits: Limits, control: Any, workers_group: Any,
                 timeout: float, store: Any, heartbeat: float, control_timeout: float,
                 faults: FaultInjector | None = None):
        self.info = info
        self.limits = limits
        self.timeout = float(timeout)
        self._control = control
        self._control_members: tuple[int, ...] = tuple(range(info.world_size))
        self._workers_group = workers_group
        self._store = store
        self._groups = GroupCache(info, timeout)
        self._faults = faults if faults is not None else FaultInjector((), info.rank)
        self._liveness = Liveness(store, info.rank, heartbeat)
        self._liveness.start()
        self._plane = ControlPlane(self._liveness, self.timeout, control_timeout)
        self._layout = Layout()               # registration (workers)
        self._hooks: list[Any] = []
        self._active = Active(info, self._layout, self._groups, self._faults)
        self._averager = Averager(info, self._active, self._layout, self._groups, self._faults,
                                  self._liveness, self.timeout, self._lost_peers, self.describe)
        self._stopped = False
        self._broken: RuntimeFault | None = None
        self._closed = False
        self.iterations = 0

    # ================================================================== bootstrap
    @classmethod
    def bootstrap(cls, timeout: float = 300.0, *, role: str | None = None,
                  max_streams: int = Limits.max_streams,
                  control_timeout: float = 3600.0, heartbeat: float = 0.5,
                  faults: FaultInjector | None = None) -> "Runtime":
        """Collective on an initialised ``torch.distributed`` world (every rank, servers
        too): learn roles and machines, create the control and worker groups.

        ``timeout``: seconds any communication wait may take (it includes waiting for a
        slower peer's backward, so keep it above the longest backward pass).
        ``control_timeout``: how long a rank may wait in ``sync`` for others that are alive
        (servers wait there while workers compute, workers while one evaluates; default one
        hour). A peer whose heartbeat stopped ends any wait after ``timeout`` (see
        :mod:`autotune.runtime.control`). With servers, the all-reduce groups of
        :data:`FALLBACK_STREAMS` streams are made here, so that losing a server is not
        fatal (see :class:`ServerLost`). ``role``: ``worker`` or
        ``server`` (default ``AUTOTUNE_ROLE``, else worker). Servers adopt the leader's
        ``timeout`` and ``max_streams``. ``faults``: injected faults for tests (default:
        the rules of ``AUTOTUNE_FAULT``, none when it is unset)."""
        if not dist.is_available() or not dist.is_initialized():
            raise UsageError("Runtime.bootstrap needs an initialised torch.distributed world "
                             "(torch.distributed.init_process_group)")
        rank, world = dist.get_rank(), dist.get_world_size()
        role = local_role(role)
        # gloo's own limit stays out of the way: ControlPlane bounds every wait
        control = dist.new_group(list(range(world)), backend="gloo",
                                 timeout=timedelta(days=7))
        info = discover(rank, world, role, local_machine(), control)
        # The leader's timeout and stream count hold everywhere (servers start with defaults).
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
        store = None
        try:
            store = dist.distributed_c10d._get_default_store()
            store.set(f"autotune/pid/{rank}", f"{os.getpid()}")
        except Exception:
            store = None
        faults = faults if faults is not None else FaultInjector.from_env(rank)
        rt = cls(info, limits, control, workers_group, timeout, store, heartbeat, control_timeout,
                 faults)
        if info.servers:
            rt._groups.ensure([("ar", s) for s in range(min(FALLBACK_STREAMS, lead_streams))])
        return rt

    # ================================================================== inspection
    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def config(self) -> RuntimeConfig | None:
        """The active configuration (``None`` before the first ``sync``)."""
        return self._active.config

    @property
    def setup(self) -> Setup | None:
        return self._active.setup

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
        """Averaging rounds started so far on this rank: the ``Context.iteration`` the
        codecs use for the next round (workers count the same everywhere)."""
        return self._averager.round

    @property
    def residual_norms(self) -> dict[str, float]:
        """L2 norm of what error feedback holds back on this rank, per flat dtype buffer
        (``worker``: its own encodings; ``summation``: its Summation Service's)."""
        r = self._active.residuals
        return {f"{kind}:{d}": ef.norm() for kind, efs in (("worker", r.worker),
                                                          ("summation", r.summation))
                for d, ef in sorted(efs.items())}

    @property
    def progress(self) -> tuple[int, int]:
        """Workers: (chunks completed, chunks) of the iteration under way; (0, 0) if none.
        Chunks complete while backward runs: this is how overlap shows."""
        it, setup = self._averager.current, self._active.setup
        if it is None or setup is None:
            return (0, 0)
        return (it.chunks_done, len(setup.plan))

    def describe(self, rank: int) -> str:
        text = self.info.describe(rank)
        if self._store is not None:
            try:
                text = text[:-1] + f", pid {self._store.get(f'autotune/pid/{rank}').decode()})"
            except Exception:
                pass
        return text

    def _check_alive(self) -> None:
        if self._closed:
            raise UsageError("the runtime was shut down")
        if self._broken is not None:
            raise RuntimeFault(f"the runtime is unusable after an earlier fault: {self._broken}",
                               rank=self._broken.rank)

    def _need_worker(self, what: str) -> None:
        if not self.info.is_worker:
            raise UsageError(f"{what} is for workers; this rank is a server")

    # ================================================================== registration
    def register(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Workers: the parameters whose gradients are averaged (those with
        ``requires_grad``; duplicates once). Installs the gradient hooks. Takes effect at
        the next ``sync``; the first iteration after it runs in reversed parameter order
        and teaches the leader the real ready order (applied at the following ``sync``)."""
        self._check_alive()
        self._need_worker("register")
        if self._averager.current is not None:
            raise UsageError("register() during an iteration (between backward and wait)")
        plist = self._layout.register(params)
        for h in self._hooks:
            h.remove()
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook_for(i))
                       for i, p in enumerate(plist)]

    def _hook_for(self, index: int) -> Any:
        def hook(param: torch.Tensor) -> None:
            if self._active.setup is None or self._layout.dirty or self._closed \
                    or self._broken is not None:
                return  # (wait() says why)
            self._averager.on_grad(index, param)
        return hook

    # ================================================================== sync
    def sync(self, config: Mapping[str, Any] | None = None, stop: bool = False) -> dict[str, Any]:
        """Collective on ALL ranks at an iteration boundary; returns the active config.

        The leader (``info.leader``, the first worker) passes the configuration to use
        (``None``: keep the active one, or the default at first) and ``stop=True`` at the
        end; the others pass nothing. Raises :class:`ConfigError` (bad configuration or
        registrations disagreeing between workers) or a recoverable
        :class:`RuntimeFault` (a rank could not apply it) identically on every rank,
        keeping the previous configuration."""
        self._check_alive()
        if self._stopped:
            raise UsageError("sync() after the job was stopped")
        if self.info.is_worker and self._averager.open():
            self._finish_open_iteration()
        leader = self.info.rank == self.info.leader
        msg = torch.zeros(_H + len(RuntimeConfig()), dtype=torch.int64)
        error: ConfigError | None = None
        if leader:
            msg[_MAGIC] = MAGIC
            msg[_STOP] = int(bool(stop))
            msg[_VERSION] = self._layout.version
            msg[_LENGTH] = len(self._layout.proposed)
            try:
                wanted = (RuntimeConfig.of(config).check(self.limits) if config is not None
                          else self._active.config or RuntimeConfig())
                msg[_H:] = torch.tensor(wanted.encode(), dtype=torch.int64)
            except ConfigError as e:
                error = e
                msg[_BADCFG] = 1
        elif config is not None or stop:  # raising here would leave the others waiting
            warnings.warn(f"only the leader (rank {self.info.leader}) passes config/stop to "
                          "sync(); ignored on this rank", RuntimeWarning, stacklevel=2)
        if self.info.is_worker and self._layout.dirty:
            msg[_DIRTY] = 1
        self._control_op("sync", dist.all_reduce, msg, group=self._control)
        if int(msg[_MAGIC]) != MAGIC:
            raise RuntimeFault("garbled control message: is every rank running the same autotune?")
        if msg[_BADCFG]:
            raise error or ConfigError(f"the leader (rank {self.info.leader}) asked for a "
                                       "configuration this job cannot run (see its error)")
        if msg[_STOP]:
            self._stopped = True
            return (self._active.config or RuntimeConfig()).as_dict()
        new = RuntimeConfig.decode(msg[_H:].tolist())
        version = int(msg[_VERSION])
        layout = None
        if version != self._layout.seen or int(msg[_DIRTY]) > 0:
            layout = self._exchange_layout(int(msg[_LENGTH]))
        if layout is not None or new != self._active.config:
            self._apply(new, layout, version, reregistered=int(msg[_DIRTY]) > 0)
        self._averager.served = self._faults.refuses(self._active.config)
        return self._active.config.as_dict()  # type: ignore[union-attr]

    def _control_op(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A collective of the control plane, its wait bounded (:class:`ControlPlane`). A
        failure becomes a RuntimeFault naming the rank to blame: recoverable when only
        servers were lost (:class:`ServerLost`), else it breaks the runtime."""
        group = kwargs.get("group")
        members = self.info.workers if group is self._workers_group else self._control_members
        try:
            if fn in (dist.all_reduce, dist.broadcast):
                return self._plane.call(what, fn, *args, members=members, **kwargs)
            if fn in (dist.isend, dist.irecv):
                return self._plane.wait(fn(*args, **kwargs), what, members)
            return fn(*args, **kwargs)
        except Exception as e:
            err = e if isinstance(e, OpError) else OpError(what, members, e)
            fault = self._fault_from(err)
            if not fault.recoverable:
                self._broken = fault
            raise fault from e

    def _exchange_layout(self, n: int) -> list[list[int]]:
        """The leader's proposed gradient order, broadcast to every rank."""
        t = torch.zeros(n * 3, dtype=torch.int64)
        if self.info.rank == self.info.leader and n:
            t[:] = torch.tensor(self._layout.rows(), dtype=torch.int64)
        self._control_op("layout broadcast", dist.broadcast, t, src=self.info.leader,
                         group=self._control)
        return t.view(n, 3).tolist() if n else []

    def _apply(self, config: RuntimeConfig, layout: list[list[int]] | None, version: int,
               reregistered: bool = False) -> None:
        """Reconfigure (see :mod:`autotune.runtime.reconfigure`): every rank builds the
        configuration aside, all vote, and only if all succeeded is it swapped in."""
        code, failure, cand = 0, None, None
        try:
            cand = self._active.prepare(config, layout, version, reregistered)
        except ConfigError as e:
            code, failure = 1, e
        except Exception as e:  # e.g. out of memory for the buffers
            code, failure = 2, e
        world = self.info.world_size
        vote = torch.zeros(2 * world, dtype=torch.int64)
        vote[self.info.rank] = code
        vote[world + self.info.rank] = int(cand is not None and cand.give_back
                                           and not self.info.is_worker)
        self._control_op("configuration vote", dist.all_reduce, vote, group=self._control)
        codes = vote[:world].tolist()
        bad = [r for r, v in enumerate(codes) if v]
        if bad:
            where = ", ".join(self.describe(r) for r in bad)
            detail = f": {failure}" if failure is not None else f" (see the log of rank {bad[0]})"
            if any(v == 1 for v in codes):
                raise ConfigError(f"configuration {config} rejected by {where}{detail}")
            raise RuntimeFault(f"configuration {config} could not be applied on {where}{detail}",
                               rank=bad[0], recoverable=True)
        self._control_op("process group creation", self._groups.ensure,
                         needed_groups(config, self.info))
        assert isinstance(cand, Candidate)
        senders = [r for r in range(world) if vote[world + r]]
        self._active.commit(cand, senders,
                            lambda *a: self._control_op(*a, group=self._control))

    # ================================================================== iterations
    def wait(self) -> None:
        """Workers, after backward: return when every registered parameter's ``.grad``
        holds the average over workers. Parameters whose gradient did not arrive by now
        contribute their current ``.grad`` (zeros if ``None``); one that had no gradient
        here gets one only if the average is non-zero. Raises :class:`RuntimeFault` on a
        dead peer, a timeout or an injected fault, leaving ``.grad`` untouched."""
        self._check_alive()
        self._need_worker("wait")
        if self._averager.accumulating:
            raise UsageError("wait() inside no_sync(): leave the no_sync() block for the last "
                             "backward pass of the iteration, then wait()")
        self._check_registration()
        self._complete(repack_all=False)

    # ================================================================== DDP habits
    @property
    def accumulating(self) -> bool:
        """Whether this worker is inside :meth:`no_sync`."""
        return self._averager.accumulating

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Workers: backward passes inside only accumulate into ``.grad`` locally (as
        DDP's ``no_sync``); the next backward outside it sends the accumulated ``.grad``,
        and :meth:`wait` returns its average. Enter it before the iteration's first
        backward; every worker accumulates the same number of micro-batches."""
        self._need_worker("no_sync")
        it = self._averager.current
        if it is not None and any(it.fired):
            raise UsageError("no_sync() entered after a backward pass that already sent its "
                             "gradients: run the accumulating backward passes first, inside "
                             "no_sync(), and the last one outside it")
        outer = self._averager.accumulating
        self._averager.accumulating = True
        try:
            yield
        finally:
            self._averager.accumulating = outer

    def broadcast_from_leader(self, tensors: Sequence[torch.Tensor], what: str = "tensors",
                              check: bool = False) -> None:
        """Workers, collectively: overwrite ``tensors`` in place with the leader's values
        (coalesced per dtype over the workers' group, as DDP, bounded by ``timeout``). Every
        worker passes tensors of the same shapes in the same order; ``check=True`` first
        verifies that (one small all-reduce) and raises :class:`ConfigError` naming the
        first differing rank instead of a garbled broadcast."""
        self._check_alive()
        self._need_worker("broadcast_from_leader")
        tensors = [t.detach() for t in tensors]
        if check:
            self._check_same_shapes(tensors, what)
        # DDP's own coalesced broadcast: one flat buffer per dtype, copied back in place.
        self._control_op(f"broadcast of the leader's {what}", dist._broadcast_coalesced,
                         self._workers_group, tensors, 256 << 20, self.info.leader)

    def _check_same_shapes(self, tensors: Sequence[torch.Tensor], what: str) -> None:
        """Raise :class:`ConfigError` on every worker if the workers' tensors differ."""
        shapes = tuple((tuple(t.shape), str(t.dtype)) for t in tensors)
        digest = int.from_bytes(hashlib.sha256(repr(shapes).encode()).digest()[:7], "big")
        workers = self.info.workers
        rows = torch.zeros(len(workers), 2, dtype=torch.int64)
        rows[workers.index(self.info.rank)] = torch.tensor([len(tensors), digest])
        self._control_op(f"check of the {what}", dist.all_reduce, rows,
                         group=self._workers_group)
        lead = rows[workers.index(self.info.leader)]
        bad = [w for w, r in zip(workers, rows) if not torch.equal(r, lead)]
        if bad:
            raise ConfigError(f"the workers' {what} differ: {self.describe(bad[0])} has other "
                              f"shapes or dtypes than the leader (rank {self.info.leader}); "
                              "every worker must build the same model")

    def retry(self) -> None:
        """Workers: average the current iteration's local gradients (still intact in
        ``.grad`` after a recoverable fault) again, under the active configuration.

        After a recoverable :class:`RuntimeFault` from :meth:`wait`: every rank calls
        :meth:`sync` (the leader with a known-good configuration; servers do so in their
        serving loop anyway), then every worker calls ``retry()`` instead of running
        backward again. Returns like :meth:`wait`."""
        self._check_alive()
        self._need_worker("retry")
        self._check_registration()
        it = self._averager.current
        if it is not None and any(it.fired):
            raise UsageError("retry() while an iteration is under way; call wait()")
        self._complete(repack_all=True)

    def _check_registration(self) -> None:
        if self._layout.dirty:
            raise UsageError("register() takes effect at the next sync(): call rt.sync() on all "
                             "ranks after register() and before backward")

    def _complete(self, repack_all: bool, write: bool = True) -> None:
        """Complete the open round (:meth:`Averager.complete`), its failure as a fault."""
        try:
            self._averager.complete(repack_all, write)
        except UsageError:
            raise
        except Exception as e:
            fault = self._fault_from(e)
            if not fault.recoverable:
                self._broken = fault
            raise fault from (None if fault is e else e)
        if write:
            self.iterations += 1
            self._layout.learn(self._averager.last_order,
                               self.info.rank == self.info.leader and not repack_all)

    def _lost_peers(self) -> list[int]:
        """Servers another rank posted as lost that this rank has not dropped yet."""
        if not self.info.servers:
            return []
        return sorted(set(self._liveness.lost()) - set(self._active.lost_servers))

    def _finish_open_iteration(self) -> None:
        """Before a sync: complete an iteration left open, so the servers' round ends."""
        warnings.warn("rt.sync() before rt.wait(): the open iteration is completed and its "
                      "result discarded", RuntimeWarning, stacklevel=3)
        try:
            self._complete(repack_all=False, write=False)
        except RuntimeFault as e:
            if not e.recoverable:
                raise

    def _fault_from(self, err: BaseException) -> RuntimeFault:
        if isinstance(err, RuntimeFault):
            return err
        if not isinstance(err, OpError):
            return RuntimeFault(f"internal error in a communication stream: {err!r}")
        me = self.info.rank
        if not self.info.is_worker and me in self._liveness.lost():
            return ServerLost(f"this server ({self.describe(me)}) was given up by the workers "
                              "(it stopped answering): they go on without servers", servers=(me,))
        peers = [p for p in err.peers if p != me]
        posted = sorted(set(self._liveness.lost()) & set(peers))
        dead = posted or (self._liveness.dead(peers) if peers else None)
        if dead and set(dead) <= set(self.info.servers):
            return self._drop_servers(dead, err)
        if dead:
            rank, state = dead[0], "stopped (no heartbeat: dead?)"
        elif len(peers) == 1:
            rank, state = peers[0], "failed to answer"
        else:
            rank, state = None, ""
        if rank is not None:
            text = f"{self.describe(rank)} {state} during {err.what}: {err.cause}"
        else:
            text = f"{err.what} failed: {err.cause}"
        return RuntimeFault(text, rank=rank, recoverable=False)

    def _drop_servers(self, dead: list[int], err: OpError) -> ServerLost:
        """Servers ``dead`` stopped: tell every rank, and on a worker go on without any
        server (control over the workers' group, all-reduce only; the iteration's
        gradients are intact, so it is averaged again: ``sync`` then ``retry``)."""
        self._liveness.post_lost(dead)
        who = ", ".join(self.describe(r) for r in dead)
        if self._control is not self._workers_group:
            for group in [self._control, *self._groups.with_any_of(self.info.servers)]:
                keep_forever(group)  # operations on them may never end: no destructor at exit
        if self.info.is_worker:
            self._active.lost_servers = tuple(sorted(set(self._active.lost_servers)
                                                     | set(self.info.servers)))
            self._control = self._workers_group
            self._control_members = self.info.workers
            self._layout.seen = -1        # every worker takes the leader's layout again
            self._averager.reset()
            text = (f"{who} stopped (no heartbeat) during {err.what}: {err.cause}. The workers "
                    "go on without servers (all-reduce); the gradients are intact: sync() and "
                    "retry()")
        else:
            text = f"{who} stopped during {err.what}: the workers go on without servers"
        return ServerLost(text, servers=tuple(dead))

    # ================================================================== servers
    def serve_iteration(self) -> None:
        """Servers: sum this iteration's owned chunks under the active configuration."""
        self._check_alive()
        if self.info.is_worker:
            raise UsageError("serve_iteration is for servers")
        try:
            self._averager.serve()
        except Exception as e:
            fault = self._fault_from(e)
            self._broken = fault
            raise fault from (None if fault is e else e)
        self.iterations += 1

    # ================================================================== misc
    def worker_max(self, x: float) -> float:
        """All-reduce MAX of ``x`` over the workers (e.g. the slowest worker's time)."""
        self._need_worker("worker_max")
        t = torch.tensor([float(x)], dtype=torch.float64)
        self._check_alive()
        self._control_op("worker_max", dist.all_reduce, t, op=dist.ReduceOp.MAX,
                         group=self._workers_group)
        return float(t.item())

    def shutdown(self) -> None:
        """Idempotent: stop threads, remove hooks. Collective clean-up is the leader's
        ``sync(stop=True)``, which lets the servers leave their loop."""
        if self._closed:
            return
        self._closed = True
        if self._averager.current is not None:
            self._averager.current.abort()
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._averager.pool.shutdown(timeout=2.0 if self._broken else 10.0)
        self._liveness.leave()
        self._liveness.stop()
        if self._broken is None and not self._active.lost_servers:
            self._groups.destroy()
        self._active.inp, self._active.out, self._active.pools = {}, {}, []

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
