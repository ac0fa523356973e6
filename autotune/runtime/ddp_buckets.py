"""DDP's buckets as the native runtime's gradients: what autotune's comm hook hands over.

Under ``autotune.session(ddp_model)`` (and :class:`~autotune.runtime.ddp_hook.BucketTransport`
alone) every configuration, the default all-reduce among the workers included, is run by
the native :class:`~autotune.runtime.core.Runtime`, and :class:`RuntimeBuckets` hands DDP's
buckets to it, so both ways in run one runtime: its plan (chunks, streams, BytePS's split
between servers and colocated Summation Services), its Communication and Summation
Services, its codecs and error feedback (:mod:`autotune.runtime.compression`), its bounded
waits (:mod:`autotune.runtime.engine`), and the server loss it survives.

**Buckets as tensors.** The runtime averages registered tensors' ``.grad``. Each of DDP's
buckets gets a proxy: a leaf tensor of the bucket's size, dtype and device that holds no
memory (stride 0), registered with the runtime in bucket order. When DDP hands bucket
``b`` to the hook, the proxy's ``.grad`` becomes the bucket's flat buffer and the runtime
takes it (:meth:`Runtime.ready <autotune.runtime.core.Runtime.ready>`): its chunks leave
while DDP's backward goes on, as a native gradient's do. The hook returns a future per
bucket; at DDP's last bucket (``bucket.is_last()``) it waits for the round
(:meth:`Runtime.wait <autotune.runtime.core.Runtime.wait>`), which writes the averages
into the bucket buffers, and completes every future. So backward returns with DDP's
gradients averaged, as under DDP's own hook.

**A bucket the runtime does not know** is averaged as DDP's default hook averages it
(:meth:`RuntimeBuckets.fallback`: divided by the group size, all-reduced on DDP's process
group, whose timeout bounds it). The registration is the bucket layout seen in an earlier
iteration, so that is the first iteration (no layout yet) and, DDP having rebuilt its
buckets after it, the second; :meth:`RuntimeBuckets.register` registers the new layout
before the next ``sync``. From then on every bucket is the runtime's.

**Faults.** A recoverable fault of the round (a server lost: the runtime drops it) leaves
the buckets' local gradients intact (the runtime writes only after every chunk is in);
every worker gets it alike, and each bucket is averaged again by the fallback.
:meth:`take_failure` hands the fault to the session, which shrinks the space and puts the
fallback configuration in force at its ``step()``. Any other fault fails every pending
future, so DDP's backward raises it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from .config import Intra, Transport
from .errors import RuntimeFault

__all__ = ["RuntimeBuckets"]


class RuntimeBuckets:
    """DDP's buckets handed to the native runtime ``rt`` (module docstring); ``group``:
    DDP's process group, which the fallback all-reduces on (default: the world)."""

    def __init__(self, rt: Any, group: Any = None):
        self.rt = rt
        self.group = group if group is not None else dist.group.WORLD
        self.size = dist.get_world_size(self.group)
        # CUDA buckets on an NCCL group: a lossless flat all-reduce is DDP's own
        self.device_engine = "nccl" in str(dist.get_backend(self.group))
        self.config: Any = None    # the configuration in force (put_in_force)
        self._ddp_allreduce = False  # put_in_force: DDP's all-reduce runs CUDA buckets
        self.by_ddp = 0            # buckets DDP's all-reduce averaged since the last sync
        self.sizes: dict[int, int] = {}   # bucket index -> elements, as last seen
        self.rounds: dict[int, int] = {}  # bucket index -> hook calls
        self.proxies: list[torch.Tensor] = []
        self.seen: dict[int, tuple[int, torch.dtype, str]] = {}  # this iteration's buckets
        self.handed = 0            # buckets the runtime averaged
        self.averaged_again = 0    # buckets the hook averaged instead (unknown, or a fault)
        self._pending: list[tuple[torch.futures.Future, int, torch.Tensor]] = []
        self._failure: RuntimeFault | None = None

    # ------------------------------------------------------------------ layout
    def register(self) -> bool:
        """Between iterations, every worker alike: register the buckets seen since the
        last call with the runtime, if they differ from its registration (in force at the
        next ``sync``). Returns whether it registered."""
        self.by_ddp = 0
        if not self.seen:
            return False
        seen = [self.seen.get(i) for i in range(max(self.seen) + 1)]
        mine = [_signature(p) for p in self.proxies]
        self.seen = {}
        if None in seen or seen == mine:
            return False
        self.proxies = [torch.empty_strided((n,), (0,), dtype=dtype, device=device)
                        .requires_grad_() for n, dtype, device in seen]  # type: ignore[misc]
        self.rt.register(self.proxies)
        return True

    # ------------------------------------------------------------------ buckets
    def note(self, idx: int, buf: torch.Tensor) -> None:
        """Bucket ``idx`` of this iteration is ``buf`` (every bucket is noted, so the
        runtime's registration follows DDP's buckets)."""
        self.seen[idx] = _signature(buf)
        self.sizes[idx] = buf.numel()
        self.rounds[idx] = self.rounds.get(idx, 0) + 1

    def put_in_force(self, config: Any) -> None:
        """``config`` (a ``RuntimeConfig`` the runtime's ``sync`` put in force) is the one
        the next buckets use."""
        self.config = config
        self._ddp_allreduce = (
            self.device_engine and not config.lossy and config.transport == Transport.ALLREDUCE
            and config.intra == Intra.FLAT
            # what error feedback still holds goes out with the runtime's next round
            and not any(self.rt.residual_norms.values()))

    def _ddp_runs(self, buf: torch.Tensor) -> bool:
        """Whether DDP's own all-reduce averages ``buf``: a CUDA bucket on an NCCL group
        under a lossless all-reduce among the workers, no residual held
        (:mod:`autotune.runtime.ddp_hook`); never otherwise."""
        return self._ddp_allreduce and buf.is_cuda

    def average(self, bucket: Any) -> torch.futures.Future:
        """The hook's work for ``bucket`` (noted): hand it to the runtime (or, unknown,
        :meth:`fallback`); the future of its average."""
        idx, buf = bucket.index(), bucket.buffer()
        self.note(idx, buf)
        known = (self.rt.layout_in_force and idx < len(self.proxies)
                 and _signature(self.proxies[idx]) == self.seen.get(idx))
        if known and not self._ddp_runs(buf):
            self.proxies[idx].grad = buf
            self.rt.ready(idx)
            self.handed += 1
            fut: torch.futures.Future = torch.futures.Future()
            self._pending.append((fut, idx, buf))
        else:
            self.averaged_again += 1
            fut = self.fallback(buf, idx)
        if bucket.is_last() and self.rt.gradients_arrived():
            self._finish()
        return fut

    def fallback(self, buf: torch.Tensor, idx: int) -> torch.futures.Future:
        """Bucket ``idx`` (``buf``) averaged as DDP's default hook does: divided by the
        group size, then all-reduced on DDP's group (bounded by its timeout); its failure
        names this rank and the bucket."""
        rank = dist.get_rank()
        self.by_ddp += 1
        buf.div_(self.size)
        try:
            work = dist.all_reduce(buf, group=self.group, async_op=True)
        except Exception as e:
            raise RuntimeFault(f"rank {rank}: bucket {idx}: starting DDP's all-reduce failed: "
                               f"{type(e).__name__}: {e}") from e

        def done(fut: torch.futures.Future) -> torch.Tensor:
            try:
                fut.wait()
            except Exception as e:
                raise RuntimeFault(f"rank {rank}: bucket {idx}: DDP's all-reduce failed: "
                                   f"{type(e).__name__}: {e}") from e
            return buf

        return work.get_future().then(done)

    def _finish(self) -> None:
        """Wait for the round (it writes the averages into the buckets) and complete the
        pending futures; after a recoverable fault, average each bucket again with
        :meth:`fallback` (module docstring)."""
        pending, self._pending = self._pending, []
        try:
            self.rt.wait()
        except RuntimeFault as e:
            if not e.recoverable:
                for fut, _, _ in pending:
                    fut.set_exception(e)
                return
            self._failure = e
            self.handed -= len(pending)
            self.averaged_again += len(pending)
            for fut, idx, buf in pending:
                try:
                    fut.set_result(self.fallback(buf, idx).wait())
                except BaseException as again:
                    fut.set_exception(_as_exception(again))
            return
        except BaseException as e:  # the futures must complete, or DDP waits forever
            for fut, _, _ in pending:
                fut.set_exception(_as_exception(e))
            raise
        for fut, _, buf in pending:
            fut.set_result(buf)

    def take_failure(self) -> RuntimeFault | None:
        """The recoverable fault the last round was averaged again after, once."""
        failure, self._failure = self._failure, None
        return failure


def _signature(t: torch.Tensor) -> tuple[int, torch.dtype, str]:
    """What a bucket and its proxy share: size, dtype, device."""
    return (t.numel(), t.dtype, str(t.device))


def _as_exception(e: BaseException) -> Exception:
    """``e`` as a future takes it: an ``Exception`` (a stop signal, ``Terminated`` or
    ``KeyboardInterrupt``, is a ``BaseException``: wrapped, naming it; the signal itself
    goes on being raised where it arrived)."""
    return e if isinstance(e, Exception) else RuntimeError(f"stopped: {e!r}")
