"""A simulated job as a tuning objective: config -> noisy throughput, for offline tuning.

The Tuner (or any searcher) calls ``objective(config, iterations)`` and maximises the
result, exactly as it would with throughput measured on a real cluster. Noise is
multiplicative and Gaussian with relative deviation ``noise / sqrt(iterations)`` (a
longer trial averages more steps), drawn from a seeded generator, so runs repeat.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any, Mapping

from .cluster import ClusterSpec
from .job import Job
from .model import IterationEstimate, simulate


class SimulatedObjective:
    """``__call__(config, iterations=1) -> samples/s`` of ``job`` on ``cluster``, noisy.

    ``true(config)`` is the noise-free value, ``estimate(config)`` the full
    :class:`IterationEstimate`; ``space`` is the cluster's search space (lossy codecs
    included when ``allow_lossy``); ``calls`` counts evaluations.
    """

    def __init__(self, job: Job, cluster: ClusterSpec, noise: float = 0.03, seed: int = 0,
                 allow_lossy: bool = False, fixed: Mapping[str, Any] | None = None) -> None:
        if not 0.0 <= noise < 1.0:
            raise ValueError(f"noise must be in [0, 1), got {noise}")
        self.job = job
        self.cluster = cluster
        self.noise = float(noise)
        self.rng = random.Random(seed)
        self.space = cluster.space(allow_lossy=allow_lossy, fixed=fixed)
        self.calls = 0
        self._cache: dict[str, IterationEstimate] = {}

    def estimate(self, config: Mapping[str, Any]) -> IterationEstimate:
        key = json.dumps(dict(config), sort_keys=True, default=str)
        est = self._cache.get(key)
        if est is None:
            est = simulate(self.job, self.cluster, config)
            self._cache[key] = est
        return est

    def true(self, config: Mapping[str, Any]) -> float:
        return self.estimate(config).throughput

    def __call__(self, config: Mapping[str, Any], iterations: int = 1) -> float:
        self.calls += 1
        value = self.true(config)
        sd = self.noise / math.sqrt(max(int(iterations), 1))
        return value * max(0.05, 1.0 + self.rng.gauss(0.0, sd)) if sd else value

    def samples(self, config: Mapping[str, Any], iterations: int) -> list[float]:
        """``iterations`` noisy per-iteration throughputs of ``config`` (each with the
        relative deviation ``noise``): what a session measures iteration by iteration."""
        self.calls += 1
        value = self.true(config)
        return [value * max(0.05, 1.0 + self.rng.gauss(0.0, self.noise)) if self.noise else value
                for _ in range(max(int(iterations), 1))]

    def best(self, configs: list[Mapping[str, Any]] | None = None) -> tuple[dict[str, Any], float]:
        """The best configuration (noise-free) among ``configs`` (default: the whole
        space, if it is small enough to enumerate) and its throughput."""
        pool = configs if configs is not None else list(self.space.all_configs())
        best = max(pool, key=self.true)
        return dict(best), self.true(best)
