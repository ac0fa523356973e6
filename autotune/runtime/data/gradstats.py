"""A worker's gradient before and after averaging, in a few numbers (issue 39).

What the statistical efficiency of a configuration needs (:mod:`autotune.tuning.efficiency`)
is cheap to see in a data-parallel step: this worker's squared gradient norm before
averaging, the averaged gradient's after, and, to see what a codec changed, the values of
both at a few coordinates. The coordinates are a systematic sample drawn afresh each
iteration, its start a hash of (iteration, segment), so every rank draws the same ones
and nothing random crosses the wire. Summed over the workers (in the session's all-reduce
of the iteration), the sampled local values give the exact lossless average there; the
difference from what the configuration delivered there is the codec's error, net of error
feedback, and ``numel / k`` times its squared sum estimates the error's squared norm
without bias.

A *segment* is one piece of gradient as the way in sees it: a DDP bucket (the comm
hook). Keys must be the same on every rank
within an iteration. About :data:`SAMPLES` coordinates are drawn per iteration in all,
spread over the segments in proportion to their sizes (at least one each).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

SAMPLES = 512
"""Coordinates sampled per iteration in all (sent as float64s: 4 KiB per worker)."""


@dataclass
class Sample:
    """One iteration's numbers on one worker."""

    local_sq: float            # this worker's squared gradient norm before averaging
    averaged_sq: float         # the averaged gradient's squared norm (NaN: unseen)
    local: torch.Tensor        # float32: this worker's values at the sampled coordinates
    averaged: torch.Tensor | None  # float32: the averaged values there (None: unseen)
    weights: torch.Tensor      # float64: numel / k of each coordinate's segment


class GradientSample:
    """Collects one iteration's :class:`Sample` from segments of gradient (module
    docstring). ``total_numel``: the gradient's size, which the samples are spread over."""

    def __init__(self, total_numel: int, samples: int = SAMPLES) -> None:
        if total_numel < 1:
            raise ValueError(f"total_numel must be >= 1 elements, got {total_numel}")
        self.total_numel = int(total_numel)
        self.samples = int(samples)
        self.iteration = 0
        self.coordinates = True  # sample coordinates this iteration (else norms alone)
        self.seconds = 0.0  # spent in local() and averaged() (the caller resets it)
        self._local: dict[int, tuple[torch.Tensor, float, torch.Tensor, int]] = {}
        self._averaged: dict[int, tuple[float, torch.Tensor]] = {}

    def begin(self, iteration: int, coordinates: bool = True) -> None:
        """Start collecting ``iteration`` (forgets what was collected before); without
        ``coordinates``, only the squared norms (the same choice on every rank)."""
        self.iteration = int(iteration)
        self.coordinates = bool(coordinates)
        self._local.clear()
        self._averaged.clear()

    def _indices(self, key: int, numel: int, device: torch.device) -> torch.Tensor:
        """``k`` coordinates of a segment of ``numel``: a systematic sample (every
        ``numel / k``-th, from a start drawn by hashing (iteration, key)), so each
        coordinate is drawn with probability ``k / numel``: the weighted sums are unbiased."""
        k = min(numel, max(1, round(self.samples * numel / self.total_numel)))
        start = _mix(self.iteration * 1_000_003 + key) % numel
        return (torch.arange(k, device=device) * numel // k + start) % numel

    def local(self, key: int, flat: torch.Tensor) -> None:
        """Segment ``key`` of this worker's gradient, before averaging (1-D)."""
        started = time.perf_counter()
        with torch.no_grad():
            sq = _squared(flat)
            if self.coordinates:
                idx = self._indices(key, flat.numel(), flat.device)
                values = flat.index_select(0, idx).to("cpu", torch.float32)
            else:
                idx = values = _NONE
        self._local[key] = (idx, sq, values, flat.numel())
        self.seconds += time.perf_counter() - started

    def averaged(self, key: int, flat: torch.Tensor) -> None:
        """Segment ``key`` after averaging (the same coordinates as :meth:`local`)."""
        seen = self._local.get(key)
        if seen is None or seen[3] != flat.numel():
            return
        started = time.perf_counter()
        with torch.no_grad():
            sq = _squared(flat)
            values = (flat.index_select(0, seen[0]).to("cpu", torch.float32)
                      if len(seen[0]) else _NONE)
        self._averaged[key] = (sq, values)
        self.seconds += time.perf_counter() - started

    def take(self) -> Sample | None:
        """This iteration's numbers (None if no segment was seen). ``averaged`` is None
        when a segment seen before averaging was not seen after it (a failed bucket):
        ``local`` still holds every segment's values, the same count on every rank."""
        keys = sorted(self._local)
        if not keys:
            return None
        local = [self._local[k] for k in keys]
        weights = torch.cat([torch.full((len(v),), n / max(1, len(v)), dtype=torch.float64)
                             for _, _, v, n in local])
        complete = all(k in self._averaged for k in keys)
        after = [self._averaged[k] for k in keys] if complete else []
        return Sample(local_sq=math.fsum(sq for _, sq, _, _ in local),
                      averaged_sq=math.fsum(sq for sq, _ in after) if complete else math.nan,
                      local=torch.cat([v for _, _, v, _ in local]),
                      averaged=torch.cat([v for _, v in after]) if complete else None,
                      weights=weights)


_NONE = torch.zeros(0, dtype=torch.float32)  # no coordinates sampled


def _squared(flat: torch.Tensor) -> float:
    """``|flat|^2`` in float32 at least (one dot product)."""
    f = flat if flat.dtype in (torch.float32, torch.float64) else flat.float()
    return float(torch.dot(f, f))


def _mix(x: int) -> int:
    """SplitMix64's finaliser: a well-spread 64-bit hash of ``x`` (no state, no torch)."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)
