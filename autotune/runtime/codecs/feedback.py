"""Error feedback: what compression dropped is added to the next iteration's gradient.

One :class:`ErrorFeedback` per flat gradient space of a worker (or of a Summation
Service re-encoding sums). Residuals are NOT kept per chunk id: they live in one float32
vector indexed by *global element offset* (the position of an element in the
concatenation of all registered gradients, in registration order). A chunk says which
elements it holds as ``segments``: ``((offset, length), ...)`` in that global space, in
the chunk's own element order. Hence

- a config switch that keeps the chunk layout finds each chunk's residual where it was;
- a switch that changes the layout (other ``chunk_bytes``, another plan) just reads the
  residual of the elements each new chunk holds: everything is folded back, nothing is
  dropped;
- a chunk that now travels uncompressed (``compression=none`` or below
  ``compress_min_bytes``: the codec is left) sends its gradient plus its residual scaled
  down to at most the gradient's own norm (:func:`bounded`), and the residual is cleared:
  the rest is dropped. Under top-k 0.1% the residual holds most of many steps'
  gradients; added whole to one step it floods the optimiser (Adam's moments, SGD's
  momentum) for hundreds of steps, and costs more than the codec did
  (``benchmarks/residual_bench.py``, docs/compression.md "Leaving a codec");
- a chunk that now travels under *another* codec (top-k's residual, then fp16 in the
  loss test's next block) takes its residual bounded the same way: a residual is carried
  whole only under the codec that made it. At a switch of codec (:meth:`switch_to`, on
  one thread before the chunks are encoded) what is held back is marked foreign, on the
  host, until each chunk has been encoded once; then nothing is checked any more. fp16
  sends every element, so top-k's held-back gradients would otherwise land in one step;
- if the flat space itself is re-laid out (another gradient order), :meth:`relayout`
  moves each gradient's residual to its new offset.

In the runtime the global space is one flat buffer per dtype (``autotune.runtime.data.plan``'s
flat layout) and a chunk is one range of it: ``segments = whole(chunk.offset, chunk.numel)``.

Invariant (per element, per step, while a chunk is encoded lossy): ``sent + new residual
= gradient + old residual``, where ``sent = codec.decode(payload)``. The residual vector
is allocated on first lossy use, on the device of the first chunk.
"""

from __future__ import annotations

import threading
from typing import Sequence

import torch

from autotune.runtime.codecs.base import Codec, Context, Payload

Segments = Sequence[tuple[int, int]]
"""((global offset, length), ...): the elements a chunk holds, in chunk order."""


