"""autotune inside DDP: the comm hook, a thin adapter that hands DDP's gradient buckets to
the native :class:`~autotune.runtime.core.Runtime`.

DDP keeps everything it owns (its buckets and their order, ``no_sync``, buffers, unused
parameters, checkpoints); :class:`CommHookState` is the state of the comm hook it calls
with each bucket (``register_comm_hook``). The runtime does the work, under every
configuration, the default all-reduce among the workers included: its one chunk plan,
engine of bounded operations, codec factory and error-feedback store, on DDP's own
parameters, whose gradients it takes as they are ready, exactly as for a native model.
What DDP adds stays here and in :class:`~autotune.runtime.ddp.ddp_buckets.RuntimeBuckets`
(its ``no_sync``, its buckets and the futures it waits on)::

    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = CommHookState.install(ddp)           # collective: every rank (joins a runtime)
    for x, y in loader:
        state.sync(config if leader else None)   # between iterations, every rank
        loss_fn(ddp(x), y).backward()            # buckets leave as DDP fills them
        opt.step(); opt.zero_grad()

``autotune.session(ddp_model)`` does this for the user, with the session's runtime
(servers included).

**What stays DDP's own** (its all-reduce of the whole bucket on DDP's group,
:meth:`RuntimeBuckets.fallback <autotune.runtime.ddp.ddp_buckets.RuntimeBuckets.fallback>`):
the default configuration (``RuntimeConfig()``), so that where nothing can be won the
hook costs what DDP costs; and, for CUDA buckets on an NCCL group, every lossless
all-reduce among the workers (the runtime's engine is gloo, which stages device memory
through the host; ``streams`` and ``chunk_bytes`` change nothing there). Every other
configuration is the runtime's.

**The hook is registered when it is first needed.** Until a configuration that is not
DDP's own all-reduce is put in force (or the buckets are sampled), no comm hook is
registered at all: DDP runs its own built-in all-reduce, in C++, and a job that never
leaves the default is DDP to the instruction. A Python comm hook costs each bucket a
call into Python and a continuation of its future, about 2% of a step of the small GPT
of ``benchmarks/clock_bench.py`` on this project's CPU machine. Meanwhile a gradient
hook per parameter counts the gradients that arrive (:attr:`averaged`, the backward
passes, when the last arrived) as the buckets do once the hook is in. DDP cannot take a
comm hook back: once registered it stays, and the default runs through it from then on,
unless the DDP is built anew without it (:meth:`CommHookState.unhook`: the session does
so for DDP applied in place, once the search settles on the default).

**Bounds and errors.** The runtime bounds every wait by its ``timeout``; DDP's all-reduce
is bounded by DDP's group's timeout. Every error names this rank and the bucket.
"""

# No ``from __future__ import annotations`` here: DDP inspects the hook's annotations
# (``_check_comm_hook``) and compares them with the real classes.

import time
from typing import Any, Mapping, Optional, Union

import torch
import torch.distributed as dist

from autotune import signals

from autotune.runtime.config import ConfigError, RuntimeConfig
from autotune.runtime.data.gradstats import GradientSample
from autotune.runtime.ddp.ddp_buckets import RuntimeBuckets
from autotune.runtime.errors import UsageError

__all__ = ["CommHookState"]

DEFAULT_TIMEOUT = 300.0
_ALREADY = "can only be called once"  # DDP's message for a second comm hook
_ATTRIBUTE = "_autotune_hook_state"  # where a DDP model keeps its comm hook state


def _theirs(rank: int, said: str = "") -> UsageError:
    """The error for a DDP model that has a comm hook of the user's own."""
    return UsageError(f"rank {rank}: a comm hook is already registered on this DDP model; "
                      "autotune's hook tunes DDP's communication and replaces it: remove "
                      f"yours{said}")


