"""Compression in the runtime: which chunks a configuration compresses, and the
error-feedback residuals a rank keeps across iterations and configurations.

* :class:`Compression` (part of a :class:`~autotune.runtime.control.prepared.Setup`): the codec of a
  configuration (``None`` for ``compression=none``), built once per configuration, and
  HiPress's selective rule: a chunk of fewer than ``compress_min_bytes`` bytes travels
  uncompressed. Only the cross-machine step is compressed (``intra=root``: the roots'
  exchange; ``scatter``: each shard's), so ``payloads`` (how many payloads are summed,
  which fp16/bf16 scale for) is the number of workers under ``flat`` and of machines
  otherwise.
* :class:`Residuals`: a rank's :class:`~autotune.runtime.codecs.ErrorFeedback` per flat
  dtype buffer, for what its own encodings dropped (``worker``) and, on a Summation
  Service that re-encodes sums of non-summable codecs, for what that dropped
  (``summation``). Both live in the global element space of the flat buffers, so they
  survive any configuration switch: a new chunk layout just reads other slices of them,
  and a chunk that is not encoded by this rank *folds* its residual into the gradient it
  sends (nothing is dropped). A new gradient order moves them (:meth:`Residuals.relayout`);
  a new registration (other parameters) resets them. A Summation Service's residual is
  kept while it re-encodes exactly the same units with the same codec; otherwise it is
  handed back to a worker (the same process for a worker machine's Summation Service, the
  leader for a dedicated server, see ``Active.commit``) and goes out with that worker's
  next gradients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from autotune.runtime.codecs import Codec, ErrorFeedback, codec_from_config, compress_min_bytes, compresses
from autotune.runtime.config import Intra, RuntimeConfig
from autotune.runtime.control.world import WorldInfo
from autotune.runtime.data.plan import Chunk

CODEC_SEED = 0x6175_746F
"""The codecs' shared seed (random-k indices, PowerSGD's first basis): the same on every
rank, so nothing random crosses the wire."""


@dataclass(frozen=True)
class Compression:
    """The codec of one configuration and the chunks it applies to."""

    codec: Codec | None
    min_bytes: int
    payloads: int

    @classmethod
    def of(cls, config: RuntimeConfig, info: WorldInfo) -> "Compression":
        """Raises ``ValueError`` for a codec or parameter the codecs package refuses."""
        flat = config.intra == Intra.FLAT
        payloads = max(1, len(info.workers) if flat else info.n_machines)
        if config.compression == "none":
            return cls(None, compress_min_bytes(config), payloads)
        codec = codec_from_config(config, world_size=payloads, seed=CODEC_SEED)
        return cls(codec, compress_min_bytes(config), payloads)

    @property
    def lossy(self) -> bool:
        return self.codec is not None and not self.codec.lossless

    def compresses(self, chunk: Chunk) -> bool:
        """Whether ``chunk`` crosses machines encoded (the same answer on every rank)."""
        return self.lossy and compresses(chunk.nbytes, self.min_bytes)

    def identity(self) -> tuple:
        """What the codec is, for telling whether a Summation Service re-encodes the same way."""
        c = self.codec
        return () if c is None else (c.name, tuple(sorted(c.params().items())), self.payloads)


class Residuals:
    """A rank's error-feedback state; see the module docstring."""

    def __init__(self) -> None:
        self.worker: dict[str, ErrorFeedback] = {}
        self.summation: dict[str, ErrorFeedback] = {}
        self.summation_key: tuple = ()
        self.dirty = False  # a worker residual may be non-zero: chunks must fold it

    # ------------------------------------------------------------------ access
    def worker_ef(self, dtype: str) -> ErrorFeedback:
        return self.worker[dtype]

    def summation_ef(self, dtype: str) -> ErrorFeedback:
        return self.summation[dtype]

    def prepare(self, totals: Mapping[str, int], worker: bool, summation: bool,
                codec: str | None = None) -> None:
        """Allocate the vectors a configuration will write from several threads, and
        tell them the ``codec`` (its name) that will encode (``ErrorFeedback.switch_to``:
        what another codec held back is sent bounded)."""
        for want, efs in ((worker, self.worker), (summation, self.summation)):
            if not want:
                continue
            for dtype, n in totals.items():
                if n > 0:
                    ef = efs.get(dtype)
                    if ef is None or ef.numel != n:
                        ef = efs[dtype] = ErrorFeedback(n)
                    ef.allocate()
                    if codec is not None:
                        ef.switch_to(codec)

    # ------------------------------------------------------------------ switches
    def reset(self) -> None:
        """Forget everything (a new registration: the residuals belonged to other
        parameters)."""
        self.worker.clear()
        self.summation.clear()
        self.summation_key = ()
        self.dirty = False

    def relayout(self, moves: Mapping[str, tuple[list[int], list[int], list[int], int]]) -> None:
        """A new gradient order: ``moves[dtype] = (old offsets, new offsets, sizes, total)``."""
        for efs in (self.worker, self.summation):
            for dtype, ef in list(efs.items()):
                if dtype not in moves:
                    del efs[dtype]
                    continue
                old, new, sizes, total = moves[dtype]
                ef.relayout(old, new, sizes, numel=total)

    def norms(self) -> dict[str, float]:
        """L2 norm of what is held back, per ``kind:dtype`` (``worker``: this rank's own
        encodings; ``summation``: its Summation Service's)."""
        return {f"{kind}:{d}": ef.norm()
                for kind, efs in (("worker", self.worker), ("summation", self.summation))
                for d, ef in sorted(efs.items())}

    def summation_pending(self) -> bool:
        return any(ef.allocated and ef.norm() > 0 for ef in self.summation.values())

    def take_summation(self) -> dict[str, torch.Tensor]:
        """The Summation Service's residual vectors (then forgotten)."""
        out = {d: ef.total() for d, ef in self.summation.items() if ef.allocated}
        self.summation.clear()
        self.summation_key = ()
        return out

    def absorb(self, dtype: str, values: torch.Tensor) -> None:
        """Add a residual vector over the whole ``dtype`` buffer to this worker's own."""
        n = values.numel()
        if n == 0:
            return
        ef = self.worker.get(dtype)
        if ef is None or ef.numel != n:
            ef = self.worker[dtype] = ErrorFeedback(n)
        ef.add(((0, n),), values)
        self.dirty = True

    def refresh_dirty(self) -> None:
        self.dirty = any(ef.allocated and ef.norm() > 0 for ef in self.worker.values())


def summation_key(setup: Any) -> tuple:
    """What a rank's Summation Service re-encodes under ``setup``: the codec and the
    (dtype, global offset, length) of every unit it decodes, sums and re-encodes
    (non-summable codecs only). Empty when it re-encodes nothing."""
    comp: Compression = setup.compression
    if not comp.lossy or comp.codec is None or comp.codec.summable:
        return ()
    units = tuple(sorted((u.chunk.dtype, u.chunk.offset + u.start, u.numel)
                         for stream in setup.units for u in stream if comp.compresses(u.chunk)))
    return (comp.identity(), units) if units else ()
