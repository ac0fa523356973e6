"""A training job as the simulator sees it: gradient sizes in ready order and compute time.

Chunking follows the runtime's plan rule: walking the gradients in ready order, small
gradients are packed into a chunk up to ``chunk_bytes``, a gradient of ``chunk_bytes`` or
more is split into ``chunk_bytes`` pieces (the last one shorter). A chunk is ready when
its last gradient is. Gradients are produced during the backward pass, the last
``backward_fraction`` of ``compute_s``, in proportion to their bytes.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Sequence


@dataclass(frozen=True)
class Job:
    """``grad_bytes``: bytes of each gradient in the order backward produces them;
    ``compute_s``: forward + backward time of one iteration on one worker;
    ``backward_fraction``: the share of ``compute_s`` that is the backward pass (the
    window communication can overlap; 0: gradients all ready at the end);
    ``batch_per_worker``: samples per worker per iteration (for throughput)."""

    grad_bytes: tuple[int, ...]
    compute_s: float = 0.0
    backward_fraction: float = 2 / 3
    batch_per_worker: int = 32
    name: str = ""
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sizes = tuple(int(b) for b in self.grad_bytes)
        object.__setattr__(self, "grad_bytes", sizes)
        if not sizes:
            raise ValueError("a job needs at least one gradient")
        if any(b <= 0 for b in sizes):
            raise ValueError("gradient sizes must be positive byte counts")
        if not (isinstance(self.compute_s, (int, float)) and self.compute_s >= 0):
            raise ValueError(f"compute_s must be >= 0, got {self.compute_s!r}")
        if not 0.0 <= self.backward_fraction <= 1.0:
            raise ValueError(f"backward_fraction must be in [0, 1], got {self.backward_fraction!r}")
        if self.batch_per_worker < 1:
            raise ValueError(f"batch_per_worker must be >= 1, got {self.batch_per_worker!r}")

    @classmethod
    def from_shapes(cls, shapes: Sequence[tuple[str, tuple[int, ...]]], dtype_bytes: int = 4,
                    **kw: Any) -> "Job":
        """From ``(name, shape)`` pairs in ready order (as :func:`autotune.zoo.gradient_shapes`)."""
        return cls(tuple(math.prod(s) * dtype_bytes for _, s in shapes), **kw)

    @classmethod
    def from_model(cls, model: str, compute_ms: float = 0.0, dtype_bytes: int = 4,
                   **kw: Any) -> "Job":
        """From a zoo model name or a ``"pkg.module:attr"`` factory (imports torch)."""
        from autotune import zoo

        kw.setdefault("name", model)
        return cls.from_shapes(zoo.gradient_shapes(model), dtype_bytes,
                               compute_s=compute_ms / 1e3, **kw)

    @property
    def total_bytes(self) -> int:
        return sum(self.grad_bytes)

    # ---------------------------------------------------------------- chunking
    def chunks(self, chunk_bytes: int) -> tuple[list[int], list[float]]:
        """Chunk sizes and, for each, the share of gradient bytes produced by the time
        it is ready (0..1), in plan order. Cached per ``chunk_bytes``."""
        key = ("chunks", int(chunk_bytes))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
        total = self.total_bytes
        sizes: list[int] = []
        ready: list[float] = []
        cur = 0
        cum = 0
        for size in self.grad_bytes:
            if size >= chunk_bytes:
                if cur:
                    sizes.append(cur)
                    ready.append(cum / total)
                    cur = 0
                cum += size
                full, rest = divmod(size, chunk_bytes)
                sizes.extend([chunk_bytes] * full + ([rest] if rest else []))
                ready.extend([cum / total] * (full + (1 if rest else 0)))
                continue
            if cur + size > chunk_bytes:
                sizes.append(cur)
                ready.append(cum / total)
                cur = 0
            cur += size
            cum += size
        if cur:
            sizes.append(cur)
            ready.append(cum / total)
        self._cache[key] = (sizes, ready)
        return sizes, ready

    def owner_bytes(self, chunk_bytes: int, shares: Sequence[float]) -> list[float]:
        """Bytes each Summation Service owns when chunks are assigned so each owner's
        bytes follow ``shares``: every chunk goes to the owner whose bytes would stay the
        smallest multiple of its share (D'Hondt; exact when the shares are whole chunks of
        equal size)."""
        return self._owners(chunk_bytes, shares)[1]

    def owners(self, chunk_bytes: int, shares: Sequence[float]) -> list[int]:
        """The owner (index into ``shares``) of each chunk, in plan order, under the
        assignment of :meth:`owner_bytes`."""
        return self._owners(chunk_bytes, shares)[0]

    def _owners(self, chunk_bytes: int, shares: Sequence[float]) -> tuple[list[int], list[float]]:
        key = ("owners", int(chunk_bytes), tuple(shares))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        sizes, _ = self.chunks(chunk_bytes)
        owned = [0.0] * len(shares)
        who: list[int] = []
        # key: owner's bytes after taking one more full chunk, per unit of share
        heap = [(chunk_bytes / s, i) for i, s in enumerate(shares) if s > 0]
        heapq.heapify(heap)
        for b in sizes:
            _, i = heapq.heappop(heap)
            owned[i] += b
            who.append(i)
            heapq.heappush(heap, ((owned[i] + chunk_bytes) / shares[i], i))
        self._cache[key] = (who, owned)
        return who, owned
