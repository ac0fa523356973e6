"""The drift watch: after tuning, has the job changed enough to tune again?

The first ``window`` iterations under the kept configuration are its baseline: their
median iteration time and median communication time. After that, each ``window``'s
median communication time is compared with the baseline's; when it moved by more than
``threshold`` of the baseline *iteration* time, up (a slower link, a new per-flow cap)
or down (a faster link, a cap lifted), :meth:`DriftWatch.moved` says so and the trial
schedule (:mod:`autotune.schedule.schedule`) starts a re-tune of ``budget`` iterations.
The communication time is what a configuration can change, so a slower compute step
alone starts none (where the caller does not measure it, the iteration time is judged).
Nothing here imports torch.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

#: a window's medians: (iteration seconds, communication seconds)
Medians = tuple[float, float]


@dataclass(frozen=True)
class Drift:
    """Re-tune for ``budget`` iterations when the median communication time of ``window``
    iterations under the kept configuration moves, up or down, by more than ``threshold``
    (a fraction) of the baseline's iteration time (the first ``window`` after locking)."""

    threshold: float
    window: int
    budget: int


class DriftWatch:
    """The windows of one kept configuration, judged against its baseline."""

    def __init__(self, drift: Drift) -> None:
        self.drift = drift
        self.baseline: Medians | None = None  # the kept configuration's, once measured
        self._window: list[Medians] = []

    def reset(self) -> None:
        """A new configuration is kept: its baseline is measured afresh."""
        self._window, self.baseline = [], None

    def moved(self, seconds: float, comm_s: float | None) -> tuple[Medians, Medians] | None:
        """One iteration of ``seconds`` (``comm_s`` of them communicating; None: not
        measured) ran: ``(baseline, now)`` when a full window moved beyond the
        threshold, else None."""
        self._window.append((seconds, seconds if comm_s is None else comm_s))
        if len(self._window) < self.drift.window:
            return None
        now = (statistics.median(w[0] for w in self._window),
               statistics.median(w[1] for w in self._window))
        self._window = []
        if self.baseline is None:
            self.baseline = now
            return None
        (base_s, base_comm), (_, now_comm) = self.baseline, now
        if abs(now_comm - base_comm) <= self.drift.threshold * base_s:
            return None
        return self.baseline, now
