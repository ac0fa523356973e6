"""Statistical efficiency of a configuration, from the gradient noise scale (issue 39).

A lossless configuration averages the gradients exactly, so only its speed matters. A
codec changes what each step learns: it adds an error to the averaged gradient, and a
noisier gradient needs more steps to the same loss. This module turns that into one
number per configuration, its *statistical efficiency* relative to lossless (1 for every
lossless configuration, below 1 for a codec), so that a lossy configuration is scored by
*goodput* = throughput x efficiency (Pollux, OSDI 2021).

**The gradient noise scale** (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training", appendix A.1). In a data-parallel step each of ``N`` workers has its local
gradient ``g_i`` over ``b`` samples and the step uses their average ``g`` over ``B = N b``.
With ``|G|^2`` the squared norm of the true gradient and ``S = tr(Sigma)`` the total
per-sample variance, ``E|g_i|^2 = |G|^2 + S/b`` and ``E|g|^2 = |G|^2 + S/B``, so from the
mean of the workers' squared norms ``l = mean_i |g_i|^2`` and the average's ``a = |g|^2``:

    |G|^2 ~ (B a - b l) / (B - b)          S ~ (l - a) / (1/b - 1/B)

are unbiased. Each is smoothed by an exponential moving average (bias-corrected, as Adam's
moments; AdaptDL's ``gradient_noise_scale.py`` does the same) and ``B_noise = S / |G|^2``.

**A codec's extra noise.** Let ``E_c`` be the expected squared norm of the error a codec
leaves on the averaged gradient in one step, net of error feedback (with error feedback a
step applies ``g + r_{t-1} - r_t``: its error is the change of the residual). McCandlish's
model says the steps to a given loss grow as ``1 + B_noise / B``, where ``B_noise / B`` is
the minibatch gradient's variance relative to ``|G|^2``. A codec adds ``E_c / |G|^2`` to
that ratio, so relative to lossless

    efficiency = (1 + B_noise / B) / (1 + B_noise / B + E_c / |G|^2)

which is 1 when ``E_c = 0`` and falls as the codec's error grows against the gradient's
own signal. Pure arithmetic on a few floats per iteration: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["COLLAPSED", "DROPPED", "LOSSY_WARMUP", "Efficiency", "GradientNoiseScale", "efficiency"]

LOSSY_WARMUP = 20
"""Lossless iterations before the first lossy trial: the noise scale's estimate must be
:attr:`GradientNoiseScale.stable` before a codec can be judged (the schedule's warm-up is made at
least this long when lossy codecs are scored by goodput)."""

COLLAPSED = 0.5
"""A lossy trial whose efficiency falls below this is failed: its codec at least doubles
the steps to the same loss, whatever its speed."""

DROPPED = 0.8
"""After tuning, a kept codec whose efficiency falls below this share of what its trials
measured (or below :data:`COLLAPSED`) starts a re-tune from lossless."""


@dataclass
class _EMA:
    """An exponential moving average with Adam's bias correction."""

    beta: float
    value: float = 0.0
    weight: float = 0.0  # 1 - beta^n: how much of the average is data

    def add(self, x: float) -> None:
        self.value = self.beta * self.value + (1.0 - self.beta) * x
        self.weight = self.beta * self.weight + (1.0 - self.beta)

    def get(self) -> float | None:
        return self.value / self.weight if self.weight > 0 else None


