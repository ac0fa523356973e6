"""One trial, from the Tuner's ask to its end: the one record of a job's trials.

A :class:`Trial` is one object all the way: the Tuner asks for it (``asked``: a
configuration, its length in training iterations, the technique that proposed it); the
trial schedule runs it (``running``: its switch iteration, the seconds of its scored
iterations and, judged by goodput, their efficiencies; the cut-short rule); the Tuner is
told its score and it ends ``scored``, ``cut`` (scored before its length, the rest given
back to the budget) or ``failed`` (no score, ``error`` says why). The Tuner's history, the
ledger's, the session's and the store's row are this record.

A trial lasts ``iterations`` training iterations. The first after a switch is not scored
(it pays for the switch); the median of the others is the trial's time
(:func:`trial_seconds`). A trial that is clearly slow ends early and gives its remaining
iterations back to the budget (:meth:`Trial.clearly_slow`): its first scored iteration
under ``cut_short`` of the best score so far, or already its switch iteration, even
allowing :data:`SWITCH_MARGIN` for the switch's cost. A confirm trial is never cut short:
it is there to be measured. Nothing here imports torch.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from autotune.tuning.confirm import CONFIRM
from autotune.tuning.lossy import UNKNOWN_EFFICIENCY, collapsed
from autotune.tuning.space import Config

ASKED, RUNNING, SCORED, CUT, FAILED = "asked", "running", "scored", "cut", "failed"

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


@dataclass(eq=False)
class Trial:
    """One trial (module docstring). Asked: ``index`` (the Tuner's number; once ended, its
    number in the run, which a session that re-tunes carries on across Tuners),
    ``config``, ``iterations`` (its length; once ended, how many of them ran),
    ``technique`` and ``trust`` (the physics prior's weight when it was asked; None
    without a prior). Ended: ``score`` (None when failed, ``error`` says why),
    ``new_best`` (the Tuner: it made its configuration the best so far), ``wall_time``,
    ``switch_s`` (its first, unscored iteration's seconds) and, scored by goodput,
    ``throughput`` (the speed alone) and ``efficiency`` (score = throughput x efficiency).
    Running: the iterations ``left``, the seconds of those scored (``times``) and their
    efficiencies. Compared by identity: one trial is one object."""

    index: int
    config: Config
    iterations: int
    technique: str
    trust: float | None = None
    state: str = ASKED
    score: float | None = None
    error: str | None = None
    new_best: bool = False
    wall_time: float = 0.0
    switch_s: float | None = None
    throughput: float | None = None
    efficiency: float | None = None
    # running (the trial schedule's)
    lossy: bool = field(default=False, repr=False)
    left: int = field(default=0, repr=False)
    times: list[float] = field(default_factory=list, repr=False)
    efficiencies: list[float] = field(default_factory=list, repr=False)
    first_efficiency: float | None = field(default=None, repr=False)
    started: float = field(default=0.0, repr=False)

    # ------------------------------------------------------------------ running
    def start(self, lossy: bool = False) -> None:
        """It begins to run (``lossy``: judged by goodput)."""
        self.state, self.lossy = RUNNING, lossy
        self.left, self.started = self.iterations, time.perf_counter()

    def step(self, switched: bool) -> bool:
        """One of its iterations ran (``switched``: under another configuration than the
        one before): whether it is the first after a switch, which pays for it."""
        self.left -= 1
        return self.left == self.iterations - 1 and switched

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
        return collapsed(self.mean_efficiency())

    def mean_efficiency(self) -> float | None:
        """Its mean efficiency so far: 1 unless lossy; the switch iteration's when no
        other was seen; None when unknown."""
        if not self.lossy:
            return 1.0
        return statistics.fmean(self.efficiencies) if self.efficiencies else self.first_efficiency

    def record(self, seconds: float, first: bool) -> None:
        """The iteration's ``seconds``: the switch's, or a scored iteration's."""
        if first:
            self.switch_s = seconds
        else:
            self.times.append(seconds)

    @property
    def used(self) -> int:
        """Iterations run so far."""
        return self.iterations - self.left

    def clearly_slow(self, speed: float, first: bool, best: float | None,
                     cut_short: float | None) -> bool:
        """Whether the iteration just run at ``speed`` (score units; ``first``: the
        unscored switch iteration) ends the trial against the ``best`` score so far
        (module docstring)."""
        if cut_short is None or best is None or self.technique == CONFIRM:
            return False
        if first:
            return speed * SWITCH_MARGIN < cut_short * best
        return len(self.times) == 1 and speed < cut_short * best

    # ------------------------------------------------------------------- ending
    def end(self, score: float | None, ran: int) -> None:
        """It ended after ``ran`` of its iterations with ``score`` (None: failed)."""
        cut = ran < self.iterations
        self.score = None if score is None else float(score)
        self.iterations, self.left = ran, 0
        self.state = FAILED if score is None else CUT if cut else SCORED