class CommHookState:
    """The state of autotune's DDP comm hook; see the module docstring. ``rt``: the
    runtime (a worker's) that averages the buckets; ``process_group``: DDP's group
    (default: the world). Make it with :meth:`install`."""

    def __init__(self, rt: Any, process_group: Any = None):
        if not dist.is_available() or not dist.is_initialized():
            raise UsageError("CommHookState needs torch.distributed initialised "
                             "(dist.init_process_group) before DDP and the hook")
        self.rank = dist.get_rank()
        self._forward_hook: Any = None  # the handle of the DDP model's forward pre-hook
        self._ddp: Any = None  # the DDP whose buckets it averages
        self.hooked = False  # registered as the DDP's comm hook (it stays: DDP keeps it)
        self._bind(rt, process_group)

    def _bind(self, rt: Any, process_group: Any) -> None:
        """A fresh state over the runtime ``rt``."""
        self.buckets = RuntimeBuckets(rt, process_group)
        self._config: Optional[RuntimeConfig] = None
        # buckets handed to the hook so far (none under DDP's no_sync); before the hook is
        # registered, the gradients that arrived in synchronising backward passes
        self.averaged = 0
        self.backwards = 0  # DDP's last bucket handed over: backward passes averaged
        # when the last bucket reached the hook: backward's compute ended about then, so
        # what backward takes after it is communication left exposed
        self.last_bucket_at = 0.0
        # set by a session that measures statistical efficiency: each bucket is sampled
        # before and after averaging (autotune.runtime.data.gradstats)
        self.sample: Optional[GradientSample] = None
        # before the comm hook is registered: a gradient hook per parameter counts
        self._counters: list = []
        self._counted: list = []  # the parameters counted
        self._arrived = 0   # gradients since the last training forward
        self._expected = 0  # gradients a backward brings: every parameter's (0: DDP
        #                     finds the unused ones, marking them ready itself)

    # ------------------------------------------------------------------ making
    @classmethod
    def install(cls, ddp_model: Any, rt: Any = None, *, called: Any = None,
                timeout: float = DEFAULT_TIMEOUT) -> "CommHookState":
        """Register a new state as ``ddp_model``'s comm hook (collective: every rank
        of the world calls it, as it built DDP). ``rt``: the runtime that averages the
        buckets (default: one joined now, ``Runtime.bootstrap(timeout=timeout)``, every
        rank of the world a worker). A model that is not DDP is a ``TypeError``; a DDP
        model that already has a comm hook is a :class:`UsageError`, unless it is the
        state of a closed session (:meth:`detach`): DDP cannot take a hook back, so
        that one is bound to ``rt`` again. Until the first :meth:`sync`, buckets are
        averaged as DDP averages them. ``called``: the module whose forward the user calls,
        where it is not ``ddp_model`` (DDP applied in place: its forward pre-hook reads
        DDP's ``no_sync`` state)."""
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(ddp_model, DistributedDataParallel):
            kind = type(ddp_model)
            raise TypeError(f"CommHookState.install needs a "
                            f"torch.nn.parallel.DistributedDataParallel model, got "
                            f"{kind.__module__}.{kind.__qualname__}")
        hooks = getattr(ddp_model, "_comm_hooks", ())
        if any(not isinstance(s, cls) for _, s in hooks):
            raise _theirs(dist.get_rank())
        # the state of an earlier session on this model (registered as its comm hook
        # or not yet)
        state = getattr(ddp_model, _ATTRIBUTE, None)
        if state is not None and state.attached:
            raise UsageError(f"rank {state.rank}: a comm hook is already registered on this "
                             "DDP model, autotune's, and its session is still open: one "
                             "session at a time (leave the first one's `with` block before "
                             "opening the next)")
        if rt is None:
            from autotune.runtime.core import Runtime

            rt = Runtime.bootstrap(timeout=timeout)
        if state is not None:
            state._bind(rt, ddp_model.process_group)
        else:
            state = cls(rt, ddp_model.process_group)
            setattr(ddp_model, _ATTRIBUTE, state)
        state._ddp = ddp_model
        called = ddp_model if called is None else called
        state._forward_hook = called.register_forward_pre_hook(lambda m, _: state._forward())
        params = [p for p in ddp_model.module.parameters() if p.requires_grad]
        state.buckets.register(params)
        if not state.hooked:
            state._count(params)
        return state

    def move_to(self, ddp_model: Any) -> None:
        """Average the buckets of ``ddp_model``, a DDP built anew over the same module and
        parameters on the same group (:class:`autotune.sessions.ddp.InPlaceDDP`), from
        now on: this state is its comm hook (once one is needed); the runtime's
        registration stays."""
        if self.hooked:
            self._register(ddp_model)
        setattr(ddp_model, _ATTRIBUTE, self)
        self._ddp = ddp_model
        self._expected = self._expected_gradients()

    def unhook(self, ddp_model: Any) -> None:
        """Average the buckets of ``ddp_model``, a DDP built anew over the same module
        and parameters with no comm hook, by DDP's built-in all-reduce from now on
        (counted as before the hook, module docstring), until a configuration needs the
        hook again. The configuration in force must be DDP's own all-reduce."""
        if not self.buckets.ddp_allreduce or self.sample is not None:
            raise UsageError("unhook() under a configuration the runtime runs")
        self.hooked = False
        setattr(ddp_model, _ATTRIBUTE, self)
        self._ddp = ddp_model
        self._count(self._counted)

    def _hook(self) -> None:
        """Register as the DDP's comm hook, for good (module docstring); the counting
        gradient hooks go."""
        self._register(self._ddp)
        self.hooked = True
        self._uncount()

    def _register(self, ddp_model: Any) -> None:
        """This state as ``ddp_model``'s comm hook (DDP takes one, once)."""
        try:
            ddp_model.register_comm_hook(self, type(self).hook)
        except RuntimeError as e:
            if _ALREADY not in str(e):
                raise
            hooks = getattr(ddp_model, "_comm_hooks", None)  # DDP noted ours before failing
            if hooks and hooks[-1][1] is self:
                hooks.pop()
            raise _theirs(self.rank, f" (DDP said: {e})") from None

    @property
    def attached(self) -> bool:
        """Whether a runtime averages the buckets (an open session); after
        :meth:`detach`, DDP's own all-reduce does."""
        return self.buckets.rt is not None

    def detach(self) -> None:
        """At a session's close (its runtime shut down): let go of the runtime and remove
        the forward pre-hook. The comm hook stays registered, as DDP cannot take one
        back, and averages every bucket with DDP's own all-reduce from now on, so the
        model trains as plain DDP; :meth:`install` binds it to the next session's. What
        :meth:`describe` counts is kept."""
        if self._forward_hook is not None:
            self._forward_hook.remove()
            self._forward_hook = None
        self._uncount()
        self._ddp = None
        self.buckets.rt = None
        self.sample = None

    # ------------------------------------------------------------------ configuration
    @property
    def rt(self) -> Any:
        """The runtime that averages the buckets."""
        return self.buckets.rt

    @property
    def limits(self) -> Any:
        """What the runtime can run (after a server loss, what is left)."""
        rt = self.rt
        return rt.limits.after_server_loss() if rt.lost_servers else rt.limits

    @property
    def config(self) -> Optional[RuntimeConfig]:
        """The configuration the next buckets use (``None`` before the first :meth:`sync`)."""
        return self._config

    def sync(self, config: Union[RuntimeConfig, Mapping[str, Any], None] = None,
             background: bool = False) -> RuntimeConfig:
        """Put the leader's ``config`` in force on every rank of the runtime's world
        (servers too, in their serving loop), between iterations: ``Runtime.sync`` (the
        leader passes ``config``, the others ``None``; one int64 message, nothing
        pickled). The one way a configuration reaches the hook; under
        push/pull, once before every iteration (the servers serve one round per
        ``sync``). Raises :class:`ConfigError` alike on every rank, naming the parameter;
        the previous configuration stays. ``background``: keep the active configuration
        without waiting for the message (``Runtime.sync``)."""
        try:
            active = self.rt.sync(config, background=background)
        except ConfigError as e:
            limits = self.limits
            raise ConfigError(f"autotune inside DDP ({limits.servers} server(s), "
                              f"{limits.workers_per_machine} worker(s) per machine, at "
                              f"most {limits.max_streams} streams): {e}") from None
        self._config = RuntimeConfig.of(active)
        self.buckets.put_in_force(self._config)
        if not self.hooked and (not self.buckets.ddp_allreduce or self.sample is not None):
            self._hook()  # every rank at once: the configuration is the same on all
        return self._config

    def describe(self) -> dict:
        """This rank's state: configuration, buckets seen (their sizes), hook calls per
        bucket, buckets the runtime averaged and those DDP's all-reduce did, the
        runtime's error feedback."""
        cfg, b = self._config, self.buckets
        return {"rank": self.rank, "config": None if cfg is None else cfg.as_dict(),
                "hooked": self.hooked,
                "buckets": dict(b.sizes), "rounds": dict(b.rounds), "handed": b.handed,
                "averaged_again": b.averaged_again,
                "residual_norms": {} if self.rt is None else self.rt.residual_norms}

    # ------------------------------------------------------------------ before the hook
    def _forward(self) -> None:
        """Before the DDP's forward (a forward pre-hook)."""
        self.buckets.forward(self._ddp)
        if torch.is_grad_enabled():
            self._arrived = 0

    def _count(self, params: list) -> None:
        """Until the comm hook is registered: a gradient hook per parameter that counts
        what the buckets would (module docstring)."""
        self._uncount()
        self._counters = [p.register_post_accumulate_grad_hook(self._arrival) for p in params]
        self._counted = params
        self._expected = self._expected_gradients()

    def _expected_gradients(self) -> int:
        # with find_unused_parameters DDP marks the unused ones ready itself, no gradient
        # hook runs for them: the first gradient after a forward is the backward's (0)
        return 0 if getattr(self._ddp, "find_unused_parameters", False) else len(self._counted)

    def _uncount(self) -> None:
        for h in self._counters:
            h.remove()
        self._counters = []

    def _arrival(self, _param: torch.Tensor) -> None:
        if not self.buckets.syncs:  # inside DDP's no_sync: DDP hands no bucket over
            return
        with signals.deferred(raise_at_end=False):  # a stop waits for step()
            self.averaged += 1
            self.last_bucket_at = time.perf_counter()
            self._arrived += 1
            if (self._arrived % self._expected == 0 if self._expected
                    else self._arrived == 1):
                self.backwards += 1

    # ------------------------------------------------------------------ the hook
    @staticmethod
    def hook(state, bucket):
        """DDP's comm hook: ``hook(state: CommHookState, bucket: dist.GradBucket) ->
        torch.futures.Future[torch.Tensor]`` of the bucket's average (no annotations:
        DDP compares them with its own classes). A stop signal arriving inside is raised
        at the next safe point, not here (:mod:`autotune.signals`)."""
        with signals.deferred(raise_at_end=False):
            return state.average(bucket)

    def average(self, bucket: Any) -> torch.futures.Future:
        """Start averaging ``bucket``; its future (with :attr:`sample` set, the bucket is
        sampled before and after)."""
        self.averaged += 1
        self.backwards += bucket.is_last()
        self.last_bucket_at = time.perf_counter()
        sample = self.sample
        if sample is None:
            return self.buckets.average(bucket)
        idx = bucket.index()
        sample.local(idx, bucket.buffer())

        def seen(fut: torch.futures.Future) -> torch.Tensor:
            out = fut.value()
            sample.averaged(idx, out)
            return out

        return self.buckets.average(bucket).then(seen)
