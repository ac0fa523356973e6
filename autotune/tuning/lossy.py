"""The goodput guards of the trial schedule: scoring lossy configurations (issue 39).

With lossy codecs allowed and scored by goodput, the caller passes each iteration's
statistical efficiency (:mod:`autotune.tuning.efficiency`; 1 for a lossless
configuration). A lossy trial's score is then its throughput times its mean
efficiency (:meth:`Goodput.trial_gain`), and three guards apply:

* the warm-up lasts at least :data:`~autotune.tuning.efficiency.LOSSY_WARMUP`
  lossless iterations (the schedule's), and a lossy trial whose efficiency is still
  unknown fails (:data:`UNKNOWN_EFFICIENCY`);
* a lossy trial whose mean efficiency falls below
  :data:`~autotune.tuning.efficiency.COLLAPSED` fails at once (:meth:`Goodput.judged`);
* after tuning, a kept codec whose efficiency (the mean of a window) falls below
  :data:`~autotune.tuning.efficiency.DROPPED` of what its trials measured, or below
  ``COLLAPSED``, is dropped (:meth:`Goodput.kept_dropped`): the schedule re-tunes from
  the best lossless configuration (:func:`best_lossless`).

Nothing here imports torch.
"""

from __future__ import annotations

import statistics
from typing import Sequence

from autotune.tuning.efficiency import COLLAPSED, DROPPED
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.tuner import TrialRecord

UNKNOWN_EFFICIENCY = ("its statistical efficiency is unknown: the gradient noise scale is not "
                      "stable yet, so a lossy codec cannot be judged")

#: Iterations of a kept codec's efficiency averaged before it is judged (without a drift
#: watch; with one, its ``window``).
EFFICIENCY_WINDOW = 20


class Goodput:
    """The efficiencies of the trial under way and of the kept codec (module docstring);
    ``enabled`` False: every configuration is lossless to it."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.trial_efficiency: dict[tuple, float] = {}  # the mean of each lossy trial's
        self._efficiencies: list[float] = []  # the trial's (scored iterations)
        self._first_gain: float | None = None  # its switch iteration's
        self._kept: list[float] = []  # a window of the kept codec's

    def lossy(self, config: Config) -> bool:
        """Whether ``config`` is judged by its efficiency: a codec, scored by goodput."""
        return self.enabled and config.get("compression", "none") != "none"

    def gain(self, config: Config, efficiency: float | None) -> float | None:
        """What a score of ``config``'s iteration is multiplied by: 1 unless it is
        :meth:`lossy`; then its efficiency (None while unknown)."""
        if not self.lossy(config):
            return 1.0
        return efficiency

    def start_trial(self) -> None:
        self._efficiencies = []
        self._first_gain = None

    def judged(self, config: Config, gain: float | None, first: bool) -> str | None:
        """An iteration of a lossy trial of ``config``: why the trial fails (its
        efficiency unknown, or collapsed), or None. The ``first`` iteration after a switch
        also delivers what the previous codec's error feedback held back, which is not
        this codec's error: it only scores a trial that ends before another is seen (cut
        short for its speed), and never fails one."""
        if first:
            self._first_gain = gain
            return None
        if gain is None:
            return UNKNOWN_EFFICIENCY
        self._efficiencies.append(gain)
        mean = self.trial_gain(config)
        if mean is None or mean >= COLLAPSED:
            return None
        return (f"statistical efficiency {mean:.2f} < {COLLAPSED}: the codec's error on the "
                f"averaged gradient would cost more steps to the same loss than its speed "
                f"saves (goodput, docs/compression.md)")

    def trial_gain(self, config: Config) -> float | None:
        """The trial's (of ``config``) mean efficiency so far: 1 unless lossy; the switch
        iteration's when no other was seen; None when unknown."""
        if not self.lossy(config):
            return 1.0
        if self._efficiencies:
            return statistics.fmean(self._efficiencies)
        return self._first_gain

    def finish_trial(self, space: SearchSpace, config: Config,
                     score: float | None) -> float | None:
        """The trial of ``config`` ends with ``score`` (None: failed): its mean efficiency
        if it is lossy (None otherwise), remembered for the kept codec's watch if scored."""
        efficiency = self.trial_gain(config) if self.lossy(config) else None
        if efficiency is not None and score is not None:
            self.trial_efficiency[space.key(config)] = efficiency
        return efficiency

    def reset_kept(self) -> None:
        """A new configuration is kept: its window starts afresh."""
        self._kept = []

    def kept_dropped(self, space: SearchSpace, config: Config, efficiency: float | None,
                     window: int) -> tuple[float, float] | None:
        """After tuning, one iteration of the kept ``config``: ``(what its trials
        measured, the window's mean)`` when a kept codec's efficiency dropped, else None."""
        if not self.lossy(config) or efficiency is None:
            return None
        self._kept.append(efficiency)
        if len(self._kept) < window:
            return None
        now = statistics.fmean(self._kept)
        self._kept = []
        measured = self.trial_efficiency.get(space.key(config), 1.0)
        if now >= max(COLLAPSED, DROPPED * measured):
            return None
        return measured, now


def best_lossless(history: Sequence[TrialRecord], space: SearchSpace) -> Config:
    """The best-scored lossless configuration of the trials so far, else the default."""
    scored = [r for r in history
              if r.score is not None and r.config.get("compression", "none") == "none"]
    if not scored:
        return space.default()
    return dict(max(scored, key=lambda r: r.score).config)
