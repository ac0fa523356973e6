"""What the tuner learns from a running job: its space and its physics prior.

The space (:func:`job_space`) comes from the runtime's :class:`~autotune.runtime.config.Limits` (servers
launched, workers per machine, stream groups, transports; after a server loss what is
left), the topology probe's reduce-root candidates and the user's pins. The physics prior
is the simulator on the job's gradients, world and device, with its machines' constants
measured, stored and fitted (:class:`JobTuners`, which makes each Tuner;
:mod:`autotune.leader.calibrate`).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping, Sequence

from autotune.runtime.config import ConfigError
from autotune.schedule.schedule import REFERENCE_ITERATIONS
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.tuner import Tuner

#: The share of its budget a live job's Tuner may race its last candidates past it, while
#: each is proven faster than the default (:mod:`autotune.tuning.confirm`, overtime).
OVERTIME = 1.0


def job_space(rt: Any, *, allow_lossy: bool, fixed: Mapping[str, Any] | None) -> SearchSpace:
    """The space this job's runtime ``rt`` can run, with the user's pins. After a server
    loss a pin that can no longer run is dropped, with a warning (at the start it is a
    :class:`ConfigError`: the user asked for something this job cannot do)."""
    info = rt.info
    if rt.lost_servers:
        limits = rt.limits.after_server_loss()
        try:
            return SearchSpace.of(limits, allow_lossy=allow_lossy, fixed=fixed)
        except ConfigError as exc:
            warnings.warn(f"after the server loss the pinned knobs cannot all run ({exc}); "
                          "tuning without the pins")
            return SearchSpace.of(limits, allow_lossy=allow_lossy)
    roots = None
    if info.workers_per_machine > 1:
        try:
            from autotune.probes import local_facts

            cands = [r for r in local_facts().root_candidates if r < info.workers_per_machine]
            roots = cands or None
        except Exception as exc:  # probes are advisory; a bad sysfs must not stop training
            warnings.warn(f"topology probe failed, all local workers are root candidates: {exc}")
    return SearchSpace.of(rt.limits, root_candidates=roots, allow_lossy=allow_lossy,
                          fixed=fixed)


class JobTuners:
    """Makes the Tuner of each (re-)tune of a live job in the world ``info`` (the
    schedule's ``new_tuner``, which passes it what it needs as values; it holds nothing of
    the schedule): over the space it is given, the default as its reference (its first trial long
    enough for a speed-up over it, :data:`~autotune.schedule.schedule.REFERENCE_ITERATIONS`;
    then measured as long as the kept configuration), its race allowed ``overtime`` (a
    share of the budget, :data:`OVERTIME`) past the budget among candidates proven faster
    than the default, and, with ``prior``, the simulator on what this job knows as
    its physics prior (:attr:`model`, one for every tune, so what it fits carries over):
    its gradients (``params`` in ready order: reverse registration), world and device,
    and its machines' constants (:meth:`starting_calibration`)."""

    def __init__(self, info: Any, params: Sequence[Any], *, techniques: Sequence[str],
                 trial_iterations: int | None, samples_per_step: int | None, prior: bool,
                 link: Mapping[str, float] | None = None, stored: Any = None,
                 overtime: float = OVERTIME):
        self.info = info
        self.overtime = overtime  # the race's share past the budget (0: none)
        self.sizes = [p.numel() * p.element_size() for p in reversed(list(params))]
        self.device = params[0].device if params else None
        self.cuda = bool(params) and params[0].is_cuda
        self.techniques = tuple(techniques)
        self.trial_iterations = trial_iterations
        self.samples_per_step = samples_per_step
        self.prior = prior
        self.measured_link = dict(link or {})  # autotune.leader.calibrate.measure_link
        self.stored = stored  # a Calibration stored for alike machines, or None
        # what the latest tune was given: its space and the warm-up's times
        self._space: Any = None
        self._warmup: tuple[list, list] = ([], [])
        self._prior = _Lazy(self._make_model)  # one for every tune: what it fits carries over

    def __call__(self, budget: int, seed: int, warm: list[Config], space: SearchSpace,
                 warmup: tuple[list, list]) -> Tuner:
        self._space, self._warmup = space, warmup
        extra = {"trial_iterations": self.trial_iterations} if self.trial_iterations else {}
        return Tuner(space, budget=budget, techniques=self.techniques, seed=seed,
                     warm_start=warm, reference=space.default(),
                     reference_iterations=REFERENCE_ITERATIONS, overtime=self.overtime,
                     prior=self._prior if self.prior and self.sizes else None, **extra)

    def link(self, times: list, probe_times: list) -> dict[str, float]:
        """The link rates the warm-up's ``times`` (the default's, the several-stream
        probe's) imply (:func:`autotune.sim.predict.warmup_link`: the NIC rate and, if
        several streams ran much faster than one, the per-flow cap); ``{}`` (the
        simulator's defaults) on one machine."""
        from autotune.sim.predict import warmup_link

        if self.info.n_machines < 2:
            return {}
        return warmup_link(list(times), list(probe_times), sum(self.sizes),
                           len(self.info.workers))

    def capped(self, times: list, probe_times: list) -> bool:
        """Whether the warm-up's times show a per-flow cap (the schedule's ``capped``)."""
        return "per_flow_gbps" in self.link(times, probe_times)

    def starting_calibration(self) -> Any:
        """The constants the prior starts from: those stored for alike machines, then
        (unless stored ones had them) this machine's summation, copy and codec rates at
        the default chunk size, then the link as measured at the start and as the warm-up
        showed it (:mod:`autotune.leader.calibrate`)."""
        from autotune.leader.calibrate import host_calibration, link_calibration, merged
        from autotune.sim.calibration import Calibration

        stored = self.stored.restamped("stored") if self.stored is not None else Calibration()
        host = Calibration()
        if "cpu_sum_gbps" not in stored.constants:
            host = host_calibration(self._space, gradient_bytes=sum(self.sizes),
                                    device=self.device)
        return merged(stored, host, link_calibration(self.measured_link,
                                                     self.link(*self._warmup)))

    def _make_model(self) -> Any:
        """The job's :class:`~autotune.sim.predict.ModelPrior` (at its first use: after
        the warm-up, whose times show the link)."""
        from autotune.sim.predict import job_prior

        info = self.info
        return job_prior(self.sizes, machines=info.n_machines,
                         workers_per_machine=info.workers_per_machine,
                         servers=len(info.servers), device="gpu" if self.cuda else "cpu",
                         batch_per_worker=self.samples_per_step or 1,
                         calibration=self.starting_calibration())

    @property
    def model(self) -> Any:
        """The prior's model, once made (None before its first prediction)."""
        return self._prior.model


class _Lazy:
    """A prior made at its first use: predicts, and refits (``fit``), through it."""

    def __init__(self, make: Callable[[], Any]):
        self._make = make
        self.model: Any = None

    def _get(self) -> Any:
        if self.model is None:
            self.model = self._make()
        return self.model

    def __call__(self, configs: list[Config]) -> Any:
        return self._get()(configs)

    def fit(self, measured: list) -> bool:
        return self._get().fit(measured)
