"""Sliding-window AUC multi-armed bandit: which search technique to use next.

The AIACC-Training paper (ICDCS 2022, §VI) (after OpenTuner's ``AUCBanditMetaTechnique``): pick the technique ``t``
maximising

    AUC_t + C * sqrt(2 * lg|H| / H_t)

over a sliding window ``H`` of the last ``window`` uses (``|H|`` uses in it, ``H_t`` of
them by ``t``, ``lg`` = log2). A use is a success when it produced a new global best.
``AUC_t`` is the area under the curve that steps up by one at each of ``t``'s
successes, normalised to [0, 1]: ``t``'s uses in the window are numbered 1..n, oldest
first, and ``AUC_t = sum(positions of successes) / (n (n + 1) / 2)``, so recent
successes weigh more. A technique not used in the window has an infinite exploration
term and is chosen first (in the order given); ties go to the earlier technique.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Iterable, Sequence


class AUCBandit:
    def __init__(self, techniques: Sequence[str], window: int = 20, C: float = 0.2) -> None:
        techniques = tuple(techniques)
        if not techniques:
            raise ValueError("AUCBandit needs at least one technique")
        if len(set(techniques)) != len(techniques):
            raise ValueError(f"repeated techniques: {techniques}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if C < 0:
            raise ValueError(f"C must be >= 0, got {C}")
        self.techniques = techniques
        self.window = window
        self.C = C
        self.history: deque[tuple[str, bool]] = deque()
        self.uses = {t: 0 for t in techniques}  # H_t: uses in the window

    def _check(self, technique: str) -> None:
        if technique not in self.uses:
            raise KeyError(f"unknown technique {technique!r}; known: {', '.join(self.techniques)}")

    def auc(self, technique: str) -> float:
        """``AUC_t`` in [0, 1] (0 when unused in the window)."""
        self._check(technique)
        pos = 0
        area = 0
        for t, success in self.history:
            if t == technique:
                pos += 1
                if success:
                    area += pos
        return 2.0 * area / (pos * (pos + 1)) if pos else 0.0

    def exploration(self, technique: str) -> float:
        """``sqrt(2 lg|H| / H_t)``; infinite when ``H_t`` is 0."""
        self._check(technique)
        n = self.uses[technique]
        if n == 0:
            return math.inf
        return math.sqrt(2.0 * math.log2(len(self.history)) / n)

    def score(self, technique: str) -> float:
        return self.auc(technique) + self.C * self.exploration(technique)

    def select(self, available: Iterable[str] | None = None) -> str:
        """The technique to use next (among ``available``, default all)."""
        names = self.techniques if available is None else tuple(available)
        if not names:
            raise ValueError("no technique available")
        for t in names:
            self._check(t)
        best = names[0]
        best_score = self.score(best)
        for t in names[1:]:
            s = self.score(t)
            if s > best_score:
                best, best_score = t, s
        return best

    def credit(self, technique: str, new_best: bool) -> None:
        """Record one use of ``technique``; ``new_best``: it produced a new global best."""
        self._check(technique)
        self.history.append((technique, bool(new_best)))
        self.uses[technique] += 1
        if len(self.history) > self.window:
            old, _ = self.history.popleft()
            self.uses[old] -= 1


def in_top(score: float | None, scores: Sequence[float], quantile: float) -> bool:
    """Whether ``score`` ranks in the best ``quantile`` of ``scores`` (every trial's so
    far): the Tuner's credit, which carries information long before a technique finds a
    new best."""
    if score is None or len(scores) < 2:
        return False
    better = sum(1 for s in scores if s > score)
    return better < quantile * len(scores)
