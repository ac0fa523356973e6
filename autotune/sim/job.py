"""A training job as the simulator sees it, and the chunks the simulator schedules for it.

A :class:`Job` is the gradient sizes in ready order (bytes, optionally with their dtypes)
and the compute time. Its chunks are the runtime's: :meth:`Job.plan` cuts them, puts them
on streams and gives them Summation Service owners with the runtime's own plan code
(:mod:`autotune.runtime.data.plan`: :func:`~autotune.runtime.data.plan.cut`,
:func:`~autotune.runtime.data.plan.coalesce`, :func:`~autotune.runtime.data.plan.stream_of`,
:func:`~autotune.runtime.data.plan.owner_weights`, :func:`~autotune.runtime.data.plan.assign_owners`),
so the chunks the simulator predicts are the chunks that run. A chunk is ready when
backward has produced the last byte of its last gradient (the runtime sends a chunk once
all its gradients are in). Gradients are produced during the backward pass, the last
``backward_fraction`` of ``compute_s``, in proportion to their bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Mapping, NamedTuple, Sequence

from autotune.runtime.config import Transport
from autotune.runtime.data.plan import (DTYPE_BYTES, Size, assign_owners, coalesce, coalesces, cut,
                                   owner_weights, stream_of)


class ChunkPlan(NamedTuple):
    """The chunks of one job under one configuration, in plan order (the runtime's).

    ``sizes``: bytes of each chunk; ``ready``: the share of the job's gradient bytes that
    backward has produced when the chunk is ready (0..1); ``streams``: each chunk's stream;
    ``owners``: under ``pushpull``, each chunk's Summation Service as an index into the
    owner order (the ``k`` servers, then the ``n`` worker machines' colocated services),
    ``[]`` otherwise; ``owned``: bytes each owner sums, in that order (``[]`` likewise)."""

    sizes: list[int]
    ready: list[float]
    streams: list[int]
    owners: list[int]
    owned: list[int]


@dataclass(frozen=True)
class Job:
    """``grad_bytes``: bytes of each gradient in the order backward produces them;
    ``compute_s``: forward + backward time of one iteration on one worker;
    ``backward_fraction``: the share of ``compute_s`` that is the backward pass (the
    window communication can overlap; 0: gradients all ready at the end);
    ``batch_per_worker``: samples per worker per iteration (for throughput);
    ``dtypes``: each gradient's dtype (a name of :data:`~autotune.runtime.data.plan.DTYPE_BYTES`),
    or empty: all of one dtype. The runtime keeps one flat buffer per dtype and a dtype
    change closes a chunk, so mixed dtypes change the chunks; with one dtype the chunk
    boundaries in bytes do not depend on which (``chunk_bytes`` is a multiple of 8)."""

    grad_bytes: tuple[int, ...]
    compute_s: float = 0.0
    backward_fraction: float = 2 / 3
    batch_per_worker: int = 32
    name: str = ""
    dtypes: tuple[str, ...] = ()
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sizes = tuple(int(b) for b in self.grad_bytes)
        object.__setattr__(self, "grad_bytes", sizes)
        object.__setattr__(self, "dtypes", tuple(str(d) for d in self.dtypes))
        if not sizes:
            raise ValueError("a job needs at least one gradient")
        if any(b <= 0 for b in sizes):
            raise ValueError("gradient sizes must be positive byte counts")
        if self.dtypes:
            if len(self.dtypes) != len(sizes):
                raise ValueError(f"{len(self.dtypes)} dtypes for {len(sizes)} gradients")
            for i, (b, d) in enumerate(zip(sizes, self.dtypes)):
                if d not in DTYPE_BYTES:
                    raise ValueError(f"gradient {i} has unsupported dtype {d!r}")
                if b % DTYPE_BYTES[d]:
                    raise ValueError(f"gradient {i}: {b} bytes is not a whole number of {d}")
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

    @property
    def sizes(self) -> list[Size]:
        """The gradients as the runtime's plan takes them, ``(numel, dtype)`` in ready order.
        Without ``dtypes`` a gradient is its bytes as ``uint8`` elements: the same chunk
        boundaries in bytes as any single dtype."""
        if self.dtypes:
            return [(b // DTYPE_BYTES[d], d) for b, d in zip(self.grad_bytes, self.dtypes)]
        return [(b, "uint8") for b in self.grad_bytes]

    # ---------------------------------------------------------------- the plan
    def chunks(self, chunk_bytes: int, coalesced: int = 0) -> tuple[list[int], list[float]]:
        """Chunk sizes (bytes) and, for each, the share of gradient bytes produced by the
        time it is ready (0..1), in plan order: the runtime's :func:`~autotune.runtime.data.plan.cut`,
        then, with ``coalesced`` streams (> 0), its :func:`~autotune.runtime.data.plan.coalesce`.
        Cached per ``chunk_bytes`` and ``coalesced``."""
        key = ("chunks", int(chunk_bytes), int(coalesced))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
        done = list(accumulate(self.grad_bytes))  # bytes produced once gradient i is in
        total = done[-1]
        spans = cut(self.sizes, int(chunk_bytes))
        if coalesced:
            spans = coalesce(spans, int(coalesced))
        hit = ([sp.nbytes for sp in spans], [done[sp.tensors[-1]] / total for sp in spans])
        self._cache[key] = hit
        return hit

    def owners(self, chunk_bytes: int, machines: int, servers: int) -> tuple[list[int], list[int]]:
        """Under ``pushpull`` with ``servers`` servers and ``machines`` worker machines: each
        chunk's Summation Service (index into the owner order: servers, then machines) and
        the bytes each owner sums, by the runtime's assignment
        (:func:`~autotune.runtime.data.plan.assign_owners` over
        :func:`~autotune.runtime.data.plan.owner_weights`). Cached."""
        key = ("owners", int(chunk_bytes), int(machines), int(servers))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        sizes, _ = self.chunks(chunk_bytes)
        who = assign_owners(sizes, owner_weights(machines, servers))
        owned = [0] * (servers + machines)
        for o, b in zip(who, sizes):
            owned[o] += b
        self._cache[key] = (who, owned)
        return who, owned

    def plan(self, config: Mapping[str, Any], machines: int) -> ChunkPlan:
        """The chunks of this job under ``config`` (``chunk_bytes``, ``streams``,
        ``transport``, ``servers``) with ``machines`` worker machines: what
        :func:`autotune.runtime.data.plan.make_plan` gives the runtime, in bytes and owner
        indices (coalesced where :func:`~autotune.runtime.data.plan.coalesces`)."""
        chunk_bytes, streams = int(config["chunk_bytes"]), int(config["streams"])
        if streams < 1:
            raise ValueError(f"streams must be >= 1, got {streams}")
        sizes, ready = self.chunks(chunk_bytes, streams if coalesces(config) else 0)
        on = [stream_of(j, streams) for j in range(len(sizes))]
        if config.get("transport") == Transport.PUSHPULL:
            who, owned = self.owners(chunk_bytes, machines, int(config.get("servers", 0)))
            return ChunkPlan(sizes, ready, on, who, owned)
        return ChunkPlan(sizes, ready, on, [], [])
