"""What a session measures of each iteration, on every worker, in one all-reduce.

Each measured iteration every worker puts its wall time of the iteration (a failure is
infinity) and how long it waited for the averaged gradients (the communication the
configuration left exposed) in a slot of its own, with the training loss the loop passed
to ``session.step(loss=...)`` (NaN where none), the leader adds how many iterations its
trial schedule needs no measurement of next, and, where lossy codecs are scored by
goodput, every worker adds its sample of the gradient
(:class:`~autotune.sessions.efficiency_probe.EfficiencyProbe`): one float64 all-reduce
(SUM) over the workers carries it all (:meth:`IterationMeter.reduce`). At the start,
:meth:`IterationMeter.start` makes the probe and times the link for the leader's prior
(:func:`~autotune.leader.calibrate.measure_link`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from autotune.leader.calibrate import measure_link
from autotune.options import SessionOptions
from autotune.sessions.efficiency_probe import EfficiencyProbe


class IterationMeter:
    """One worker's part of measuring the iterations (module docstring); the all-reduce is
    ``hooked.worker_sum`` (:class:`~autotune.sessions.hooked.HookedDDP`), over the workers
    of ``info`` (the world)."""

    def __init__(self, hooked: Any) -> None:
        self.hooked = hooked
        self.info: Any = None
        # allow_lossy scored by goodput, with several workers: made by start()
        self.probe: EfficiencyProbe | None = None
        self.link: dict[str, float] = {}  # the link as timed at the start

    def start(self, options: SessionOptions, info: Any,
              params: Sequence[torch.nn.Parameter]) -> None:
        """On every worker, before the leader leads: measure efficiency if it is scored;
        time the link for the leader's prior if it will tune with one."""
        self.info = info
        workers = len(info.workers)
        if options.goodput and workers > 1:
            self.probe = EfficiencyProbe(params, workers, info.rank)
            self.probe.sample.begin(0)
        if options.prior and options.budget and workers > 1 and info.n_machines > 1:
            self.link = measure_link(self.hooked.worker_sum, workers=workers)

    def reduce(self, elapsed: float, waited: float | None, quiet_for: float, lossy: bool,
               loss: float | None = None
               ) -> tuple[float, float | None, float | None, float, float | None]:
        """Collective over the workers, one all-reduce (SUM) an iteration: the slowest
        worker's time (a failure anywhere is infinity), the least any worker waited for
        the averaged gradients (None after a failure), when scored by goodput the
        iteration's statistical efficiency (else None), and ``quiet_for`` as the leader
        gave it (every other rank gives 0): how many iterations after this one its
        schedule needs no measurement of (``inf``: settled), and the mean over the workers
        of ``loss`` (None where a worker passed none, or a loss that is not finite).
        ``lossy``: the configuration in force runs a codec."""
        n = len(self.info.workers)
        me = self.info.workers.index(self.info.rank)
        probe = self.probe
        extra = probe.payload() if probe is not None else torch.zeros(0, dtype=torch.float64)
        t = torch.zeros(2 * n + 2 + len(extra), dtype=torch.float64)
        t[me], t[n + me] = elapsed, waited if waited is not None else math.nan
        t[2 * n] = quiet_for
        t[2 * n + 1] = loss if loss is not None else math.nan
        t[2 * n + 2:] = extra
        self.hooked.worker_sum(t)
        slowest, least = float(t[:n].max()), float(t[n:2 * n].min())
        mean_loss = float(t[2 * n + 1]) / n
        efficiency = probe.finish(t[2 * n + 2:], lossy) if probe is not None else None
        return (slowest, None if math.isnan(least) else least, efficiency, float(t[2 * n]),
                mean_loss if math.isfinite(mean_loss) else None)

    def begin(self, iteration: int, lossy: bool) -> None:
        """The next iteration starts: the probe samples its gradient (its coordinates only
        where a codec's error is)."""
        if self.probe is not None:
            self.probe.sample.begin(iteration, coordinates=lossy)
