"""DDP's buckets as the native runtime's gradients: push/pull and the intra-machine step
inside DDP's comm hook.

Under ``autotune.session(ddp_model)`` the comm hook
(:class:`~autotune.runtime.ddp_hook.BucketTransport`) runs an all-reduce among the workers
itself. Every other configuration (``transport=pushpull`` through Summation Services,
intra-machine ``root`` or ``scatter``) is the native :class:`~autotune.runtime.core.Runtime`'s,
and :class:`RuntimeBuckets` hands DDP's buckets to it, so both ways in run one runtime:
its plan (BytePS's split between servers and colocated Summation Services), its
Communication and Summation Services, codecs, error feedback, bounded waits, and the
server loss it survives.

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

**A bucket the runtime does not know.** The registration is the bucket layout seen in an
earlier iteration. DDP rebuilds its buckets once, after the first iteration; a bucket
whose size, dtype or device differs from its proxy's (or one with no proxy) is averaged by
the hook's own all-reduce (``fallback``), and :meth:`register` registers the new layout
before the next ``sync``.

**Faults.** A recoverable fault of the round (a server lost: the runtime drops it) leaves
the buckets' local gradients intact (the runtime writes only after every chunk is in);
every worker gets it alike, and each bucket is averaged again by the hook's all-reduce
among the workers. :meth:`take_failure` hands the fault to the session, which shrinks
the space and puts the fallback configuration in force at its ``step()``. Any other
fault fails every pending future, so DDP's backward raises it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .errors import RuntimeFault

__all__ = ["RuntimeBuckets"]


class RuntimeBuckets:
    """DDP's buckets handed to the native runtime ``rt`` (module docstring)."""

    def __init__(self, rt: Any):
        self.rt = rt
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
        """Bucket ``idx`` of this iteration is ``buf`` (the hook notes every bucket, under
        any configuration, so the runtime's registration follows DDP's buckets)."""
        self.seen[idx] = _signature(buf)

    def average(self, bucket: Any, fallback: Callable[[torch.Tensor, int], torch.futures.Future]
                ) -> torch.futures.Future:
        """The hook's work for ``bucket`` (noted) under a configuration of the runtime:
        hand it over (or, unknown, ``fallback(buf, index)`` averages it); the future of its
        average."""
        idx, buf = bucket.index(), bucket.buffer()
        known = (self.rt.layout_in_force and idx < len(self.proxies)
                 and _signature(self.proxies[idx]) == self.seen.get(idx))
        if known:
            self.proxies[idx].grad = buf
            self.rt.ready(idx)
            self.handed += 1
            fut: torch.futures.Future = torch.futures.Future()
            self._pending.append((fut, idx, buf))
        else:
            self.averaged_again += 1
            fut = fallback(buf, idx)
        if bucket.is_last() and self.rt.gradients_arrived():
            self._finish(fallback)
        return fut

    def _finish(self, fallback: Callable[[torch.Tensor, int], torch.futures.Future]) -> None:
        """Wait for the round (it writes the averages into the buckets) and complete the
        pending futures; after a recoverable fault, average each bucket again with
        ``fallback`` (module docstring)."""
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
                    fut.set_result(fallback(buf, idx).wait())
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
