"""What the tuner learns from a running job: its space and its physics prior.

The space comes from the runtime's :class:`~autotune.runtime.config.Limits` (servers
launched, workers per machine, stream groups, transports; after a server loss what is
left), the topology probe's reduce-root candidates and the user's pins. The physics prior
is the simulator on the job's gradients, world and device, at the network rate its
warm-up iterations imply (:func:`autotune.sim.predict.job_prior`).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping, Sequence

from autotune.tuning.space import Config, ConfigError, SearchSpace


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


def link_estimate(rt: Any, warmup_times: Sequence[float], probe_times: Sequence[float],
                  grad_bytes: int) -> dict[str, float]:
    """The link rates the warm-up iterations imply (:func:`autotune.sim.predict.warmup_link`:
    the NIC rate and, if several streams ran much faster than one, the per-flow cap);
    ``{}`` (the simulator's defaults) on one machine."""
    from autotune.sim.predict import warmup_link

    if rt.info.n_machines < 2:
        return {}
    return warmup_link(list(warmup_times), list(probe_times), grad_bytes,
                       len(rt.info.workers))


def job_prior(rt: Any, sizes: Sequence[int], *, cuda: bool, samples_per_step: int | None,
              link: Callable[[], dict[str, float]]) -> Callable[[list[Config]], Any] | None:
    """The simulator on what this job knows: ``sizes`` (bytes of each gradient in ready
    order), the world, the device, and the network rate ``link()`` gives (called at the
    first prediction, which comes after the warm-up). ``None`` without gradients."""
    from autotune.sim.predict import job_prior as simulated

    if not sizes:
        return None
    info = rt.info
    made: list = []

    def predict(configs: list[Config]) -> Any:
        if not made:
            made.append(simulated(list(sizes), machines=info.n_machines,
                                  workers_per_machine=info.workers_per_machine,
                                  servers=len(info.servers), device="gpu" if cuda else "cpu",
                                  batch_per_worker=samples_per_step or 1, **link()))
        return made[0](configs)
    return predict
