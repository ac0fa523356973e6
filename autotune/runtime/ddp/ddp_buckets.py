"""DDP's buckets over the native runtime's round: what autotune's comm hook hands over.

Under ``autotune.session(ddp_model)`` (and :class:`~autotune.runtime.ddp.ddp_hook.CommHookState`
alone) every configuration, the default all-reduce among the workers included, is run by
the native :class:`~autotune.runtime.core.Runtime`, so both ways in run one runtime: its
plan (chunks, streams, BytePS's split between servers and colocated Summation Services),
its Communication and Summation Services, its codecs and error feedback
(:mod:`autotune.runtime.data.compression`), its bounded waits (:mod:`autotune.runtime.data.engine`),
and the server loss it survives.

**Gradients as they are ready, not buckets when full.** The runtime's registration is the
DDP model's own parameters, hooked as a native model's are: each gradient goes to the
round as soon as autograd has accumulated it, so its chunks leave (to the servers, under
push/pull) while backward goes on, long before DDP would hand over the bucket that holds
it (DDP hands a bucket over only when every gradient in it is in: with DDP's 25 MiB
buckets and a model of about that size, at the end of backward). The hooks send only in a
backward that DDP prepared for synchronisation (:meth:`RuntimeBuckets.forward`, called
before DDP's forward, reads ``require_backward_grad_sync``: inside DDP's ``no_sync`` the
gradients only accumulate, as DDP's do). DDP keeps its buckets, its forward-side work
and its future: the hook returns a future per bucket; at DDP's last bucket
(``bucket.is_last()``) it waits for the round
(:meth:`Runtime.wait <autotune.runtime.core.Runtime.wait>`), which writes the averages into
``.grad``, copies them into every bucket (DDP then copies the buckets into ``.grad``, or,
with ``gradient_as_bucket_view``, they are the same memory) and completes the futures.
So backward returns with DDP's gradients averaged, as under DDP's own hook.

**DDP's own all-reduce** (:meth:`RuntimeBuckets.fallback`: torch's default hook,
``allreduce_hook``, on DDP's process group, bounded by its timeout) averages a bucket when the
runtime does not run the iteration: before the first ``sync`` (no layout in force), under
the default configuration, for CUDA buckets on an NCCL group under any lossless
all-reduce among the workers (:mod:`autotune.runtime.ddp.ddp_hook`), and after a recoverable
fault.

**Faults.** A recoverable fault of the round (a server lost: the runtime drops it) leaves
the buckets' and ``.grad``'s local values intact (the runtime writes only after every
chunk is in); every worker gets it alike, and each bucket is averaged again by the
fallback. :meth:`take_failure` hands the fault to the session, which shrinks the space
and puts the fallback configuration in force at its ``step()``. Any other fault fails
every pending future, so DDP's backward raises it.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from autotune.runtime.config import Intra, RuntimeConfig, Transport
from autotune.runtime.errors import RuntimeFault

__all__ = ["RuntimeBuckets"]


class RuntimeBuckets:
    """DDP's buckets over the native runtime ``rt`` (module docstring); ``group``: DDP's
    process group, which the fallback all-reduces on (default: the world)."""

    def __init__(self, rt: Any, group: Any = None):
        self.rt = rt  # None: no runtime (a closed session's), DDP's all-reduce runs
        self.group = group if group is not None else dist.group.WORLD
        # CUDA gradients on an NCCL group: a lossless flat all-reduce is DDP's own
        self.device_engine = "nccl" in str(dist.get_backend(self.group))
        self.cuda = False          # the registered parameters are on a GPU
        self.syncs = True          # DDP prepared the coming backward for synchronisation
        self.forwards = [0, 0]     # training forwards so far: [inside no_sync, synchronising]
        self._ddp_allreduce = False  # put_in_force: DDP's all-reduce runs the buckets
        self.sizes: dict[int, int] = {}   # bucket index -> elements, as last seen
        self.rounds: dict[int, int] = {}  # bucket index -> hook calls
        self.handed = 0            # buckets the runtime averaged
        self.averaged_again = 0    # buckets DDP's all-reduce averaged instead
        # (future, the bucket, its buffer, its parameters, their views in the buffer)
        self._pending: list[tuple[torch.futures.Future, Any, torch.Tensor, list, list]] = []
        self._failure: RuntimeFault | None = None
        # the fault that ended the averaging (DDP's backward raises torch's error around it)
        self.fatal: RuntimeFault | None = None

    # ------------------------------------------------------------------ set-up
    def register(self, params: Sequence[torch.Tensor]) -> None:
        """Register DDP's parameters with the runtime (in force at the next ``sync``),
        their hooks sending only when :meth:`sends`."""
        self.cuda = any(p.is_cuda for p in params)
        self.rt.register(params, gate=self.sends)

    def forward(self, ddp_model: Any) -> None:
        """Before DDP's forward (a forward pre-hook): whether the backward that follows
        synchronises (DDP decides it there, from ``require_backward_grad_sync``)."""
        if torch.is_grad_enabled():
            self.syncs = bool(ddp_model.require_backward_grad_sync)
            self.forwards[self.syncs] += 1

    def put_in_force(self, config: Any) -> None:
        """``config`` (a ``RuntimeConfig`` the runtime's ``sync`` put in force) is the one
        the next buckets use."""
        self._ddp_allreduce = (
            not config.lossy and config.transport == Transport.ALLREDUCE
            and config.intra == Intra.FLAT
            # the default is DDP's own: where nothing is won it costs nothing; on a GPU
            # under NCCL every lossless flat all-reduce is
            and (config == RuntimeConfig() or (self.device_engine and self.cuda))
            # what error feedback still holds goes out with the runtime's next round
            and not any(self.rt.residual_norms.values())
            # a fault injected for it (tests) happens in the runtime's rounds
            and not self.rt.injects_faults(config))

    @property
    def ddp_allreduce(self) -> bool:
        """Whether DDP's own all-reduce runs the buckets under the configuration in force."""
        return self._ddp_allreduce

    def sends(self) -> bool:
        """Whether the runtime's gradient hooks send: a synchronising backward whose
        buckets the runtime averages (not DDP's own all-reduce: the default
        configuration, or a lossless flat all-reduce of CUDA buckets on NCCL)."""
        return self.syncs and not self._ddp_allreduce

    # ------------------------------------------------------------------ buckets
    def average(self, bucket: Any) -> torch.futures.Future:
        """The hook's work for ``bucket``: its future, completed at DDP's last bucket once
        the runtime's round is (or :meth:`fallback`'s, when the runtime does not run this
        iteration)."""
        idx, buf = bucket.index(), bucket.buffer()
        self.sizes[idx] = buf.numel()
        self.rounds[idx] = self.rounds.get(idx, 0) + 1
        if self.rt is not None and self.rt.layout_in_force and self.sends():
            self.handed += 1
            fut: torch.futures.Future = torch.futures.Future()
            self._pending.append((fut, bucket, buf, bucket.parameters(), bucket.gradients()))
        else:
            self.averaged_again += 1
            fut = self.fallback(bucket)
        if bucket.is_last() and self._pending:
            self._finish()
        return fut

    def fallback(self, bucket: Any) -> torch.futures.Future:
        """``bucket`` averaged by DDP's default hook, torch's ``allreduce_hook``: divided
        by the group size, then all-reduced on DDP's group (bounded by its timeout); its
        failure names this rank and the bucket."""
        idx = bucket.index()
        try:
            averaged = allreduce_hook(self.group, bucket)
        except Exception as e:
            raise RuntimeFault(f"rank {dist.get_rank()}: bucket {idx}: starting DDP's "
                               f"all-reduce failed: {type(e).__name__}: {e}") from e

        def done(fut: torch.futures.Future) -> torch.Tensor:
            try:
                return fut.wait()
            except Exception as e:
                raise self._fatal(f"bucket {idx}: DDP's all-reduce", e) from e

        return averaged.then(done)

    def _finish(self) -> None:
        """Wait for the round (it writes the averages into ``.grad``), copy them into the
        buckets and complete the pending futures; after a recoverable fault, average each
        bucket again with :meth:`fallback` (module docstring)."""
        pending, self._pending = self._pending, []
        try:
            self.rt.wait()
        except RuntimeFault as e:
            if not e.recoverable:
                if self.fatal is None:
                    self.fatal = e
                for fut, *_ in pending:
                    fut.set_exception(e)
                return
            self._failure = e
            self.handed -= len(pending)
            self.averaged_again += len(pending)
            for fut, bucket, *_ in pending:
                try:
                    fut.set_result(self.fallback(bucket).wait())
                except BaseException as again:
                    fut.set_exception(_as_exception(again))
            return
        except BaseException as e:  # the futures must complete, or DDP waits forever
            for fut, *_ in pending:
                fut.set_exception(_as_exception(e))
            raise
        for fut, _, buf, params, views in pending:
            for p, view in zip(params, views):
                g = p.grad
                if g is not None and g.data_ptr() != view.data_ptr():
                    # DDP lays a gradient out in its bucket as the parameter is laid out
                    # (channels_last included); the view it hands out has default strides
                    view.as_strided(p.shape, p.stride()).copy_(g)
            fut.set_result(buf)

    def _fatal(self, what: str, cause: BaseException) -> RuntimeFault:
        """The fault for ``what`` failing with ``cause``: the runtime names the peer to
        blame (:meth:`Runtime.blame <autotune.runtime.core.Runtime.blame>`); kept as
        :attr:`fatal` for the session, which sees only torch's error around it."""
        rank = dist.get_rank()
        if self.rt is None:
            fault = RuntimeFault(f"rank {rank}: {what} failed: {type(cause).__name__}: {cause}")
        else:
            fault = self.rt.blame(f"{what} on rank {rank}",
                                  dist.get_process_group_ranks(self.group), cause)
        if self.fatal is None:
            self.fatal = fault
        return fault

    def take_failure(self) -> RuntimeFault | None:
        """The recoverable fault the last round was averaged again after, once."""
        failure, self._failure = self._failure, None
        return failure


def _as_exception(e: BaseException) -> Exception:
    """``e`` as a future takes it: an ``Exception`` (a stop signal, ``Terminated`` or
    ``KeyboardInterrupt``, is a ``BaseException``: wrapped, naming it; the signal itself
    goes on being raised where it arrived)."""
    return e if isinstance(e, Exception) else RuntimeError(f"stopped: {e!r}")
