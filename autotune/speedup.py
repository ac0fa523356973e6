"""One definition of a speed-up, for every place autotune shows one.

A speed-up compares two throughputs (higher is better): the kept configuration with a
reference (the default configuration, or DDP). Each side is what was measured of it:
``(mean, spread, iterations)``, the mean and standard deviation of its scored iterations
and how many there were. Then

* the speed-up is the **ratio of the means**, ``best / reference``;
* its spread is the **first-order propagation** of the two spreads, taking the sides as
  independent: ``ratio * sqrt((s_best / best)**2 + (s_ref / ref)**2)`` (relative spreads
  added in quadrature). Like the ``±`` beside each mean it says how much single iterations
  scatter; it is not a confidence interval of the ratio;
* a speed-up is **refused** (no number is headlined) when either side has fewer than
  :data:`MIN_ITERATIONS` scored iterations, or an unknown count (runs stored before schema
  v6): one or two iterations say nothing about a mean. It shows as ``– (n<4: 1 vs 12
  iterations)``; in JSON its ``ratio`` is ``null`` and the counts and the reason are there.

**Simulated** speed-ups (``autotune tune --simulate``, runs marked simulated) compare the
simulator's answers, not measurements: they are shown as ``4.10x (simulated)``, with no
spread and no iteration count (a simulated "iteration" is a draw of the simulator's noise
model; counting them would make a prediction look like a measurement). The
:data:`MIN_ITERATIONS` rule is about measured iterations, so it does not apply to them.

Every table and JSON document that shows a speed-up builds it here: the session's table
(:mod:`autotune.leader.display`), ``autotune tune`` (table and ``--json``), ``autotune
db runs/show/best``, ``autotune report``, the demo and the Optuna export::

    s = Speedup.of(best=(6209.0, 80.0, 12), reference=(3833.0, 41.0, 12))
    s.ratio, s.spread, s.shown(), s.as_json()

Nothing here imports torch or rich.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

#: fewer scored iterations than this on either side: no speed-up is headlined
MIN_ITERATIONS = 4

#: one side of a comparison: (mean, standard deviation, scored iterations); any may be None
Side = tuple[float | None, float | None, int | None]


def measure(scores: Iterable[float]) -> Side:
    """``(mean, standard deviation, count)`` of per-iteration scores (``(None, None, 0)``
    for none; the deviation of a single score is 0)."""
    xs = [float(x) for x in scores]
    if not xs:
        return None, None, 0
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0), len(xs)


def measure_times(times_s: Iterable[float]) -> Side:
    """:func:`measure` of the throughputs (it/s, ``1 / t``) of iterations that took
    ``times_s`` seconds each."""
    return measure(1.0 / t for t in times_s)


def beats(best: Side, reference: Side, z: float) -> bool:
    """Whether ``best``'s mean is above ``reference``'s by more than ``z`` standard errors
    of the difference of the means (each side ``(mean, standard deviation, count)``;
    False where a side lacks one of them)."""
    (b, b_sd, b_n), (r, r_sd, r_n) = best, reference
    if None in (b, b_sd, b_n, r, r_sd, r_n) or not b_n or not r_n:
        return False
    return b - r > z * math.sqrt(b_sd ** 2 / b_n + r_sd ** 2 / r_n)


def _number(x: Any) -> float | None:
    return None if x is None else float(x)


@dataclass(frozen=True)
class Speedup:
    """``best`` over ``reference``; build it with :meth:`of` or :meth:`of_run`."""

    best: float | None
    best_spread: float | None
    best_iterations: int | None
    reference: float | None
    reference_spread: float | None
    reference_iterations: int | None
    simulated: bool = False

    @classmethod
    def of(cls, best: Side, reference: Side, *, simulated: bool = False) -> "Speedup":
        """The speed-up of ``best`` over ``reference``, each ``(mean, spread, iterations)``.
        ``simulated``: both are the simulator's answers (counts and spreads are dropped)."""
        (b, bs, bn), (r, rs, rn) = best, reference
        if simulated:
            bs = bn = rs = rn = None
        return cls(_number(b), _number(bs), None if bn is None else int(bn),
                   _number(r), _number(rs), None if rn is None else int(rn), bool(simulated))

    @classmethod
    def of_run(cls, run: Mapping[str, Any]) -> "Speedup":
        """A stored run's speed-up: its kept configuration over its default (``best_score``,
        ``best_spread``, ``best_iterations`` and the ``default_`` ones; a run stored before
        the counts were has ``None`` there, so its speed-up is refused)."""
        return cls.of((run.get("best_score"), run.get("best_spread"), run.get("best_iterations")),
                      (run.get("default_score"), run.get("default_spread"),
                       run.get("default_iterations")),
                      simulated=bool(run.get("simulated")))

    # ------------------------------------------------------------------ the numbers
    @property
    def measured(self) -> bool:
        """Whether both means are there (and the reference is not 0)."""
        return self.best is not None and bool(self.reference)

    @property
    def refused(self) -> str | None:
        """Why no speed-up is headlined although both means are there (``None``: it is).
        Simulated speed-ups are never refused."""
        if not self.measured or self.simulated:
            return None
        counts = (self.best_iterations, self.reference_iterations)
        if any(n is None for n in counts):
            return "n unknown"
        if min(counts) < MIN_ITERATIONS:
            return f"n<{MIN_ITERATIONS}"
        return None

    @property
    def ratio(self) -> float | None:
        """``best / reference``; ``None`` when a side is missing or the speed-up is refused."""
        if not self.measured or self.refused:
            return None
        return self.best / self.reference

    @property
    def spread(self) -> float | None:
        """The ratio's spread (first-order propagation, module docstring); ``None`` when
        there is no ratio or a side has no spread (simulated ones never have)."""
        r = self.ratio
        if r is None or self.best_spread is None or self.reference_spread is None:
            return None
        rel_b = self.best_spread / self.best if self.best else 0.0
        rel_r = self.reference_spread / self.reference
        return r * math.hypot(rel_b, rel_r)

    def beats(self, z: float) -> bool:
        """Whether the speed-up is headlined (not refused; simulated ones never are) and
        ``best`` is above ``reference`` by more than ``z`` standard errors (:func:`beats`)."""
        if not self.measured or self.refused or self.simulated:
            return False
        return beats((self.best, self.best_spread, self.best_iterations),
                     (self.reference, self.reference_spread, self.reference_iterations), z)

    # ------------------------------------------------------------------ shown
    def _counts(self) -> str:
        def n(x: int | None) -> str:
            return "?" if x is None else str(x)

        return f"{n(self.best_iterations)} vs {n(self.reference_iterations)} iterations"

    def shown(self, *, counts: bool = True, spread: bool = True) -> str:
        """``"1.62x ± 0.05 (12 vs 12 iterations)"``; refused: ``"– (n<4: 1 vs 12
        iterations)"``; simulated: ``"4.10x (simulated)"``; ``""`` when a side is
        missing. Narrow tables, whose other views have the rest: ``counts=False`` gives
        ``"1.62x ± 0.05"``, ``"– (n<4)"``, ``"– (n?)"`` (a count unknown), ``"4.10x sim."``;
        with ``spread=False`` too, ``"1.62x"``."""
        if not self.measured:
            return ""
        why = self.refused
        if why is not None:
            if counts:
                return f"– ({why}: {self._counts()})"
            return "– (n?)" if why == "n unknown" else f"– ({why})"
        text = f"{self.ratio:.2f}x"
        if self.simulated:
            return text + (" (simulated)" if counts else " sim.")
        if spread and self.spread is not None:
            text += f" ± {self.spread:.2f}"
        return f"{text} ({self._counts()})" if counts else text

    def as_json(self) -> dict[str, Any]:
        """``{"ratio", "spread", "best_iterations", "reference_iterations", "simulated",
        "refused"}``: ``ratio`` and ``spread`` are ``null`` when refused (``refused`` says
        why) or when a side is missing; simulated ones have no counts."""
        return {"ratio": self.ratio, "spread": self.spread,
                "best_iterations": self.best_iterations,
                "reference_iterations": self.reference_iterations,
                "simulated": self.simulated, "refused": self.refused}
