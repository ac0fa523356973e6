"""One rank's gradient copies: ``.grad`` into the flat input buffer, the averages back.

:class:`GradientCopies` is the part of the :class:`~autotune.runtime.data.averager.Averager`
that moves bytes between the registered parameters' gradients and the flat buffers of the
active configuration (:class:`~autotune.runtime.control.reconfigure.Active`), one small interface:

* :meth:`GradientCopies.pack` copies one gradient into the flat input buffer: a CPU one
  at once; a CUDA one (or a CPU one with ``copy_cpu``, for tests) only started, through
  :class:`~autotune.runtime.data.staging.HostStaging`, on the staging side stream, and its
  :class:`~autotune.runtime.data.staging.Staged` returned for the round to wait on;
* :meth:`GradientCopies.lend` instead, under a lossless push/pull among all workers
  (:func:`~autotune.runtime.data.plan.pushes_from_grad`): a contiguous CPU gradient is not
  copied where a chunk holds it alone; that chunk is pushed from ``.grad`` itself, which
  is only read (the sum is pulled into the second buffer, ``out``), and only its parts in
  chunks shared with other gradients are copied. With ``grad_views`` as well, only those
  parts are copied, and nothing back;
* :meth:`GradientCopies.write_back` puts a completed round's averages into ``.grad``
  (non-blocking for staged gradients, see there for the ordering). With ``grad_views``
  (opt-in, as DDP's ``gradient_as_bucket_view`` is; ``AUTOTUNE_GRAD_VIEWS=1``,
  :func:`grad_views_from_env`) a CPU gradient is not copied back: ``.grad`` becomes a
  view of the averages in the flat buffer, and the next round packs into a spare buffer
  of the same size (:meth:`~autotune.runtime.control.reconfigure.Active.rotate`), so that no
  reduction writes into memory that ``.grad`` shows: after a fault the gradients are
  intact and a second ``wait()`` averages them again. The pack copy stays (but see :meth:`lend`),
  for that reason (gradients written straight into the buffer would be reduced in place
  by an all-reduce). The price, and
  why it is not the default: ``.grad`` is a new tensor after every round (zeroing it in
  place does not keep its identity, as it does without views and in DDP), and a ``.grad``
  tensor kept from an earlier round is overwritten two rounds later;
* :meth:`GradientCopies.drain` is the wait before a new round writes into the buffers:
  every staged copy of earlier rounds completed (bounded by ``timeout``).

``staged_copies`` counts the copies through staging (both ways; tests read it).
"""

from __future__ import annotations

import os
import threading
from typing import Sequence

import torch

from autotune.runtime.control.reconfigure import Active
from autotune.runtime.data.layout import Layout
from autotune.runtime.data.staging import HostStaging, Staged
from autotune.runtime.errors import RuntimeFault


GRAD_VIEWS_ENV = "AUTOTUNE_GRAD_VIEWS"


def grad_views_from_env() -> bool:
    """Whether ``AUTOTUNE_GRAD_VIEWS`` asks for CPU ``.grad`` tensors as views of the
    averages (``1``/``true``/``yes``; off when unset)."""
    return os.environ.get(GRAD_VIEWS_ENV, "").strip().lower() in ("1", "true", "yes")


