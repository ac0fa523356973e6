"""DDP for a session: DDP applied to a plain module in place, and the workers' group.

``autotune.session(model)`` of a plain module trains it under real DDP, applied in place
(:class:`InPlaceDDP`): a ``DistributedDataParallel`` over the module is built at the
session's start, and two hooks on the module run DDP's own ``_pre_forward`` and
``_post_forward`` around every call of ``model(x)``, as PyTorch's composable
``replicate()`` does. So DDP's semantics are DDP's: the broadcast of the leader's
parameters and buffers at the start, ``broadcast_buffers`` before each training forward,
``no_sync`` and gradient accumulation, unused and tied parameters, its buckets and their
overlap with backward. The module stays the user's own (its class, ``state_dict`` keys
and ``isinstance`` are unchanged); at the session's close the hooks are removed and DDP
let go, so the module is plain again. It is not ``replicate()`` itself, which is private
API, builds DDP over a parameter list (its buffers are never broadcast) and cannot be
undone; and not ``DDP(model)`` handed back, which would change what the user's name
``model`` is.

**Unused parameters.** DDP must be told whether some parameters get no gradient
(``find_unused_parameters``), which costs a walk over the autograd graph every iteration
and keeps its buckets out of the gradients' ready order. The first synchronising forward
shows it: DDP is built without; after that forward the graph of its output is walked once
(:func:`reached_parameters`), and if it misses a parameter on any worker, DDP is built
again with ``find_unused_parameters=True`` (``init_sync=False`` where torch has it: the
parameters are equal already) before the backward. (``static_graph=True`` would learn the
same from the first iteration, but torch's reducer fails an internal assert when that
iteration begins inside ``no_sync()``.) A model whose forward reaches every parameter at
first and skips one later is a clear error at that step, with what to pass instead.

**Evaluation.** A forward without autograd (``torch.no_grad()``) runs the module alone:
DDP would sync the buffers there, a collective that hangs when only rank 0 evaluates
(under DDP one calls ``ddp.module(x)``, which a module trained in place has no way to
say). The next training forward syncs them as DDP's does.

**Servers.** DDP's process group holds only the workers: :func:`workers_group` (for the
user's DDP, ``DDP(model, process_group=autotune.workers_group())``; for the in-place DDP
the session passes its runtime's).
"""

from __future__ import annotations

import hashlib
import inspect
import warnings
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from autotune.runtime.config import ConfigError, Limits
from autotune.runtime.control.bootstrap import hold, join
from autotune.runtime.errors import UsageError
from autotune.sessions.world import init_world

DDP = torch.nn.parallel.DistributedDataParallel
DEFAULT_TIMEOUT = 300.0
#: what DDP says at a forward when the last backward left a parameter without a gradient
_UNFINISHED = "Expected to have finished reduction in the prior iteration"


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


def group_for(rt: Any) -> Any:
    """The process group for an in-place DDP in the runtime ``rt``'s job: the world
    when every rank is a worker; with servers, the workers alone (the runtime's own
    gloo group, or, for a world of another backend such as NCCL, one of that backend
    over the same workers)."""
    info = rt.info
    if not info.servers:
        return dist.group.WORLD
    backend = str(dist.get_backend())
    if backend == "gloo":
        return rt.workers_group
    return dist.new_group(list(info.workers), backend=backend,
                          timeout=timedelta(seconds=rt.timeout),
                          use_local_synchronization=True)


