"""The noise model: how sure the Tuner is of each configuration's score.

Scores are noisy, and the best of fifty single samples is the luckiest, not the
fastest. So every configuration's score is modelled in log space (the noise is
relative): the mean of its trials weighted by their measurements, with a standard
error ``sigma / sqrt(measurements)``. ``sigma``, the noise of one measurement, is pooled
over every configuration measured more than once (the spread of its trials around its
mean) and shrunk towards :data:`NOISE_PRIOR` while few are (:meth:`NoiseModel.sigma`).

The Tuner keeps the configuration with the highest *lower confidence bound*
(mean - :data:`Z` standard errors, :meth:`NoiseModel.by_bound`), so one measured once
must beat a well-measured one by more than the noise; the confirm phase
(:mod:`autotune.tuning.confirm`) reads the same model. Only positive scores enter it.
Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.tuning.search.base import Key

NOISE_PRIOR = 0.05  # relative noise of one measurement assumed before any is repeated
NOISE_PRIOR_WEIGHT = 2.0  # ... worth this many degrees of freedom of measured noise
Z = 1.0  # standard errors in the lower bound that chooses the kept configuration


@dataclass
class LogScores:
    """One configuration's measurements in log space: weighted sums for mean and spread."""

    weight: float = 0.0
    total: float = 0.0  # sum of weight * log(score)
    total_sq: float = 0.0  # sum of weight * log(score)^2
    count: int = 0  # trials
    measured: int = 0  # measurements (a trial scored on its switch alone adds none)

    def add(self, score: float, weight: float, measured: int) -> None:
        y = math.log(score)
        self.measured += measured
        self.weight += weight
        self.total += weight * y
        self.total_sq += weight * y * y
        self.count += 1

    @property
    def mean(self) -> float:
        return self.total / self.weight

    @property
    def squares(self) -> float:
        """Weighted sum of squared deviations from the mean: ``(count - 1) sigma^2`` in
        expectation when a trial's variance is ``sigma^2 / weight``."""
        return max(0.0, self.total_sq - self.total * self.total / self.weight)


class NoiseModel:
    """The log scores of every configuration with a positive score (module docstring)."""

    def __init__(self) -> None:
        self.logs: dict[Key, LogScores] = {}

    def add(self, key: Key, score: float, weight: float, measured: int) -> None:
        """A trial of ``key`` scored ``score`` (positive), weighing ``weight``, resting on
        ``measured`` measurements."""
        self.logs.setdefault(key, LogScores()).add(float(score), weight, measured)

    def __bool__(self) -> bool:
        return bool(self.logs)

    def get(self, key: Key) -> LogScores | None:
        return self.logs.get(key)

    def sigma(self) -> float:
        """The relative noise of one measurement (standard deviation of a log score): the
        pooled spread of repeated configurations, shrunk towards :data:`NOISE_PRIOR`."""
        squares = sum(ls.squares for ls in self.logs.values())
        dof = sum(ls.count - 1 for ls in self.logs.values())
        var = (squares + NOISE_PRIOR_WEIGHT * NOISE_PRIOR ** 2) / (dof + NOISE_PRIOR_WEIGHT)
        return math.sqrt(var)

    def bounds(self, key: Key) -> tuple[float, float, float] | None:
        """``(lower, mean, upper)`` of ``key``'s score (:data:`Z` standard errors of the
        log mean), or ``None`` when it has no positive score."""
        ls = self.logs.get(key)
        if ls is None:
            return None
        half = Z * self.sigma() / math.sqrt(ls.weight)
        return math.exp(ls.mean - half), math.exp(ls.mean), math.exp(ls.mean + half)

    def measurements(self, key: Key) -> int:
        """How many measurements ``key``'s score rests on (0: none)."""
        ls = self.logs.get(key)
        return 0 if ls is None else ls.measured

    def by_bound(self) -> list[Key]:
        """Configurations with positive scores, highest lower bound first (ties: first
        told first)."""
        half = Z * self.sigma()
        return sorted(self.logs, key=lambda k: -(self.logs[k].mean
                                                  - half / math.sqrt(self.logs[k].weight)))

    def upper(self, key: Key, z: float, sigma: float) -> float:
        """``key``'s log mean plus ``z`` standard errors of one measurement's ``sigma``."""
        return self.logs[key].mean + z * sigma / math.sqrt(self.logs[key].weight)

    def lower(self, key: Key, z: float, sigma: float) -> float:
        """``key``'s log mean minus ``z`` standard errors of one measurement's ``sigma``."""
        return self.logs[key].mean - z * sigma / math.sqrt(self.logs[key].weight)