class GradientCopies:
    """Copies between ``.grad`` and the flat buffers of ``active`` (see the module
    docstring). ``rank``: named in errors; ``timeout``: the bound of :meth:`drain`;
    ``copy_cpu``: stage CPU gradients too (tests); ``grad_views``: CPU ``.grad`` become
    views of the averages (``None``: :func:`grad_views_from_env`)."""

    def __init__(self, active: Active, layout: Layout, rank: int, timeout: float,
                 copy_cpu: bool = False, grad_views: bool | None = None):
        self.active = active
        self.layout = layout
        self.rank = rank
        self.timeout = timeout
        self.copy_cpu = bool(copy_cpu)
        self.grad_views = grad_views_from_env() if grad_views is None else bool(grad_views)
        self._lock = threading.Lock()         # making a HostStaging (hooks may race)
        self._stagers: dict[torch.device, HostStaging] = {}
        self._last: dict[torch.device, Staged] = {}  # latest copy issued per side stream
        self.staged_copies = 0                # copies through staging (both ways)
        self.lent = 0                         # gradients whose own chunks pushed from .grad

    def pack(self, pos: int, grad: torch.Tensor | None) -> Staged | None:
        """Copy gradient ``pos`` into the flat input buffer: a CPU gradient at once (no
        staging unless ``copy_cpu``); a CUDA one is only started, on the staging side
        stream, and its :class:`Staged` returned for the round to wait on."""
        setup = self.active.setup
        numel, dtype = setup.sizes[pos]
        if numel == 0:
            return None
        view = self.active.inp[dtype].narrow(0, setup.offsets[pos], numel)
        if grad is None:
            view.zero_()
        elif grad.is_cuda or self.copy_cpu:
            return self._note(self._stager(grad.device).to_host(grad, out=view.view(grad.shape)))
        else:
            view.view(grad.shape).copy_(grad)
        return None

    def lend(self, pos: int, grad: torch.Tensor | None) -> torch.Tensor | None:
        """Gradient ``pos`` itself, flat, for its own chunks to be pushed from (no copy;
        :func:`~autotune.runtime.data.plan.pushes_from_grad`), with only its parts in chunks
        shared with other gradients copied into the flat input buffer. ``None`` (nothing
        copied; :meth:`pack` it) unless the configuration pushes from gradients and this
        one is a contiguous CPU tensor of the registered size and dtype, not staged. The
        round checks, once complete, that nothing changed it in place meanwhile
        (:meth:`~autotune.runtime.data.engine.RoundState.changed_lent`)."""
        setup = self.active.setup
        parts = setup.from_grad[pos]
        if (parts is None or grad is None or grad.device.type != "cpu" or self.copy_cpu
                or not grad.is_contiguous() or grad.is_inference()):
            return None
        numel, dtype = setup.sizes[pos]
        if grad.numel() != numel or grad.dtype != getattr(torch, dtype):
            return None
        flat = grad.view(-1)
        inp, base = self.active.inp[dtype], setup.offsets[pos]
        for start, n in parts:
            inp.narrow(0, base + start, n).copy_(flat.narrow(0, start, n))
        self.lent += 1
        return flat

    def drain(self) -> RuntimeFault | None:
        """Before a new round writes into the flat buffers (packing, ``zero_``, the
        collectives): wait, at most ``timeout``, until every staged copy of earlier rounds
        has completed, the copies of the averages back into ``.grad`` above all, which read
        these buffers. By then they are done (they were queued at the last ``wait()``,
        before this forward pass). The error, if one did not complete."""
        err = None
        for device, staged in list(self._last.items()):
            try:
                staged.wait(self.timeout)
            except RuntimeFault as e:
                err = err or RuntimeFault(
                    f"rank {self.rank}: a copy between {device} and the host buffers "
                    f"of the previous round did not complete: {e}", rank=self.rank)
                continue  # still pending: the next round waits for it again
            del self._last[device]
        return err

    def write_back(self, had_grad: Sequence[bool]) -> None:
        """The averages into ``.grad`` (``had_grad[pos]``: whether gradient ``pos`` existed
        when packed; one that did not gets a ``.grad`` only if its average is not zero).
        CPU gradients: plain copies. Staged ones (CUDA, or ``copy_cpu``): non-blocking
        copies from the (pinned) buffer on the side stream, after the work the current
        stream has queued; then the current stream waits for them (device side: whatever
        the caller runs next on it, the optimizer step, sees the averages) and the host
        goes on at once. The host buffer must not be written again before these copies
        have read it: the next round's first hook (or ``complete``) waits for the latest
        copy on each side stream first (:meth:`drain`, in ``Averager.arm``); copies on
        one stream complete in order. That covers every host-side write into the buffers
        (``zero_`` of a missing gradient, CPU gradients, the collectives, which start only
        after a chunk's copies in) and costs nothing in practice: the copies were queued a
        whole forward pass earlier. (The next round's staged copies into the buffers are
        on the same side stream, so the device orders those anyway.)"""
        a = self.active
        setup = a.setup
        which = "out" if setup.pushpull else "inp"
        res = getattr(a, which)
        ordered: dict[torch.device, Staged] = {}
        viewed: set[str] = set()  # dtypes whose buffer .grad now shows
        for pos, reg in enumerate(self.layout.order):
            numel, dtype = setup.sizes[pos]
            p = self.layout.params[reg]
            view = res[dtype].narrow(0, setup.offsets[pos], numel).view(p.shape)
            stage = p.is_cuda or self.copy_cpu
            if p.grad is not None:
                if stage and numel:
                    st = self._note(self._stager(p.grad.device).to_device(view, p.grad))
                    ordered[p.grad.device] = st
                elif self.grad_views and numel and p.grad.stride() == view.stride():
                    p.grad = view
                    viewed.add(dtype)
                else:
                    p.grad.copy_(view)
            elif not had_grad[pos] and numel and bool(view.any()):
                if stage:
                    g = torch.empty(p.shape, dtype=p.dtype, device=p.device)
                    ordered[p.device] = self._note(self._stager(p.device).to_device(view, g))
                    p.grad = g
                elif self.grad_views:
                    p.grad = view
                    viewed.add(dtype)
                else:
                    p.grad = view.clone(memory_format=torch.contiguous_format)
        for st in ordered.values():  # the latest copy per side stream: all before it too
            st.order()
        if viewed:
            a.rotate(which, viewed)

    def _stager(self, device: torch.device) -> HostStaging:
        """The staging of ``device`` (made on first use, one per device)."""
        st = self._stagers.get(device)
        if st is None:
            with self._lock:
                st = self._stagers.get(device)
                if st is None:
                    st = self._stagers[device] = HostStaging(device, copy_cpu=self.copy_cpu)
        return st

    def _note(self, staged: Staged) -> Staged:
        """Remember ``staged`` as the latest copy on its side stream (copies on one stream
        complete in order, so waiting for it waits for every earlier one)."""
        device = staged.tensor.device if staged.device is None else staged.device
        self._last[device] = staged
        self.staged_copies += 1
        return staged
