"""The confirm phase: a race of the best candidates before one is kept.

The last ``confirm`` fraction of the Tuner's budget (and any budget left once every
technique has run out of configurations) races the best candidates, as irace does
(López-Ibáñez et al., Operations Research Perspectives 2016), with the bounds of the
noise model (:mod:`autotune.tuning.noise`):

1. the *field* is fixed when the phase begins: the leader (highest lower bound), the
   ``reference`` configuration (the session passes the default) and the ``confirm_top``
   challengers with the highest upper bounds; a configuration first measured later (a
   warm start the session queues) joins it;
2. before each measurement, a candidate whose upper bound is below the best lower bound
   in the field (bounds of :data:`Z_SEPARATED` standard errors) is *dropped*: worse with
   confidence, it is never measured again nor kept; a candidate is tested once it has
   :data:`FIRST_TEST` trials (the noise is not known from one), and the reference, the
   yardstick of the speed-up a session reports, is never dropped;
3. the least measured candidate left is measured next (ties: the reference, then the
   highest upper bound), so the survivors are measured in rounds and a speed-up over
   the reference compares like with like.

Once one candidate is left besides the reference, both measured :data:`MIN_CONFIRMED`
times and the reference as often as it, the leader is *separated*:
:meth:`ConfirmPhase.next` says ``None`` and tuning ends early. Once the phase has begun,
only configurations measured :data:`MIN_CONFIRMED` times and not dropped may be kept
(:meth:`ConfirmPhase.kept_from`).

**Overtime** (``overtime``, a share of the budget; 0 by default, a session gives it the
whole budget): once the budget is spent, the race goes on while two or more candidates
are left that are each *proven faster than the reference* (the lower bound of the one
over the upper bound of the other, the rule of the kept configuration), or one such
measured fewer than :data:`MIN_CONFIRMED` times (else it could not be kept, and the
choice fell back on the confirmed ones, the reference among them), for at most
``overtime x budget`` more iterations, in trials :data:`OVERTIME_LENGTH` times as long
(fewer switches), without measuring the reference again (:meth:`ConfirmPhase.contenders`).
Each such iteration runs a configuration that beats the default with confidence, so the
race costs the job its switches, not the speed it came for; and it decides among near-ties
that short trials cannot tell apart, which a job then runs for the rest of its length (on
the demo's cluster the kept one among push/pull's near-ties made 8 % of the job's time).
Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.speedup import MIN_ITERATIONS
from autotune.tuning.noise import NoiseModel
from autotune.tuning.search.base import Key, Observations
from autotune.tuning.space import Config, SearchSpace

CONFIRM = "confirm"  # technique name of re-measurements of the best candidates
MIN_CONFIRMED = MIN_ITERATIONS  # measurements of the kept one and the reference: a headline's
Z_SEPARATED = 2.0  # standard errors in the bounds that must not overlap to end early
FIRST_TEST = 2  # trials of a candidate before the race may drop it (irace's T_first)
OVERTIME_LENGTH = 2  # an overtime trial is this many ordinary ones long


@dataclass(frozen=True)
class ConfirmSettings:
    """``confirm``: the share of the budget that re-measures; ``confirm_top``: how many
    challengers of the leader are considered; ``overtime``: the share of the budget the
    race may run past it (module docstring); ``polish``: the share before the race that
    steps the kept configuration's ordinal knobs
    (:func:`autotune.tuning.polish.phase_iterations`)."""

    confirm: float = 0.15
    confirm_top: int = 3
    overtime: float = 0.0
    polish: float = 0.15

    def __post_init__(self) -> None:
        if not 0 <= self.confirm < 1:
            raise ValueError(f"confirm must be a fraction in [0, 1), got {self.confirm}")
        if not 0 <= self.polish < 1:
            raise ValueError(f"polish must be a fraction in [0, 1), got {self.polish}")
        if self.overtime < 0:
            raise ValueError(f"overtime must be a share >= 0 of the budget, got {self.overtime}")


class ConfirmPhase:
    """What the confirm phase's race measures next, and which configurations it lets be
    kept (module docstring)."""

    def __init__(self, settings: ConfirmSettings, budget: int, space: SearchSpace,
                 obs: Observations, noise: NoiseModel, reference: Config | None) -> None:
        self.budget = int(round(settings.confirm * budget))  # iterations it is given
        self.overtime = int(round(settings.overtime * budget))  # it may run past the budget
        self.top = max(1, int(settings.confirm_top))
        self.space = space
        self.obs = obs
        self.noise = noise
        self.reference = reference
        self.started = False  # the phase has begun: only confirmed ones may be kept
        self.field: list[Key] = []  # the race's candidates, dropped ones included
        self._entered: set[Key] = set()  # what was measured when the field was drawn
        self.dropped: set[Key] = set()  # worse than the field's best with confidence

    def is_reference(self, key: Key) -> bool:
        return self.reference is not None and key == self.space.key(self.reference)

    def kept_from(self, ranked: list[Key]) -> list[Key]:
        """``ranked`` (best first), less those not confirmed once the phase has begun:
        dropped by the race, or measured fewer than :data:`MIN_CONFIRMED` times (all of
        them while none is but the reference, which is measured that long from its first
        trial)."""
        if not self.started:
            return ranked
        left = [k for k in ranked if k not in self.dropped] or ranked
        confirmed = [k for k in left if self.noise.logs[k].measured >= MIN_CONFIRMED]
        if any(not self.is_reference(k) for k in confirmed):
            return confirmed
        return left

    def _draw(self, ranked: list[Key]) -> None:
        """The field: the leader, the reference, the strongest challengers; later
        arrivals join it."""
        sigma = self.noise.sigma()
        if not self.field:
            self._entered = set(ranked)
            challengers = sorted(ranked[1:], key=lambda k: -self.noise.upper(k, Z_SEPARATED, sigma))
            ref = [k for k in ranked if self.is_reference(k)]
            self.field = list(dict.fromkeys([ranked[0], *ref, *challengers[: self.top]]))
        self.field += [k for k in ranked if k not in self._entered and k not in self.field]

    def race(self) -> list[Key]:
        """The candidates left in the race, after dropping those worse with confidence
        (never the reference: the yardstick of the speed-up)."""
        sigma = self.noise.sigma()
        left = [k for k in self.field if k not in self.dropped]
        best_lower = max(self.noise.lower(k, Z_SEPARATED, sigma) for k in left)
        self.dropped |= {k for k in left if not self.is_reference(k)
                         and self.noise.logs[k].count >= FIRST_TEST
                         and self.noise.upper(k, Z_SEPARATED, sigma) < best_lower}
        return [k for k in left if k not in self.dropped]

    def contenders(self) -> list[Key]:
        """The candidates an overtime trial may measure (module docstring): those left in
        the race that are proven faster than the reference, where two or more are; the
        one that is, where it is measured fewer than :data:`MIN_CONFIRMED` times; none
        otherwise, or where the phase has not begun or has no measured reference."""
        ref = None if self.reference is None else self.space.key(self.reference)
        if not self.started or ref is None or self.noise.get(ref) is None:
            return []
        self._draw(self.noise.by_bound())  # (not yet drawn where the reference came last)
        ceiling = self.noise.bounds(ref)[2]
        faster = [k for k in self.race() if k != ref and self.noise.bounds(k)[0] > ceiling]
        if len(faster) >= 2:
            return faster
        # one proven faster, measured too few times to be kept (kept_from): confirm it
        return [k for k in faster if self.noise.logs[k].measured < MIN_CONFIRMED]

    def next_over(self) -> Config | None:
        """What an overtime trial measures: the least measured of :meth:`contenders`
        (ties: the highest upper bound); ``None`` when there are none."""
        left = self.contenders()
        if not left:
            return None
        sigma = self.noise.sigma()
        pick = min(left, key=lambda k: (self.noise.logs[k].measured,
                                        -self.noise.upper(k, Z_SEPARATED, sigma)))
        return dict(self.obs.stats[pick].config)

    def next(self) -> Config | None:
        """What to measure next (module docstring): ``None`` when nothing has a score
        yet, or when one candidate is left, confirmed, with the reference measured as
        long."""
        ranked = self.noise.by_bound()
        if not ranked:
            ranked_mean = self.obs.ranked()  # no positive score: the least measured best
            return dict(ranked_mean[0][1].config) if ranked_mean else None
        if self.reference is not None and self.space.key(self.reference) not in self.obs.stats:
            return dict(self.reference)  # never measured (a failed one is not retried)
        self._draw(ranked)
        left = self.race()
        sigma = self.noise.sigma()
        measured = {k: self.noise.logs[k].measured for k in left}
        contenders = [k for k in left if not self.is_reference(k)]
        if len(contenders) <= 1 and min(measured.values()) >= MIN_CONFIRMED and (
                not contenders or min(measured.values()) >= measured[contenders[0]]):
            return None  # separated: the one left is kept
        pick = min(left, key=lambda k: (measured[k], not self.is_reference(k),
                                        -self.noise.upper(k, Z_SEPARATED, sigma)))
        return dict(self.obs.stats[pick].config)
