"""A session's online measurement of statistical efficiency (``allow_lossy``, scored by
goodput; docs/compression.md, "Is lossy safe for my model?").

Each iteration every worker samples its gradient before and after averaging
(:class:`~autotune.runtime.data.gradstats.GradientSample`, in the session's comm hook, bucket
by bucket). One small
all-reduce sums the workers' sampled values and squared norms (the session's all-reduce
of the iteration's times, which carries them: no collective of its own); from the sum every worker
has the exact lossless average at the sampled coordinates, hence the error the
configuration's codec left there (net of error feedback), and the mean local squared norm
the noise scale needs (fed by lossless iterations only, where the average is exact; they
sample no coordinates, which only a codec's error needs).
:class:`~autotune.tuning.efficiency.Efficiency` turns those into the iteration's
efficiency, which the leader's schedule multiplies into the trial's score.
"""

from __future__ import annotations

import time
from typing import Sequence

import torch

from autotune.runtime.data.gradstats import GradientSample, Sample
from autotune.runtime.errors import RuntimeFault
from autotune.tuning.efficiency import Efficiency

__all__ = ["EfficiencyProbe"]

class EfficiencyProbe:
    """One worker's part of the measurement (module docstring): :meth:`payload` goes into
    the session's one all-reduce of the iteration (with its times), :meth:`finish` reads
    the sum."""

    def __init__(self, params: Sequence[torch.nn.Parameter], workers: int, rank: int) -> None:
        self.params = list(params)
        self.workers = int(workers)
        self.rank = rank
        self.sample = GradientSample(sum(p.numel() for p in self.params))
        self.meter = Efficiency(self.workers)
        self._taken: Sample | None = None
        self._after_lossy = False  # the iteration before was lossy
        self.last: float | None = None  # the last iteration's efficiency
        self.seconds = 0.0  # spent measuring, sampling included (benchmarks read it)

    @property
    def noise_scale(self) -> float | None:
        """The smoothed gradient noise scale, in workers' batches."""
        return self.meter.gradient_noise.value

    @property
    def stable(self) -> bool:
        return self.meter.gradient_noise.stable

    def payload(self) -> torch.Tensor:
        """This worker's part of the iteration's all-reduce (SUM, by the session, with its
        times): the sampled local values and the local squared norm (float64)."""
        started = time.perf_counter()
        self._taken = s = self.sample.take()
        if s is None:
            raise RuntimeFault(f"rank {self.rank}: no gradient was sampled this iteration, "
                               "so the goodput measurement cannot take part in its all-reduce")
        out = torch.cat([s.local.to(torch.float64),
                         torch.tensor([s.local_sq], dtype=torch.float64)])
        self.seconds += time.perf_counter() - started
        return out

    def finish(self, summed: torch.Tensor, lossy: bool) -> float | None:
        """From the all-reduced :meth:`payload`: this iteration's efficiency (1.0 when not
        ``lossy``; None while the noise scale is not stable, or when the average was not
        seen everywhere)."""
        started = time.perf_counter()
        try:
            return self._finish(summed, lossy)
        finally:
            self.seconds += time.perf_counter() - started + self.sample.seconds
            self.sample.seconds = 0.0

    def _finish(self, summed: torch.Tensor, lossy: bool) -> float | None:
        s = self._taken
        exact = summed[:-1] / self.workers
        local_sq = float(summed[-1]) / self.workers
        if s is None or s.averaged is None:
            self.last = None
            return None
        after_lossy, self._after_lossy = self._after_lossy, lossy
        if lossy:
            error_sq = float((s.weights * (s.averaged.to(torch.float64) - exact) ** 2).sum())
            self.last = self.meter.lossy(error_sq)
        elif not after_lossy:
            self.last = self.meter.lossless(local_sq, s.averaged_sq)
        else:  # the first lossless iteration after a codec also sent what its error
            self.last = 1.0  # feedback held back: not the exact average, not a sample
        return self.last