class ErrorFeedback:
    """Residuals of one flat gradient space of ``numel`` elements; see the module docstring."""

    def __init__(self, numel: int) -> None:
        if numel < 1:
            raise ValueError(f"ErrorFeedback needs a positive number of elements, got {numel}")
        self.numel = int(numel)
        self._residual: torch.Tensor | None = None
        self._codec: str | None = None  # the codec chunks are encoded by
        # on the host: elements whose residual another codec made, not sent since
        self._foreign: torch.Tensor | None = None
        self._foreign_left = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ main use
    def encode(
        self, codec: Codec, chunk: torch.Tensor, segments: Segments, ctx: Context = Context()
    ) -> Payload:
        """Compensate ``chunk`` with its residual, encode it, and keep what the encoding
        dropped as the new residual of those elements. Returns the payload. A lossless
        ``codec`` (the codec was left) sends the residual bounded and clears it."""
        if codec.lossless:
            self._check(chunk, segments)
            return codec.encode(self._leave(chunk.to(torch.float32, copy=True), segments), ctx)
        self.switch_to(codec.name)  # (the runtime's switch has done it already)
        compensated = self.compensate(chunk, segments)
        payload = codec.encode(compensated, ctx)
        sent = codec.decode(payload, compensated.numel(), ctx)
        self.store(segments, compensated - sent)
        return payload

    def compensate(self, chunk: torch.Tensor, segments: Segments) -> torch.Tensor:
        """``chunk`` (float32) plus the residual of its elements (a new tensor); a
        residual another codec made (:meth:`switch_to`) :func:`bounded` by the chunk's
        norm, the rest dropped."""
        self._check(chunk, segments)
        out = chunk.to(torch.float32)
        if self._residual is None:
            return out.clone() if out.data_ptr() == chunk.data_ptr() else out
        r = self.residual(segments)
        if self._sent_foreign(segments):
            r = bounded(r, out)
            if r is None:
                return out.clone() if out.data_ptr() == chunk.data_ptr() else out
        return out + r.to(out.device)

    def switch_to(self, codec: str) -> None:
        """Chunks are encoded by ``codec`` (a codec's name) from now on: what another
        codec held back is foreign until sent (module docstring). Call it on one thread,
        before chunks are encoded from several."""
        if codec == self._codec:
            return
        before, self._codec = self._codec, codec
        if before is None or self._residual is None:
            return
        held = (self._residual != 0).cpu()
        left = int(held.sum())
        self._foreign, self._foreign_left = (held, left) if left else (None, 0)

    def _sent_foreign(self, segments: Segments) -> bool:
        """Whether part of the residual of ``segments`` is foreign; from now on none is."""
        foreign = self._foreign
        if foreign is None:
            return False
        n = sum(int(foreign[o:o + k].sum()) for o, k in segments)
        if n == 0:
            return False
        for o, k in segments:
            foreign[o:o + k] = False
        with self._lock:  # (chunks are encoded from several threads)
            self._foreign_left -= n
            if self._foreign_left <= 0:
                self._foreign = None
        return True

    # ------------------------------------------------------------------ residuals
    def residual(self, segments: Segments) -> torch.Tensor:
        """A float32 copy of the residual of ``segments``, in chunk order."""
        length = self._check(None, segments)
        if self._residual is None:
            return torch.zeros(length, dtype=torch.float32)
        parts = [self._residual[o:o + k] for o, k in segments]
        return parts[0].clone() if len(parts) == 1 else torch.cat(parts)

    def store(self, segments: Segments, values: torch.Tensor) -> None:
        """Set the residual of ``segments`` to ``values`` (chunk order)."""
        self._check(values, segments)
        self.allocate(values.device)
        values = values.to(device=self._residual.device, dtype=torch.float32)
        pos = 0
        for o, k in segments:
            self._residual[o:o + k] = values[pos:pos + k]
            pos += k

    def fold(self, view: torch.Tensor, segments: Segments) -> None:
        """Add the residual of ``segments`` into ``view`` in place (in ``view``'s dtype),
        its norm bounded by ``view``'s (:func:`bounded`), and clear it: how a chunk that
        is not encoded here (the codec was left) hands its residual on."""
        if self._residual is None:
            return
        self._check(view, segments)
        self._leave(view, segments)

    def _leave(self, view: torch.Tensor, segments: Segments) -> torch.Tensor:
        """``view`` plus the bounded residual of ``segments``, in place; the residual
        cleared."""
        if self._residual is not None:
            r = bounded(self.residual(segments), view)
            if r is not None:
                view.add_(r.to(view.device))
            self.clear(segments)
        return view

    def add(self, segments: Segments, values: torch.Tensor) -> None:
        """Add ``values`` (chunk order) to the residual of ``segments``: residual handed
        over from elsewhere (e.g. a Summation Service's) to be sent later."""
        self._check(values, segments)
        self.allocate(values.device)
        values = values.to(device=self._residual.device, dtype=torch.float32)
        pos = 0
        for o, k in segments:
            self._residual[o:o + k] += values[pos:pos + k]
            pos += k

    def allocate(self, device: torch.device | str = "cpu") -> None:
        """Allocate the (zero) residual vector now, e.g. before several threads encode
        disjoint chunks at once (the lazy allocation is not thread-safe)."""
        if self._residual is None:
            self._residual = torch.zeros(self.numel, dtype=torch.float32, device=device)

    @property
    def allocated(self) -> bool:
        """Whether anything may be held back (the vector exists)."""
        return self._residual is not None

    def clear(self, segments: Segments | None = None) -> None:
        """Zero the residual of ``segments`` (all of it when ``None``)."""
        if self._residual is None:
            return
        if segments is None:
            self._residual.zero_()
            self._foreign, self._foreign_left = None, 0
            return
        self._check(None, segments)
        self._sent_foreign(segments)
        for o, k in segments:
            self._residual[o:o + k] = 0

    def relayout(
        self, old_offsets: Sequence[int], new_offsets: Sequence[int], sizes: Sequence[int],
        numel: int | None = None,
    ) -> None:
        """Move every gradient's residual when the flat buffer itself is re-laid out
        (gradient i of ``sizes[i]`` elements moves from ``old_offsets[i]`` to
        ``new_offsets[i]``; the space becomes ``numel`` long, default unchanged)."""
        if not len(old_offsets) == len(new_offsets) == len(sizes):
            raise ValueError("old_offsets, new_offsets and sizes must have the same length")
        numel = self.numel if numel is None else int(numel)
        for o, k in zip(new_offsets, sizes):
            if k and (o < 0 or o + k > numel):
                raise ValueError(f"gradient at {o} of {k} elements outside 0..{numel}")
        if self._residual is None:
            self.numel = numel
            return
        moved = torch.zeros(numel, dtype=torch.float32, device=self._residual.device)
        foreign = None if self._foreign is None else torch.zeros(numel, dtype=torch.bool)
        for old, new, k in zip(old_offsets, new_offsets, sizes):
            if not 0 <= old <= old + k <= self.numel:
                raise ValueError(f"gradient at {old} of {k} elements outside 0..{self.numel}")
            moved[new:new + k] = self._residual[old:old + k]
            if foreign is not None:
                foreign[new:new + k] = self._foreign[old:old + k]
        self.numel = numel
        self._foreign_left = 0 if foreign is None else int(foreign.sum())
        self._residual, self._foreign = moved, foreign if self._foreign_left else None

    def total(self) -> torch.Tensor:
        """The whole residual vector (zeros if nothing was ever dropped); a copy."""
        if self._residual is None:
            return torch.zeros(self.numel, dtype=torch.float32)
        return self._residual.clone()

    def norm(self) -> float:
        """L2 norm of everything still held back (0 when nothing is pending)."""
        return 0.0 if self._residual is None else float(self._residual.norm())

    # ------------------------------------------------------------------ checks
    def _check(self, chunk: torch.Tensor | None, segments: Segments) -> int:
        length = 0
        for o, k in segments:
            if k < 1 or o < 0 or o + k > self.numel:
                raise ValueError(
                    f"segment (offset={o}, length={k}) outside the gradient space 0..{self.numel}"
                )
            length += k
        if length == 0:
            raise ValueError("a chunk needs at least one segment")
        if chunk is not None and (chunk.dim() != 1 or chunk.numel() != length):
            raise ValueError(
                f"chunk of shape {tuple(chunk.shape)} does not match its segments ({length} elements)"
            )
        return length


def bounded(residual: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor | None:
    """What a chunk that leaves its codec takes of its ``residual``: scaled down, if need
    be, to the ``gradient``'s own L2 norm (None: nothing, the residual is zero). The rule
    chosen on real models by ``benchmarks/residual_bench.py`` (issue 62): it never adds
    more than one gradient's worth, and where the residual is small it is all sent."""
    held = float(residual.norm())
    if held == 0.0:
        return None
    scale = float(gradient.to(torch.float32).norm()) / held
    return residual if scale >= 1.0 else residual.mul_(scale)


def whole(offset: int, length: int) -> tuple[tuple[int, int], ...]:
    """Segments of a chunk that is one contiguous range of the global space."""
    return ((offset, length),)
