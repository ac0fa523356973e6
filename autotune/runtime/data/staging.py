"""GPU staging: device tensors to pinned host buffers and back, off the compute stream.

Where bytes must cross to the host (gloo groups carrying CUDA tensors, push/pull to CPU
Summation Services, a CPU-only codec), they go through :class:`HostStaging`, the one small
interface shared by the DDP comm hook (:mod:`autotune.runtime.ddp.ddp_hook`) and the native
runtime (:mod:`autotune.runtime.data.copies`: gradients into its flat buffers, averages back):

* :meth:`HostStaging.to_host` starts copying a device tensor into a pinned host buffer on
  the staging (side) CUDA stream, after everything the *producer* (the current stream)
  has queued so far, and returns a :class:`Staged` whose :meth:`Staged.wait` blocks the
  host (bounded) until the bytes are there;
* :meth:`HostStaging.to_device` starts the copy back, non-blocking, on the side stream;
  :meth:`Staged.order` makes the current stream wait for it (device side, the host does
  not block);
* :meth:`HostStaging.side` is a context in which the side stream is current (a
  ``torch.distributed`` future's callback thread completes a CUDA-aware
  :meth:`future` there, so its consumers wait for the copies back).

On CPU tensors the same calls are no copy at all (``to_host`` of a CPU tensor returns
the tensor itself), or a plain synchronous copy into a given buffer, and no stream or
event exists: CPU tests run exactly the logic of the callers. ``copy_cpu=True`` makes
CPU staging copy into separate host buffers too (what CUDA does, minus the streams), so
a CPU test also exercises the copies back. The native runtime reads it from
``AUTOTUNE_STAGE_CPU=1`` (:data:`STAGE_CPU_ENV`, read only by :func:`stage_cpu_from_env`)
unless ``Runtime.bootstrap(copy_cpu=...)`` says otherwise.

CUDA details: host buffers come from ``torch.empty(..., pin_memory=True)`` (PyTorch's
caching host allocator, which keeps a block until the non-blocking copies that use it
have completed, so a buffer dropped early is never reused under a pending copy); the
device tensor of each copy is marked with ``record_stream`` on the side stream (its
memory is not reused while the side stream still reads or writes it); ordering between
the producer, the side stream and the consumer is by ``wait_stream`` and events only.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Iterator

import torch

from autotune.runtime.errors import RuntimeFault

STAGE_CPU_ENV = "AUTOTUNE_STAGE_CPU"


def stage_cpu_from_env() -> bool:
    """Whether ``AUTOTUNE_STAGE_CPU`` asks the native runtime to stage CPU gradients
    (``copy_cpu=True``, for tests): ``1``/``true``/``yes``."""
    return os.environ.get(STAGE_CPU_ENV, "").strip().lower() in ("1", "true", "yes")


class Staged:
    """A copy under way: ``tensor`` is its destination; ``event`` (CUDA only) is recorded
    on the side stream of ``device`` after the copy, ``None`` when the copy (if any) is
    already done."""

    __slots__ = ("tensor", "event", "device")

    def __init__(self, tensor: torch.Tensor, event: Any = None, device: Any = None):
        self.tensor = tensor
        self.event = event
        self.device = device

    def wait(self, timeout: float) -> torch.Tensor:
        """Block the host until the copy is done, at most ``timeout`` seconds; the
        destination tensor."""
        ev = self.event
        if ev is not None and not ev.query():
            deadline = time.monotonic() + timeout
            pause = 20e-6
            while not ev.query():
                if time.monotonic() > deadline:
                    raise RuntimeFault(f"a staged copy of {self.tensor.numel()} elements did "
                                         f"not complete within {timeout:.0f}s")
                time.sleep(pause)
                pause = min(pause * 2, 1e-3)
        return self.tensor

    def order(self) -> torch.Tensor:
        """Make the current stream wait for the copy (device side; the host goes on); the
        destination tensor."""
        if self.event is not None:
            torch.cuda.current_stream(self.device).wait_event(self.event)
        return self.tensor


class HostStaging:
    """Staging between ``device`` and host memory (see the module docstring)."""

    def __init__(self, device: torch.device | str = "cpu", *, copy_cpu: bool = False):
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.copy_cpu = bool(copy_cpu)
        self.stream: Any = None
        if device.type == "cuda":
            self.stream = torch.cuda.Stream(device=device)

    @property
    def cuda(self) -> bool:
        return self.stream is not None

    @property
    def copies(self) -> bool:
        """Whether staged tensors are separate host buffers (CUDA, or ``copy_cpu``)."""
        return self.cuda or self.copy_cpu

    def empty(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """A 1-D host buffer (pinned when staging a CUDA device)."""
        return torch.empty(int(numel), dtype=dtype, pin_memory=self.cuda)

    def future(self) -> torch.futures.Future:
        """A future for values on this device (CUDA-aware on a CUDA device: completing it
        records an event on the current stream, and its consumers wait for that)."""
        if self.cuda:
            return torch.futures.Future(devices=[self.device])
        return torch.futures.Future()

    @contextlib.contextmanager
    def side(self) -> Iterator[None]:
        """The side stream (and its device) current inside the block; nothing on CPU."""
        if not self.cuda:
            yield
            return
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            yield

    # ------------------------------------------------------------------ copies
    def to_host(self, src: torch.Tensor, out: torch.Tensor | None = None) -> Staged:
        """Start copying ``src`` to the host (into ``out`` if given, else a new buffer;
        a CPU ``src`` without ``out`` is returned as is unless ``copy_cpu``). The copy is
        ordered after the work the current stream has queued (the producer)."""
        if not src.is_cuda:
            if out is None:
                if not self.copy_cpu:
                    return Staged(src)
                out = self.empty(src.numel(), src.dtype).view(src.shape)
            if out.data_ptr() != src.data_ptr():
                out.copy_(src)
            return Staged(out)
        if out is None:
            out = self.empty(src.numel(), src.dtype).view(src.shape)
        return self._side_copy(out, src, src)

    def to_device(self, src: torch.Tensor, dst: torch.Tensor) -> Staged:
        """Start copying the host tensor ``src`` into ``dst`` (non-blocking on CUDA, after
        the work the current stream has queued, since it may still use ``dst``). A CPU
        ``dst`` is copied into at once (nothing when it is ``src`` itself)."""
        if not dst.is_cuda:
            if dst.data_ptr() != src.data_ptr():
                dst.copy_(src)
            return Staged(dst)
        return self._side_copy(dst, src, dst)

    def _side_copy(self, dst: torch.Tensor, src: torch.Tensor, gpu: torch.Tensor) -> Staged:
        """``dst.copy_(src)`` on the side stream of ``gpu``'s device (the one of the two on
        the GPU), after the work its current stream has queued (which produces or may still
        use ``gpu``); the event marks its end."""
        side = self._side_for(gpu)
        current = torch.cuda.current_stream(gpu.device)
        with torch.cuda.device(gpu.device), torch.cuda.stream(side):
            if current != side:
                side.wait_stream(current)
            dst.copy_(src, non_blocking=True)
            gpu.record_stream(side)
            ev = torch.cuda.Event()
            ev.record(side)
        return Staged(dst, ev, gpu.device)

    def _side_for(self, t: torch.Tensor) -> Any:
        if self.stream is None or t.device != self.device:
            raise ValueError(f"this staging serves {self.device}, not a tensor on {t.device}")
        return self.stream

    def __repr__(self) -> str:
        return f"HostStaging({str(self.device)!r}{', copy_cpu=True' if self.copy_cpu else ''})"
