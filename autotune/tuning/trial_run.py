"""One trial under way in the trial schedule: its iterations, and when it may stop early.

A trial lasts ``trial.iterations`` training iterations. The first after a switch is not
scored (it pays for the switch); the median of the others is the trial's time
(:func:`trial_seconds`). A trial that is clearly slow ends early and gives its
remaining iterations back to the budget (:meth:`TrialRun.clearly_slow`): its first
scored iteration under ``cut_short`` of the best score so far, or already its switch
iteration, even allowing :data:`SWITCH_MARGIN` for the switch's cost. A confirm trial
is never cut short: it is there to be measured. Nothing here imports torch.
"""

from __future__ import annotations

import statistics
import time

from autotune.tuning.confirm import CONFIRM
from autotune.tuning.lossy import UNKNOWN_EFFICIENCY, collapsed
from autotune.tuning.tuner import Trial

#: How much slower than the configuration's steady iterations its first one (the switch:
#: new buffers, first use of stream groups) may be. A trial whose switch iteration is
#: under ``cut_short`` of the best even when divided by this stops there. Measured on 22
#: trials of a loopback session (2 workers + 1 server, docs/tuner.md): the switch
#: iteration took 0.77-1.43x a steady one (median 1.07, 90th percentile 1.30).
SWITCH_MARGIN = 2.0


def trial_seconds(scored: list[float], switch_s: float, cut: bool) -> float:
    """The time per iteration a trial is scored with: the median of its ``scored``
    iterations; with none, its switch iteration ``switch_s``, divided by
    :data:`SWITCH_MARGIN` if the trial was ``cut`` there as clearly slow (at best that much
    faster: it stays slow), as it is if the trial had no other iteration (the end of the
    budget: counted with the switch's cost rather than credited with an optimistic bound)."""
    if scored:
        return statistics.median(scored)
    return switch_s / SWITCH_MARGIN if cut else switch_s


def throughput(samples_per_step: int | None, seconds: float) -> float:
    """An iteration's score: ``samples_per_step`` samples (1 when None) per ``seconds``."""
    return (samples_per_step or 1) / max(seconds, 1e-9)


def unit_of(samples_per_step: int | None) -> str:
    """What :func:`throughput` counts: ``samples/s`` with ``samples_per_step``, else
    ``it/s``."""
    return "samples/s" if samples_per_step else "it/s"


class TrialRun:
    """The trial under way: its iterations left, the seconds of those scored, its
    unscored switch iteration's, when it started and, judged by goodput
    (``lossy``), its iterations' efficiencies."""

    def __init__(self, trial: Trial, lossy: bool = False) -> None:
        self.trial = trial
        self.lossy = lossy
        self.left = trial.iterations
        self.times: list[float] = []  # its scored iterations' seconds
        self.switch_s: float | None = None  # its switch iteration's, unscored
        self.started = time.perf_counter()
        self.efficiencies: list[float] = []  # its scored iterations' efficiencies (lossy)
        self.first_efficiency: float | None = None  # its switch iteration's

    def judged(self, efficiency: float | None, first: bool) -> str | None:
        """A lossy trial's iteration of this ``efficiency``: why the trial fails (its
        efficiency unknown, or collapsed), or None. The ``first`` iteration after a switch
        also delivers what the previous codec's error feedback held back, which is not
        this codec's error: it only scores a trial that ends before another is seen (cut
        short for its speed), and never fails one."""
        if first:
            self.first_efficiency = efficiency
            return None
        if efficiency is None:
            return UNKNOWN_EFFICIENCY
        self.efficiencies.append(efficiency)
        return collapsed(self.efficiency)

    @property
    def efficiency(self) -> float | None:
        """The trial's mean efficiency so far: 1 unless lossy; the switch iteration's when
        no other was seen; None when unknown."""
        if not self.lossy:
            return 1.0
        return statistics.fmean(self.efficiencies) if self.efficiencies else self.first_efficiency

    def step(self, switched: bool) -> bool:
        """One of its iterations ran (``switched``: under another configuration than the
        one before): whether it is the first after a switch, which pays for it."""
        self.left -= 1
        return self.left == self.trial.iterations - 1 and switched

    def record(self, seconds: float, first: bool) -> None:
        """The iteration's ``seconds``: the switch's, or a scored iteration's."""
        if first:
            self.switch_s = seconds
        else:
            self.times.append(seconds)

    @property
    def used(self) -> int:
        """Iterations run so far."""
        return self.trial.iterations - self.left

    def clearly_slow(self, speed: float, first: bool, best: float | None,
                     cut_short: float | None) -> bool:
        """Whether the iteration just run at ``speed`` (score units; ``first``: the
        unscored switch iteration) ends the trial against the ``best`` score so far
        (module docstring)."""
        if cut_short is None or best is None or self.trial.technique == CONFIRM:
            return False
        if first:
            return speed * SWITCH_MARGIN < cut_short * best
        return len(self.times) == 1 and speed < cut_short * best