class GradientNoiseScale:
    """The gradient noise scale of a data-parallel job, from each iteration's local and
    averaged squared gradient norms (module docstring). ``beta``: the moving averages'
    decay; ``stable_after``: updates before :attr:`stable` (the estimate is trusted)."""

    def __init__(self, beta: float = 0.95, stable_after: int = 20) -> None:
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"beta must be in [0, 1), got {beta}")
        self._g2 = _EMA(beta)  # |G|^2
        self._s = _EMA(beta)   # tr(Sigma), per sample
        self.updates = 0
        self.stable_after = int(stable_after)

    def update(self, local_sq: float, global_sq: float, local_batch: int, workers: int) -> None:
        """One iteration: ``local_sq`` the mean over workers of their local gradient's
        squared norm (``local_batch`` samples each), ``global_sq`` the squared norm of the
        average over ``workers`` workers."""
        if workers < 2:
            raise ValueError("the noise scale needs at least 2 workers (a local and an "
                             "averaged gradient over different batch sizes)")
        if local_batch < 1:
            raise ValueError(f"local_batch must be >= 1 samples, got {local_batch}")
        if not (math.isfinite(local_sq) and math.isfinite(global_sq)):
            return  # an overflowed step (AMP) says nothing about the noise
        b, big = float(local_batch), float(local_batch * workers)
        self._g2.add((big * global_sq - b * local_sq) / (big - b))
        self._s.add((local_sq - global_sq) / (1.0 / b - 1.0 / big))
        self.updates += 1

    @property
    def gradient_sq(self) -> float | None:
        """The smoothed estimate of ``|G|^2``."""
        return self._g2.get()

    @property
    def variance(self) -> float | None:
        """The smoothed estimate of ``S = tr(Sigma)``, the per-sample gradient variance."""
        return self._s.get()

    @property
    def value(self) -> float | None:
        """``B_noise = S / |G|^2`` (None before any update, or while ``|G|^2 <= 0``: the
        gradient is all noise so far, and the scale unbounded)."""
        g2, s = self.gradient_sq, self.variance
        if g2 is None or s is None or g2 <= 0:
            return None
        return max(s, 0.0) / g2

    @property
    def stable(self) -> bool:
        """Whether enough iterations were seen to trust :attr:`value`."""
        return self.updates >= self.stable_after and self.value is not None

    def efficiency(self, batch: int, codec_error_sq: float) -> float | None:
        """The statistical efficiency, relative to lossless, of a configuration whose codec
        leaves ``codec_error_sq`` (squared norm, per step, on the averaged gradient) at
        global batch ``batch``; None while the estimate is not :attr:`stable`."""
        if not self.stable:
            return None
        return efficiency(self.value, batch, codec_error_sq, self.gradient_sq)


class Efficiency:
    """Each iteration's statistical efficiency in a job of ``workers`` workers: feeds the
    noise scale (in units of one worker's batch, so ``B = workers``) and judges a lossy
    configuration by the error its codec left on the averaged gradient."""

    def __init__(self, workers: int, beta: float = 0.95,
                 stable_after: int = LOSSY_WARMUP) -> None:
        self.workers = int(workers)
        self.gradient_noise = GradientNoiseScale(beta, stable_after)

    def lossless(self, local_sq: float, global_sq: float) -> float:
        """A lossless iteration: the workers' mean local squared norm and the squared norm
        of the (exact) average feed the noise scale. Its efficiency: 1."""
        self.gradient_noise.update(local_sq, global_sq, 1, self.workers)
        return 1.0

    def lossy(self, codec_error_sq: float) -> float | None:
        """A lossy iteration: the squared norm of the error its codec left on the averaged
        gradient. Its efficiency against the noise scale of the lossless iterations (the
        exact average's norm is not known here: a sampled estimate of it, differenced
        against the local norms, would swamp the estimate); None while that is not
        :attr:`GradientNoiseScale.stable`."""
        return self.gradient_noise.efficiency(self.workers, max(0.0, codec_error_sq))


def efficiency(noise_scale: float, batch: int, codec_error_sq: float,
               gradient_sq: float) -> float:
    """``(1 + B_noise/B) / (1 + B_noise/B + E_c/|G|^2)`` (module docstring): 1 for a
    lossless configuration (``codec_error_sq == 0``), towards 0 as the codec's error
    outgrows the gradient."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1 samples, got {batch}")
    if codec_error_sq < 0 or noise_scale < 0:
        raise ValueError("the codec's error and the noise scale are squared norms (>= 0)")
    if codec_error_sq == 0:
        return 1.0
    if gradient_sq <= 0:
        return 0.0
    base = 1.0 + noise_scale / batch
    return base / (base + codec_error_sq / gradient_sq)
