"""The simulator as the Tuner's physics prior (:mod:`autotune.tuning.prior`).

:func:`prior` turns a :class:`Job` on a :class:`ClusterSpec` into ``predict(configs) ->
throughputs``; a configuration the model cannot run predicts 0 (the surrogate treats it
as very slow). :func:`job_prior` builds one from what a training session knows before
its first trial: the gradients' sizes in ready order, the world (machines, workers per
machine, servers) and whether the workers are CPU processes or GPUs. Link rates it has
not measured are the :class:`ClusterSpec` defaults; the Tuner's calibration absorbs a wrong
scale, and its GP corrects the rest from the trials.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from autotune.errors import AutotuneError

from .calibration import FIT_WORK, Calibration, Observation, fit
from .cluster import ClusterSpec
from .job import Job
from .model import simulate, work


class ModelPrior:
    """The simulator on one job, as the Tuner's prior: ``prior(configs)`` predicts each
    configuration's score (``batch_per_worker`` samples per step time, the unit of a
    session's scores; a configuration the model cannot run predicts 0, which the
    surrogate treats as very slow), with the constants of :attr:`calibration` in force.

    :meth:`fit` refits those constants to measured scores
    (:func:`autotune.sim.calibration.fit`), so the prior learns the machine from the
    trials; :attr:`fit_error` is the root mean square log error it left. Predictions are
    cached until the constants change. :attr:`work` counts what the predictions made so
    far cost, in the simulator's machine-independent units (:func:`autotune.sim.model.
    work`): the budget the surrogate spends on them."""

    def __init__(self, job: Job, cluster: ClusterSpec, calibration: Calibration | None = None):
        self.base_job, self.base_cluster = job, cluster
        self.calibration = calibration or Calibration()
        self.started_from = self.calibration  # what it knew before any trial
        self.fit_error: float | None = None
        self.fits = 0
        self.work = 0.0
        self._use(self.calibration)

    def _use(self, calibration: Calibration) -> None:
        self.calibration = calibration
        self.job, self.cluster = calibration.apply(self.base_job, self.base_cluster)
        self._cache: dict[tuple, float] = {}

    def step_s(self, config: Mapping[str, Any]) -> float:
        """The predicted step time of ``config`` (inf when the model cannot run it)."""
        key = tuple(sorted(config.items()))
        hit = self._cache.get(key)
        if hit is None:
            try:
                estimate = simulate(self.job, self.cluster, config)
            except AutotuneError:
                estimate = None
            self.work += work(estimate)
            hit = math.inf if estimate is None else estimate.step_s
            self._cache[key] = hit
        return hit

    def __call__(self, configs: Sequence[Mapping[str, Any]]) -> list[float]:
        batch = self.base_job.batch_per_worker
        out = []
        for c in configs:
            step = self.step_s(c)
            out.append(batch / step if 0 < step < math.inf else (math.inf if step == 0 else 0.0))
        return out

    def fit(self, measured: Sequence[tuple[Mapping[str, Any], float, int]], *,
            budget: float = FIT_WORK) -> bool:
        """Refit the constants to ``measured`` ``(config, mean score, iterations)``, within
        ``budget`` work units of simulation; whether the predictions changed."""
        batch = self.base_job.batch_per_worker
        obs = [Observation(dict(c), batch / score, n) for c, score, n in measured
               if score and score > 0 and math.isfinite(score)]
        fitted, rms = fit(self.base_job, self.base_cluster, self.calibration, obs,
                          budget=budget)
        if fitted is self.calibration:
            return False
        self.fits += 1
        self.fit_error = rms
        self._use(fitted)
        return True


def prior(job: Job, cluster: ClusterSpec, calibration: Calibration | None = None) -> ModelPrior:
    """``predict(configs)``: the simulated score of each configuration (:class:`ModelPrior`)."""
    return ModelPrior(job, cluster, calibration)


def job_prior(grad_bytes: Sequence[int], *, machines: int, workers_per_machine: int,
              servers: int, device: str = "cpu", batch_per_worker: int = 1,
              calibration: Calibration | None = None, **cluster: Any) -> ModelPrior:
    """The prior of a live job: its gradients (bytes, in ready order) on a cluster of
    ``machines`` x ``workers_per_machine`` with ``servers`` Summation Service machines.
    ``device``: ``"cpu"`` (worker processes) or ``"gpu"``; ``calibration``: the measured,
    stored or fitted constants (they take precedence over the defaults); ``cluster``: any
    other :class:`ClusterSpec` field that is known (e.g. a measured ``nic_gbps``), applied
    over the calibration."""
    job = Job(tuple(int(b) for b in grad_bytes if b > 0) or (4,), compute_s=0.0,
              batch_per_worker=batch_per_worker)
    c = ClusterSpec(machines=machines, workers_per_machine=workers_per_machine,
                server_machines=servers, worker_device=device)
    calibration = (calibration or Calibration()).updated(cluster, source="warm-up")
    return ModelPrior(job, c, calibration)


#: a warm-up iteration with several streams this much faster than one stream means
#: each TCP flow is capped below the NIC rate (the cloud case of AIACC-Training)
FLOW_CAP_SPEEDUP = 1.5


def warmup_link(one_stream_s: Sequence[float], many_streams_s: Sequence[float],
                grad_bytes: int, workers: int) -> dict[str, float]:
    """The link rates a session's warm-up implies, as :class:`ClusterSpec` fields.

    ``one_stream_s``: the times of warm-up iterations under the default (one ring
    all-reduce stream, ``2(W-1)/W`` of the gradient bytes through each NIC);
    ``many_streams_s``: those of the warm-up iterations with several streams, if any.
    Each time is taken as all communication, so every rate is a lower bound; the fastest
    iteration of each kind counts (a busy CPU, or the first iteration's connections, only
    ever slow one down). When several streams ran :data:`FLOW_CAP_SPEEDUP` times faster
    than one, one flow is capped: ``per_flow_gbps`` is the one-stream rate and
    ``nic_gbps`` the several-stream one; otherwise ``nic_gbps`` is the faster of the two.
    ``{}`` without a time."""
    def gbps(times: Sequence[float]) -> float | None:
        ts = [t for t in times if 0 < t < float("inf")]
        if not ts or workers < 2:
            return None
        return 8 * 2 * (workers - 1) / workers * grad_bytes / min(ts) / 1e9

    def clip(rate: float) -> float:  # what the simulator takes as a NIC
        return min(max(rate, 0.01), 400.0)

    one, many = gbps(one_stream_s), gbps(many_streams_s)
    if one is None and many is None:
        return {}
    if one is not None and many is not None and many >= FLOW_CAP_SPEEDUP * one:
        return {"nic_gbps": clip(many), "per_flow_gbps": clip(one)}
    return {"nic_gbps": clip(max(r for r in (one, many) if r is not None))}