class InPlaceDDP:
    """DDP applied to ``module`` in place (module docstring), over ``group`` (DDP's
    process group: the workers'), in the runtime ``rt``'s job (its bounded all-reduce
    over the workers checks the models first and agrees on unused parameters).
    ``broadcast_buffers``: DDP's."""

    def __init__(self, module: torch.nn.Module, rt: Any, group: Any, *,
                 broadcast_buffers: bool = True):
        self.module = module
        self.rt = rt
        self.group = group
        # a group made for this DDP (NCCL workers beside servers) is destroyed with it
        self._own_group = group is not dist.group.WORLD and group is not rt.workers_group
        self.broadcast_buffers = broadcast_buffers
        self.params = [p for p in module.parameters() if p.requires_grad]
        if not self.params:
            raise UsageError("the model has no parameter that requires a gradient: there "
                             "is nothing to average")
        self._registered = {id(p) for p in self.params}
        check_same_shapes([*module.parameters(), *module.buffers()],
                          "parameters and buffers", rt)
        self.ddp: DDP | None = self._build()
        self._first = True  # the first synchronising forward is still to come
        self._plain = False  # the forward under way runs without DDP (no autograd)
        self.rebuilt: Callable[[DDP], None] = lambda ddp: None  # DDP built anew: the hook follows
        self._hooks = [module.register_forward_pre_hook(self._pre_forward, with_kwargs=True),
                       module.register_forward_hook(self._post_forward)]

    def _build(self, *, find_unused: bool = False, sync: bool = True) -> DDP:
        kw: dict = {"broadcast_buffers": self.broadcast_buffers}
        signature = inspect.signature(DDP.__init__).parameters
        if "forward_sync_buffers" in signature and self.broadcast_buffers:
            # torch >= 2.13's name; False keeps the old meaning (no sync at the start
            # either), which only the old name says, with a FutureWarning
            kw = {"forward_sync_buffers": True}
        if not sync and "init_sync" in signature:
            kw["init_sync"] = False  # torch >= 2.4: the parameters are equal already
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "`broadcast_buffers` is deprecated",
                                    FutureWarning)
            return DDP(self.module, process_group=self.group,
                       find_unused_parameters=find_unused, **kw)

    # ------------------------------------------------------------------ the hooks
    def _pre_forward(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        # A forward without autograd (evaluation, on any subset of the ranks) is the
        # module's alone: DDP would sync the buffers there, a collective that hangs when
        # only rank 0 evaluates (under DDP one calls ``ddp.module``, which a module
        # trained in place does not have). The next training forward syncs them as DDP's.
        self._plain = not torch.is_grad_enabled()
        if self._plain:
            return None
        ddp = self.ddp
        try:
            out = ddp._pre_forward(*args, **kwargs)
        except RuntimeError as e:
            if _UNFINISHED not in str(e):
                raise
            raise unfinished_error(self.module) from None
        DDP._active_ddp_module = ddp  # as DDP's own forward (torch.compile reads it)
        return out

    def _post_forward(self, module: torch.nn.Module, args: tuple, output: Any) -> Any:
        if self._plain:
            return None
        DDP._active_ddp_module = None
        ddp = self.ddp
        if self._first and ddp.require_backward_grad_sync:
            self._first = False
            ddp = self._settle_unused(output)
        return ddp._post_forward(output)

    def _settle_unused(self, output: Any) -> DDP:
        """At the first synchronising forward (collective over the workers): if the
        autograd graph of ``output`` misses a parameter on any worker, DDP is built again
        with ``find_unused_parameters=True`` before this forward's backward is prepared;
        the DDP to prepare it with."""
        reached = reached_parameters(output)
        missing = torch.tensor([float(sum(id(p) not in reached for p in self.params))],
                               dtype=torch.float64)
        self.rt.worker_sum(missing)
        if not missing.item():
            return self.ddp
        self.ddp = ddp = self._build(find_unused=True, sync=False)
        self.rebuilt(ddp)
        # what DDP's forward does first, but this forward's buffers are in sync already
        ddp.require_forward_param_sync = False
        ddp._pre_forward()
        return ddp

    def plain(self) -> DDP:
        """DDP built anew over the module, as it is (its parameters already equal on every
        worker, unused ones found as before), with no comm hook: DDP's built-in all-reduce
        runs it (collective over the workers: DDP checks the parameters' shapes)."""
        self.ddp = self._build(find_unused=self.ddp.find_unused_parameters, sync=False)
        return self.ddp

    # ------------------------------------------------------------------ each step
    def check(self) -> None:
        """A parameter that needs a gradient but was not there at the start (added,
        replaced or unfrozen since) would silently train apart on each worker. Every
        step: a walk over the modules' own dicts (``parameters()`` builds every name)."""
        registered, todo = self._registered, [self.module]
        while todo:
            m = todo.pop()
            todo.extend(c for c in m._modules.values() if c is not None)
            if all(p is None or not p.requires_grad or id(p) in registered
                   for p in m._parameters.values()):
                continue
            self._fail_check()

    def _fail_check(self) -> None:
        for p in self.module.parameters():
            if p.requires_grad and id(p) not in self._registered:
                name = next((n for n, q in self.module.named_parameters() if q is p), "?")
                raise UsageError(
                    f"parameter {name!r} {tuple(p.shape)} was added, replaced or unfrozen "
                    "after the session started, so its gradient is not averaged and the "
                    "workers would train different models. Build the model completely "
                    "(and set requires_grad) before autotune.session(); to change it, "
                    "leave the session and start a new one")

    def remove(self, clean: bool = True) -> None:
        """The module plain again: the hooks removed, DDP let go (its reducer's gradient
        hooks go with it); on the ``clean`` path, a group made for it destroyed."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if DDP._active_ddp_module is self.ddp:
            DDP._active_ddp_module = None
        self.ddp = None
        if self._own_group and clean:
            from autotune.runtime.control.groups import destroy

            destroy(self.group)
            self._own_group = False


def reached_parameters(output: Any) -> set[int]:
    """The ``id`` of every leaf tensor (parameter) the autograd graph of the tensors in
    ``output`` (nested in lists, tuples and dicts, as DDP looks for them) reaches."""
    stack: list = []
    todo = [output]
    reached: set[int] = set()
    while todo:
        x = todo.pop()
        if isinstance(x, torch.Tensor):
            if x.grad_fn is not None:
                stack.append(x.grad_fn)
            elif x.requires_grad:
                reached.add(id(x))
        elif isinstance(x, (list, tuple)):
            todo.extend(x)
        elif isinstance(x, dict):
            todo.extend(x.values())
    seen: set = set()
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        variable = getattr(fn, "variable", None)  # an AccumulateGrad node: a leaf
        if variable is not None:
            reached.add(id(variable))
        stack.extend(f for f, _ in fn.next_functions if f is not None)
    return reached


def unfinished_error(module: torch.nn.Module) -> UsageError:
    """The error for a backward that left a parameter without a gradient, so that DDP,
    told none would be, could not finish averaging."""
    names = [n for n, p in module.named_parameters() if p.requires_grad and p.grad is None]
    which = f" (without a gradient now: {', '.join(names[:5])})" if names else ""
    return UsageError(
        "a parameter got no gradient in the last backward though every one had one in the "
        f"first{which}, so DDP could not finish averaging that iteration. For a model whose "
        "forward skips parameters only sometimes, build DDP yourself with "
        "find_unused_parameters=True and pass it: autotune.session(DistributedDataParallel("
        "model, find_unused_parameters=True), ...)")


def check_same_shapes(tensors: list, what: str, rt: Any) -> None:
    """Raise :class:`ConfigError` on every worker if the workers' ``tensors`` differ in
    number, shapes or dtypes (one small all-reduce over the workers, bounded), naming the
    first worker that differs from the leader, rather than DDP's own error."""
    info = rt.info
    shapes = tuple((tuple(t.shape), str(t.dtype)) for t in tensors)
    digest = int.from_bytes(hashlib.sha256(repr(shapes).encode()).digest()[:7], "big")
    workers = list(info.workers)
    rows = torch.zeros(len(workers), 2, dtype=torch.int64)
    rows[workers.index(info.rank)] = torch.tensor([len(tensors), digest])
    rt.worker_sum(rows)
    lead = rows[workers.index(info.leader)]
    bad = [w for w, r in zip(workers, rows) if not torch.equal(r, lead)]
    if bad:
        raise ConfigError(f"the workers' {what} differ: {rt.describe(bad[0])} has other "
                          f"shapes or dtypes than the leader (rank {info.leader}); "
                          "every worker must build the same model")
