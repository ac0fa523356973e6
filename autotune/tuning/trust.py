"""How far the physics prior is trusted: its ranking of the trials, judged as they come.

A prior is worth its weight only where it orders configurations as they measure. So
each configuration, when its first score arrives, is ranked against every configuration
measured before it, by the prior's prediction at that moment (before it learnt this
score: a prequential test) and by the measurements. Each pair whose measured means
differ by more than :data:`TIE` (in log score, beyond the noise of a short trial) is a
vote: *concordant* when the prior ordered the two as measured, *discordant* otherwise.
Older votes fade by :data:`DECAY` per configuration measured since, so a prior right
about the first few configurations (the default is slow, say) and wrong where the
search now is loses its weight as quickly as one wrong from the start. With ``c`` and
``d`` of them, the belief that the prior orders a pair rightly is
``p = (c + A) / (c + d + A + B)`` (a Beta(``A``, ``B``) belief before any vote), and its
weight is how much better than a coin that is:

    weight = clip(2 p - 1, 0, 1)

It starts at :data:`START` (1/3); the first pair ranked backwards takes it to 0, and a
prior that ranks four configurations rightly reaches about 0.75. The surrogate scales
the prior's predicted differences by it (a weight of 0 leaves a plain Gaussian
process), and the Tuner lets the prior screen nominees only at :data:`SCREEN` or more,
and propose trials only at :data:`PROPOSE` or more: trust is earned by ranking, and lost
by ranking wrongly, not by being off in scale.

Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

A, B = 2.0, 1.0  # the belief before any vote: a prior better than a coin, not proven
START = 2 * A / (A + B) - 1  # the weight before any vote (1/3)
TIE = 0.05  # log-score difference below which two measurements do not vote
SCREEN = 0.5  # the weight at which the prior may keep nominees from running
PROPOSE = 0.25  # the weight below which the prior proposes no trial of its own
DECAY = 0.8  # each older vote's weight, per configuration measured since


@dataclass
class Trust:
    """The votes on the prior's ranking (module docstring)."""

    concordant: float = 0.0
    discordant: float = 0.0

    def vote(self, predicted: float, measured: float,
             earlier: list[tuple[float, float]]) -> None:
        """A configuration's first score ``measured`` (log), predicted ``predicted``
        (log, before it was learnt), against the ``earlier`` configurations'
        ``(predicted, measured)`` (log)."""
        self.concordant *= DECAY
        self.discordant *= DECAY
        for p, m in earlier:
            if abs(measured - m) <= TIE:
                continue
            if (predicted - p) * (measured - m) > 0:
                self.concordant += 1
            else:
                self.discordant += 1

    @property
    def votes(self) -> float:
        return self.concordant + self.discordant

    @property
    def weight(self) -> float:
        """The prior's weight in [0, 1] (module docstring)."""
        p = (self.concordant + A) / (self.votes + A + B)
        return min(1.0, max(0.0, 2 * p - 1))

    def describe(self) -> str:
        """One line: the weight and the votes behind it."""
        if not self.votes:
            return f"weight {self.weight:.2f}, no vote yet"
        share = self.concordant / self.votes
        return (f"weight {self.weight:.2f}; it ordered {share:.0%} of the measured pairs "
                "rightly, recent ones counting most")


def log_score(score: float) -> float:
    """The log of a positive score (the scale every vote is taken on)."""
    return math.log(max(score, 1e-300))
