"""autotune inside DDP: a comm hook that averages DDP's gradient buckets under a
:class:`~autotune.runtime.config.RuntimeConfig`.

DDP keeps everything it owns (its buckets and their order, ``no_sync``, buffers, unused
parameters, checkpoints); :class:`BucketTransport` is the state of the comm hook it
calls with each bucket (``register_comm_hook``). One line for users::

    ddp = torch.nn.parallel.DistributedDataParallel(model)
    transport = BucketTransport.install(ddp)          # collective: every rank
    for x, y in loader:
        transport.set_config(config)                  # between iterations, every rank alike
        loss_fn(ddp(x), y).backward()                 # buckets leave as DDP fills them
        opt.step(); opt.zero_grad()

**What a bucket goes through.** DDP hands over a flat buffer of one dtype on the model's
device. The runtime's plan cuts it as one tensor of ``numel`` elements
(:func:`~autotune.runtime.plan.cut` with the configuration's ``chunk_bytes``; chunk ``i``
on stream :func:`~autotune.runtime.plan.stream_of` ``(i, streams)``); every chunk is
divided by the group size, as DDP's own hook does (``default_hooks.allreduce_hook``:
divide first, then sum), and all-reduced asynchronously on its stream's process group
(one group per stream, over DDP's group's ranks, created once each by :meth:`set_config`,
never re-created). The hook returns one future of the whole buffer, completed when every
chunk's all-reduce has. A lossless configuration therefore gives DDP's gradients: bit for
bit with 2 ranks (the sum of two addends does not depend on the order), to float
rounding with more (gloo's reduction order depends on the chunking).

**Lossy codecs** (``compression != "none"``) run as in the native runtime
(:mod:`autotune.runtime.communication`, ``_allreduce_lossy``; the decoding step is one
function for both, :func:`~autotune.runtime.codecs.averaged_payloads`): a chunk of at least
``compress_min_bytes`` is encoded with error feedback (its residual added first, what the
codec dropped kept), summable codecs all-reduce the packed payload and decode once (then
``after_sum``), the others all-gather the payloads and ``decode_sum`` them; the decoded
sum is divided by the group size. Smaller chunks travel uncompressed (HiPress's selective
compression), their residual folded in first. Codecs run on the bucket's device. This
path runs **synchronously inside the hook** (it issues every chunk's operation, waits for
them, decodes, and returns an already-completed future): simpler, and a lossy chunk's
decode needs the sum anyway. The price: under a lossy configuration the backward of later
buckets waits while a bucket is averaged (a lossless one overlaps as DDP does).

**Error feedback, per bucket.** Each bucket (``bucket.index()``) has its own
:class:`~autotune.runtime.codecs.ErrorFeedback` over the bucket's elements, so a new chunk
layout (another ``chunk_bytes`` or ``streams``) reads the same residual, element by
element, and a switch between lossy codecs (top-k 1% -> top-k 10% -> fp16) keeps it: the
next encode adds it. A switch to ``compression="none"`` folds a bucket's whole residual
into its next lossless average (before the division) and then forgets it, so from the
second lossless iteration on every bucket takes DDP's exact path again. (The native
runtime does the same with its ``Residuals.dirty`` fold; it has no Summation Service
residual to hand back here.) DDP rebuilds its buckets once, after the first iteration
(not with ``find_unused_parameters=True``); a bucket whose size, dtype, device or
parameters changed starts its residual afresh (what compression dropped in that first
iteration is lost, once; ``residual_resets`` counts it). A codec is made per
configuration (PowerSGD's basis restarts at a switch, as in the native runtime).

**Push/pull and the intra-machine step** (``transport="pushpull"``, ``intra`` ``root`` or
``scatter``) are the native runtime's: given ``buckets`` (a
:class:`~autotune.runtime.ddp_buckets.RuntimeBuckets`, as ``autotune.session(ddp_model)``
makes), the hook hands each bucket to it under such a configuration, and ``limits`` are
the runtime's (its servers, its workers per machine). Without it the hook runs
all-reduce, intra ``flat``, no servers. Each side keeps its own error feedback: a residual
left by one side's codec goes out with that side's next iteration.

**Engines and staging.** Stream groups use the backend of DDP's group by default (NCCL
for CUDA buckets under NCCL, gloo otherwise); :meth:`BucketTransport.engine` is the one
place that choice is made, so a later ``engine`` knob can pick gloo for CUDA buckets.
Where a chunk must cross to the host (a host backend such as gloo with a CUDA bucket) it
goes through :class:`~autotune.runtime.staging.HostStaging`: pinned host buffers filled
on a side CUDA stream after the producer's work, and copied back non-blocking; with CPU
buckets the same calls copy nothing, so CPU tests run the same code.

**Bounds and errors.** Every stream group is made with ``timeout``, so every collective
ends (with an error) within it; a staged copy is waited for at most ``timeout``. Every
error names this rank, the bucket index and the chunk (its stream and elements).

**The pieces.** :class:`BucketTransport` is the hook's state (configuration, stream
groups, chunk plans, staging) and runs the lossless path; :class:`LossyBuckets` runs the
lossy path and keeps the residuals per bucket; :class:`ChunkOps` is the bounded,
error-naming steps (start a collective, wait for it, wait for a staged copy) both take.
"""

# No ``from __future__ import annotations`` here: DDP inspects the hook's annotations
# (``_check_comm_hook``) and compares them with the real classes.

import time
import warnings
from dataclasses import replace
from datetime import timedelta
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import torch
import torch.distributed as dist

from autotune import signals
from autotune.errors import ArgumentError

from .codecs import (Codec, Context, ErrorFeedback, averaged_payloads, codec_from_config,
                     compress_min_bytes, compresses, whole)
from .compat import all_gather
from .compression import SEED
from .config import MAX_STREAMS, ConfigError, Intra, Limits, RuntimeConfig, Transport
from .ddp_buckets import RuntimeBuckets
from .errors import RuntimeFault, UsageError
from .gradstats import GradientSample
from .plan import DTYPE_BYTES, Span, cut, stream_of
from .staging import HostStaging, Staged

__all__ = ["BucketTransport"]

CHUNK_IDS = 1 << 24
"""Codec chunk ids per bucket: chunk ``i`` of bucket ``b`` is ``b * CHUNK_IDS + i`` (unique
across buckets, the same on every rank; random-k and PowerSGD key their state by it)."""

DEFAULT_TIMEOUT = 300.0
_ALREADY = "can only be called once"  # DDP's message for a second comm hook


class BucketTransport:
    """The state of autotune's DDP comm hook; see the module docstring.

    ``process_group``: DDP's group (default: the world). ``device_type``: where DDP's
    buckets live (``"cpu"``/``"cuda"``). ``max_streams``: the most streams a configuration
    may use. ``timeout``: seconds any wait may take. ``copy_cpu``: stage CPU buckets
    through separate host buffers too (tests: the copies CUDA buckets make under gloo).
    ``buckets``: the native runtime that runs push/pull and intra ``root``/``scatter``
    (module docstring). Make it with :meth:`install`."""

    def __init__(self, process_group: Any = None, *, device_type: str = "cpu",
                 max_streams: int = Limits.max_streams, timeout: float = DEFAULT_TIMEOUT,
                 copy_cpu: bool = False, buckets: Optional[RuntimeBuckets] = None):
        if not dist.is_available() or not dist.is_initialized():
            raise UsageError("BucketTransport needs torch.distributed initialised "
                             "(dist.init_process_group) before DDP and the hook")
        if isinstance(max_streams, bool) or not isinstance(max_streams, int) \
                or not 1 <= max_streams <= MAX_STREAMS:
            raise ArgumentError(f"max_streams={max_streams!r} is not an integer in "
                                f"1..{MAX_STREAMS}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ArgumentError(f"timeout={timeout!r} is not a positive number of seconds")
        self.group = process_group if process_group is not None else dist.group.WORLD
        self.ranks: Tuple[int, ...] = tuple(dist.get_process_group_ranks(self.group))
        self.world = len(self.ranks)
        self.rank = dist.get_rank()
        self.device_type = str(device_type)
        self.timeout = float(timeout)
        self.copy_cpu = bool(copy_cpu)
        self._backend = str(dist.get_backend(self.group))
        self._max_streams = max_streams
        self.buckets = buckets
        self._groups: Dict[Tuple[str, int], Any] = {}
        self._config: Optional[RuntimeConfig] = None
        self._codec: Optional[Codec] = None
        self._min_bytes = 0
        self._plans: Dict[tuple, List[Tuple[Span, int]]] = {}
        self._rounds: Dict[int, int] = {}
        self._sizes: Dict[int, int] = {}
        self._staging: Dict[str, HostStaging] = {}
        self._ops = ChunkOps(self.rank, self.timeout)
        self.averaged = 0  # buckets handed to the hook so far (none under DDP's no_sync)
        # when the last bucket reached the hook: backward's compute ended about then, so
        # what backward takes after it is communication left exposed
        self.last_bucket_at = 0.0
        # set by a session that measures statistical efficiency: each bucket is sampled
        # before and after averaging (autotune.runtime.gradstats)
        self.sample: Optional[GradientSample] = None
        self._lossy = LossyBuckets(self.world, self._ops)
        if buckets is not None and buckets.rt.info.n_machines > 1 \
                and buckets.rt.info.workers_per_machine > 1:
            # the runtime's intra-machine groups hold some workers only, and a group made
            # by its members alone is named after how many groups each has: made later,
            # ours would be named differently on different machines. Every one now.
            self._make_groups(self._max_streams)

    # ------------------------------------------------------------------ making
    @classmethod
    def install(cls, ddp_model: Any, *, max_streams: int = Limits.max_streams,
                timeout: float = DEFAULT_TIMEOUT, **options: Any) -> "BucketTransport":
        """Register a new transport as ``ddp_model``'s comm hook and apply the default
        configuration (collective: every rank of DDP's group calls it, as it built DDP).
        A model that is not DDP is a ``TypeError``; a DDP model that already has a comm
        hook is a :class:`UsageError`. ``options``: see the class."""
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(ddp_model, DistributedDataParallel):
            kind = type(ddp_model)
            raise TypeError(f"BucketTransport.install needs a "
                            f"torch.nn.parallel.DistributedDataParallel model, got "
                            f"{kind.__module__}.{kind.__qualname__}")
        state = cls(ddp_model.process_group, device_type=getattr(ddp_model, "device_type", "cpu"),
                    max_streams=max_streams, timeout=timeout, **options)
        try:
            ddp_model.register_comm_hook(state, cls.hook)
        except RuntimeError as e:
            if _ALREADY not in str(e):
                raise
            hooks = getattr(ddp_model, "_comm_hooks", None)  # DDP noted ours before failing
            if hooks and hooks[-1][1] is state:
                hooks.pop()
            raise UsageError(f"rank {state.rank}: a comm hook is already registered on this "
                             "DDP model; autotune's hook tunes DDP's communication and "
                             f"replaces it: remove yours (DDP said: {e})") from None
        state.set_config(RuntimeConfig())
        return state

    # ------------------------------------------------------------------ configuration
    @property
    def limits(self) -> Limits:
        """What this mode runs: without a runtime, all-reduce, intra flat, no servers;
        with one, what its world allows (after a server loss, what is left); at most
        ``max_streams`` streams."""
        if self.buckets is None:
            return Limits(servers=0, workers_per_machine=1, max_streams=self._max_streams,
                          transports=(Transport.ALLREDUCE.value,))
        rt = self.buckets.rt
        limits = rt.limits.after_server_loss() if rt.lost_servers else rt.limits
        return replace(limits, max_streams=min(limits.max_streams, self._max_streams))

    @property
    def runtime_runs(self) -> bool:
        """Whether the configuration in force is the native runtime's (push/pull, or
        intra ``root``/``scatter``): :meth:`average` hands buckets to ``buckets``."""
        return self._config is not None and _runtime_runs(self._config)

    @property
    def config(self) -> Optional[RuntimeConfig]:
        """The configuration the next buckets use."""
        return self._config

    @property
    def groups_made(self) -> int:
        """Stream process groups created so far (each once)."""
        return len(self._groups)

    def engine(self, device_type: str) -> str:
        """The backend of the stream groups that carry buckets on ``device_type``: DDP's
        group's. The one place this is chosen (a later ``engine`` knob: gloo for CUDA
        buckets, whose chunks then cross through host staging)."""
        return self._backend

    def set_config(self, config: Union[RuntimeConfig, Mapping[str, Any]]) -> RuntimeConfig:
        """Make ``config`` the one the next buckets use. Between iterations, on every rank
        in the same order with the same configuration (collective: it creates the stream
        groups ``config`` needs that do not exist yet). :class:`ConfigError` (naming the
        parameter) when this mode cannot run it; the previous configuration stays."""
        limits = self.limits
        try:
            cfg = RuntimeConfig.of(config).check(limits)
        except ConfigError as e:
            raise ConfigError(f"autotune inside DDP ({limits.servers} server(s), "
                              f"{limits.workers_per_machine} worker(s) per machine, at most "
                              f"{limits.max_streams} streams): {e}") from None
        codec = self._codec
        if cfg != self._config:
            codec = None
            if cfg.lossy and not _runtime_runs(cfg):  # (the runtime makes its own)
                try:
                    codec = codec_from_config(cfg, world_size=self.world, seed=SEED)
                except ValueError as e:
                    raise ConfigError(f"compression={cfg.compression!r}: {e}") from None
        self._make_groups(cfg.streams)
        self._config, self._codec = cfg, codec
        self._min_bytes = compress_min_bytes(cfg)
        return cfg

    def sync(self, config: Union[RuntimeConfig, Mapping[str, Any], None] = None) -> RuntimeConfig:
        """Put the leader's ``config`` in force on every rank of the runtime's world
        (servers too, in their serving loop), between iterations: the buckets DDP made
        since the last call registered with the runtime if they changed, then
        ``Runtime.sync`` (the leader passes ``config``, the others ``None``; one int64
        message, nothing pickled), then :meth:`set_config` with what it put in force. The
        one way a configuration reaches both the runtime and the hook; under push/pull,
        once before every iteration (the servers serve one round per ``sync``). Needs
        ``buckets``. Raises :class:`ConfigError` alike on every rank."""
        if self.buckets is None:
            raise UsageError(f"rank {self.rank}: sync() needs the runtime (buckets=); "
                             "without one, set_config() on every rank")
        self.buckets.register()
        with warnings.catch_warnings():
            # a push/pull round that no bucket joined (DDP rebuilt its buckets, the hook
            # averaged them itself) is closed by the sync, which says so: expected here
            warnings.filterwarnings("ignore", "rt.sync", RuntimeWarning)
            active = self.buckets.rt.sync(config)
        return self.set_config(RuntimeConfig.of(active))

    def _make_groups(self, streams: int) -> None:
        """The stream groups of streams ``0..streams-1`` not made yet (collective)."""
        backend = self.engine(self.device_type)
        for s in range(streams):
            if (backend, s) not in self._groups:
                self._groups[(backend, s)] = self._new_group(backend, s)

    def _new_group(self, backend: str, stream: int) -> Any:
        """A new ``backend`` process group over DDP's ranks for ``stream`` (bounded by
        ``timeout``); its failure named."""
        subgroup = self.world != dist.get_world_size()
        try:
            return dist.new_group(list(self.ranks), timeout=timedelta(seconds=self.timeout),
                                  backend=backend, use_local_synchronization=subgroup)
        except Exception as e:
            raise RuntimeFault(f"rank {self.rank}: creating the {backend} process group of "
                               f"stream {stream} over ranks {list(self.ranks)} failed: "
                               f"{type(e).__name__}: {e}") from e

    # ------------------------------------------------------------------ for tests
    @property
    def residual_resets(self) -> int:
        """Residuals started afresh because DDP rebuilt a bucket."""
        return self._lossy.resets

    def residual_norm(self, bucket_index: int) -> float:
        """L2 norm of what error feedback holds back for bucket ``bucket_index`` here."""
        return self._lossy.norm(bucket_index)

    def describe(self) -> Dict[str, Any]:
        """This rank's state: configuration, groups, buckets seen, rounds, residuals."""
        cfg = self._config
        return {"rank": self.rank, "world": self.world, "backend": self._backend,
                "config": None if cfg is None else cfg.as_dict(),
                "groups_made": self.groups_made, "buckets": dict(self._sizes),
                "rounds": dict(self._rounds), "residual_resets": self.residual_resets,
                "residual_norms": self._lossy.norms()}

    # ------------------------------------------------------------------ the hook
    @staticmethod
    def hook(state, bucket):
        """DDP's comm hook: ``hook(state: BucketTransport, bucket: dist.GradBucket) ->
        torch.futures.Future[torch.Tensor]`` of the bucket's average (no annotations:
        DDP compares them with its own classes). A stop signal arriving inside is raised
        at the next safe point, not here (:mod:`autotune.signals`)."""
        with signals.deferred(raise_at_end=False):
            return state.average(bucket)

    def average(self, bucket: Any) -> torch.futures.Future:
        """Start averaging ``bucket`` under the current configuration; its future (with
        :attr:`sample` set, the bucket is sampled before and after)."""
        sample = self.sample
        if sample is None:
            return self._average(bucket)
        idx = bucket.index()
        sample.local(idx, bucket.buffer())

        def seen(fut: torch.futures.Future) -> torch.Tensor:
            out = fut.value()
            sample.averaged(idx, out)
            return out

        return self._average(bucket).then(seen)

    def _average(self, bucket: Any) -> torch.futures.Future:
        cfg, codec, min_bytes = self._config, self._codec, self._min_bytes
        idx = bucket.index()
        if cfg is None:
            raise UsageError(f"rank {self.rank}: bucket {idx} arrived before any "
                             "configuration: use BucketTransport.install (or set_config)")
        buf = bucket.buffer()
        self.averaged += 1
        self.last_bucket_at = time.perf_counter()
        rnd = self._rounds.get(idx, 0)
        self._rounds[idx] = rnd + 1
        self._sizes[idx] = buf.numel()
        if self.buckets is not None:
            self.buckets.note(idx, buf)
            if self.runtime_runs:
                return self.buckets.average(bucket, self._plain)
        if codec is None:
            self._lossy.fold_leftover(bucket, buf)
            return self._plain(buf, idx)
        backend = self.engine(buf.device.type)
        return self._lossy.average(bucket, buf, rnd, self._chunks(buf, cfg),
                                   self._stream_groups(backend), self._stager(buf.device),
                                   _host_backend(backend), codec, min_bytes)

    # ------------------------------------------------------------------ lossless
    def _plain(self, buf: torch.Tensor, idx: int) -> torch.futures.Future:
        """``buf`` (bucket ``idx``) averaged by the lossless all-reduce among DDP's ranks
        under the configuration's streams and chunks: the lossless path, and the fallback
        for a bucket the runtime does not know or failed to average
        (:mod:`autotune.runtime.ddp_buckets`)."""
        cfg = self._config
        assert cfg is not None
        backend = self.engine(buf.device.type)
        buf.div_(self.world)
        return self._ops.allreduce(buf, idx, self._chunks(buf, cfg), self._stream_groups(backend),
                                   self._stager(buf.device), _host_backend(backend))

    # ------------------------------------------------------------------ pieces
    def _chunks(self, buf: torch.Tensor, cfg: RuntimeConfig) -> List[Tuple[Span, int]]:
        """The plan of a bucket: (span, stream) per chunk, cached per shape and config."""
        dtype = str(buf.dtype).rpartition(".")[2]
        key = (buf.numel(), dtype, cfg.chunk_bytes, cfg.streams)
        plan = self._plans.get(key)
        if plan is None:
            if dtype not in DTYPE_BYTES:
                raise UsageError(f"rank {self.rank}: a bucket of dtype {buf.dtype} cannot be "
                                 f"cut (supported: {', '.join(DTYPE_BYTES)})")
            spans = cut([(buf.numel(), dtype)], cfg.chunk_bytes)
            plan = self._plans[key] = [(sp, stream_of(i, cfg.streams))
                                       for i, sp in enumerate(spans)]
        return plan

    def _stream_groups(self, backend: str) -> List[Any]:
        """The configuration's stream groups of ``backend``, by stream."""
        assert self._config is not None
        return [self._groups[(backend, s)] for s in range(self._config.streams)]

    def _stager(self, device: torch.device) -> HostStaging:
        """The staging of ``device`` (made on first use, one per device)."""
        key = str(device)
        st = self._staging.get(key)
        if st is None:
            st = self._staging[key] = HostStaging(device, copy_cpu=self.copy_cpu)
        return st


class ChunkOps:
    """The bounded steps of averaging a bucket's chunks, each error naming its cause:
    start a collective, wait for one (at most ``timeout``), wait for a staged copy (at
    most ``timeout``), and the lossless all-reduce of a bucket's chunks built of them.
    Every error names this rank (``rank``), the bucket and the chunk (``piece`` = (index,
    span, stream), where known). Shared by the lossless path of
    :class:`BucketTransport` and by :class:`LossyBuckets`."""

    def __init__(self, rank: int, timeout: float):
        self.rank = rank
        self.timeout = timeout

    def fault(self, idx: int, piece: Optional[Tuple[int, Span, int]], op: str,
              cause: BaseException) -> RuntimeFault:
        """An error naming this rank, the bucket and the chunk ``piece`` = (index, span,
        stream), if known."""
        where = f"rank {self.rank}: bucket {idx}"
        if piece is not None:
            i, sp, s = piece
            where += (f" chunk {i} (stream {s}, elements {sp.offset}..{sp.offset + sp.numel} "
                      f"of {sp.dtype})")
        return RuntimeFault(f"{where}: {op} failed (bound {self.timeout:.0f}s): "
                            f"{type(cause).__name__}: {cause}")

    def issue(self, idx: int, piece: Tuple[int, Span, int], op: str,
              fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` (starting the collective ``op``); its failure named."""
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise self.fault(idx, piece, f"starting the {op}", e) from e

    def wait(self, work: Any, idx: int, piece: Tuple[int, Span, int]) -> None:
        """Wait for the collective ``work``, at most ``timeout``."""
        try:
            ok = work.wait(timedelta(seconds=self.timeout))
        except Exception as e:
            raise self.fault(idx, piece, "the collective", e) from e
        if ok is False:
            raise self.fault(idx, piece, "the collective",
                             TimeoutError(f"no completion within {self.timeout:.0f}s"))

    def staged(self, staged: Staged, idx: int, piece: Tuple[int, Span, int]) -> torch.Tensor:
        """The host tensor of ``staged`` once its copy is done, at most ``timeout``."""
        try:
            return staged.wait(self.timeout)
        except RuntimeFault as e:
            raise self.fault(idx, piece, "staging to the host", e) from e

    def allreduce(self, buf: torch.Tensor, idx: int, chunks: List[Tuple[Span, int]],
                  groups: List[Any], stager: HostStaging, host: bool) -> torch.futures.Future:
        """The lossless path of bucket ``idx``: every chunk of ``buf`` (already divided)
        all-reduced asynchronously on its stream's group (``groups[stream]``), through
        ``stager`` when ``host``; a future completed (on the side stream) once every
        chunk's all-reduce has, or failed naming the chunk."""
        views = [buf.narrow(0, sp.offset, sp.numel) for sp, _ in chunks]
        staged = [stager.to_host(v) for v in views] if host else []
        futs = []
        for i, (sp, s) in enumerate(chunks):
            piece = (i, sp, s)
            t = self.staged(staged[i], idx, piece) if host else views[i]
            work = self.issue(idx, piece, "all-reduce", dist.all_reduce, t, group=groups[s],
                              async_op=True)
            futs.append(work.get_future())
        result = stager.future()

        def done(all_done: torch.futures.Future) -> None:
            try:
                with stager.side():
                    try:
                        all_done.wait()
                    except Exception as e:
                        i = next((j for j, f in enumerate(futs) if f.done() and _failed(f)), None)
                        piece = None if i is None else (i, *chunks[i])
                        raise self.fault(idx, piece, "all-reduce", e) from e
                    for f in futs:  # CUDA: the side stream waits for each chunk's work
                        f.wait()
                    for st, v in zip(staged, views):
                        stager.to_device(st.tensor, v)
                    result.set_result(buf)
            except BaseException as e:  # the future must complete, or DDP waits forever
                if not isinstance(e, RuntimeFault):
                    e = self.fault(idx, None, "completing the bucket", e)
                result.set_exception(e)

        torch.futures.collect_all(futs).add_done_callback(done)
        return result


class LossyBuckets:
    """The lossy path of :class:`BucketTransport` and the error feedback it keeps: one
    :class:`~autotune.runtime.codecs.ErrorFeedback` per bucket (``bucket.index()``) over
    the bucket's elements, which survives switches between lossy configurations and chunk
    layouts and starts afresh when DDP rebuilt the bucket (``resets`` counts those); see
    the module docstring. ``world``: the group size; ``ops``: the bounded steps."""

    def __init__(self, world: int, ops: ChunkOps):
        self.world = world
        self.ops = ops
        self._residuals: Dict[int, Tuple[tuple, ErrorFeedback]] = {}
        self.resets = 0  # residuals started afresh because a bucket was rebuilt

    def norm(self, idx: int) -> float:
        """L2 norm of what error feedback holds back for bucket ``idx``."""
        held = self._residuals.get(idx)
        return 0.0 if held is None else held[1].norm()

    def norms(self) -> Dict[int, float]:
        """:meth:`norm` of every bucket that holds a residual, by bucket index."""
        return {b: self.norm(b) for b in sorted(self._residuals)}

    def fold_leftover(self, bucket: Any, buf: torch.Tensor) -> None:
        """Lossless path: a residual left from a lossy configuration goes out now, once
        (added into ``buf`` before the division), and is forgotten."""
        ef = self._residual(bucket, buf, create=False)
        if ef is not None:
            ef.fold(buf, whole(0, buf.numel()))
            del self._residuals[bucket.index()]

    def average(self, bucket: Any, buf: torch.Tensor, rnd: int,
                chunks: List[Tuple[Span, int]], groups: List[Any], stager: HostStaging,
                host: bool, codec: Codec, min_bytes: int) -> torch.futures.Future:
        """Average ``bucket`` (its flat ``buf``, round ``rnd`` of it) under ``codec``,
        synchronously: every chunk's operation on its stream's group (``groups[s]``),
        through ``stager`` when ``host``; chunks smaller than ``min_bytes`` uncompressed.
        An already-completed future of ``buf``."""
        idx = bucket.index()
        ef = self._residual(bucket, buf, create=True)
        pending = []
        for i, (sp, s) in enumerate(chunks):
            piece = (i, sp, s)
            view = buf.narrow(0, sp.offset, sp.numel)
            seg = whole(sp.offset, sp.numel)
            group = groups[s]
            if not compresses(sp.nbytes, min_bytes):  # travels as it is, residual included
                ef.fold(view, seg)
                view.div_(self.world)
                t = self.ops.staged(stager.to_host(view), idx, piece) if host else view
                work = self.ops.issue(idx, piece, "all-reduce", dist.all_reduce, t,
                                      group=group, async_op=True)
                pending.append((piece, None, work, t, None, view))
                continue
            ctx = Context(rnd, idx * CHUNK_IDS + i)
            packed = codec.pack(ef.encode(codec, view, seg, ctx))
            t = self.ops.staged(stager.to_host(packed), idx, piece) if host else packed
            if codec.summable:
                work = self.ops.issue(idx, piece, "compressed all-reduce", dist.all_reduce,
                                      t, group=group, async_op=True)
                out = None
            else:
                out = (stager.empty(self.world * t.numel(), t.dtype) if host else
                       torch.empty(self.world * t.numel(), dtype=t.dtype, device=t.device))
                work = self.ops.issue(idx, piece, "all-gather of payloads", all_gather, out,
                                      t, group=group, async_op=True)
            pending.append((piece, ctx, work, t, out, packed))
        for piece, ctx, work, t, out, dev in pending:
            _, sp, _ = piece
            self.ops.wait(work, idx, piece)
            view = buf.narrow(0, sp.offset, sp.numel)
            if ctx is None:
                if host:
                    stager.to_device(t, view).order()
                continue
            if codec.summable:
                wire = stager.to_device(t, dev).order() if host else t
            else:
                wire = out
                if host and stager.copies:
                    wire = stager.to_device(out, torch.empty(out.shape, dtype=out.dtype,
                                                             device=buf.device)).order()
            view.copy_(averaged_payloads(codec, wire, self.world, sp.numel, ctx))
            view.div_(self.world)
        result = stager.future()
        result.set_result(buf)
        return result

    def _residual(self, bucket: Any, buf: torch.Tensor, create: bool) -> Optional[ErrorFeedback]:
        """Bucket ``bucket``'s error feedback (made when ``create``); started afresh when
        the bucket is not the one the residual was kept for (DDP rebuilt its buckets)."""
        idx = bucket.index()
        held = self._residuals.get(idx)
        if held is None and not create:
            return None
        sig = (buf.numel(), buf.dtype, str(buf.device),
               tuple(p.data_ptr() for p in bucket.parameters()))
        if held is not None and held[0] != sig:
            del self._residuals[idx]
            self.resets += 1
            held = None
        if held is None:
            if not create:
                return None
            held = self._residuals[idx] = (sig, ErrorFeedback(buf.numel()))
        return held[1]


def _runtime_runs(cfg: RuntimeConfig) -> bool:
    """Whether ``cfg`` is the native runtime's (push/pull, or intra ``root``/``scatter``),
    not the hook's own all-reduce among the workers."""
    return cfg.transport != Transport.ALLREDUCE or cfg.intra != Intra.FLAT


def _host_backend(backend: str) -> bool:
    """Whether a backend moves host memory (gloo, mpi): device chunks cross through
    staging. NCCL (alone or as the CUDA part of ``"cpu:gloo,cuda:nccl"``) takes device
    tensors as they are."""
    return "nccl" not in backend


def _failed(fut: torch.futures.Future) -> bool:
    try:
        fut.value()
        return False
    except Exception:
        return True
