"""The confirm phase: re-measure the best candidates before one is kept (LUCB).

The last ``confirm`` fraction of the Tuner's budget (and any budget left once every
technique has run out of configurations) re-measures, as the LUCB rule for picking the
best arm does (Kalyanakrishnan, Tewari, Auer and Stone, ICML 2012), with the bounds of
the noise model (:mod:`autotune.tuning.noise`):

1. the leader (highest lower bound) until it has :data:`MIN_CONFIRMED` measurements, and
   the ``reference`` configuration (the session passes the default) until it has as many
   as the leader, the less measured of the two first, so a speed-up over it compares
   like with like;
2. then, of the ``confirm_top`` strongest challengers, the one with the highest upper
   bound while it overlaps the leader's lower bound (or the leader, when it is the less
   measured of the two), bounds of :data:`Z_SEPARATED` standard errors.

Once no challenger overlaps, the leader is *separated*: :meth:`ConfirmPhase.next` says
``None`` and tuning ends early. Once the phase has begun, only configurations measured
:data:`MIN_CONFIRMED` times may be kept (:meth:`ConfirmPhase.kept_from`). Nothing here
imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.speedup import MIN_ITERATIONS
from autotune.tuning.noise import LogScores, NoiseModel
from autotune.tuning.search.base import Key, Observations
from autotune.tuning.space import Config, SearchSpace

CONFIRM = "confirm"  # technique name of re-measurements of the best candidates
MIN_CONFIRMED = MIN_ITERATIONS  # measurements of the kept one and the reference: a headline's
Z_SEPARATED = 2.0  # standard errors in the bounds that must not overlap to end early


@dataclass(frozen=True)
class ConfirmSettings:
    """``confirm``: the share of the budget that re-measures; ``confirm_top``: how many
    challengers of the leader are considered."""

    confirm: float = 0.15
    confirm_top: int = 3

    def __post_init__(self) -> None:
        if not 0 <= self.confirm < 1:
            raise ValueError(f"confirm must be a fraction in [0, 1), got {self.confirm}")


class ConfirmPhase:
    """What the confirm phase measures next, and which configurations it lets be kept."""

    def __init__(self, settings: ConfirmSettings, budget: int, space: SearchSpace,
                 obs: Observations, noise: NoiseModel, reference: Config | None) -> None:
        self.budget = int(round(settings.confirm * budget))  # iterations it is given
        self.top = max(1, int(settings.confirm_top))
        self.space = space
        self.obs = obs
        self.noise = noise
        self.reference = reference
        self.started = False  # the phase has begun: only confirmed ones may be kept

    def is_reference(self, key: Key) -> bool:
        return self.reference is not None and key == self.space.key(self.reference)

    def kept_from(self, ranked: list[Key]) -> list[Key]:
        """``ranked`` (best first), less those not confirmed once the phase has begun:
        measured fewer than :data:`MIN_CONFIRMED` times (all of them while none is but
        the reference, which is measured that long from its first trial)."""
        if not self.started:
            return ranked
        confirmed = [k for k in ranked if self.noise.logs[k].measured >= MIN_CONFIRMED]
        if any(not self.is_reference(k) for k in confirmed):
            return confirmed
        return ranked

    def next(self) -> Config | None:
        """What to measure next (module docstring): ``None`` when nothing has a score
        yet, or when the leader is confirmed and separated."""
        ranked = self.noise.by_bound()
        if not ranked:
            ranked_mean = self.obs.ranked()  # no positive score: the least measured best
            return dict(ranked_mean[0][1].config) if ranked_mean else None
        leader = self.noise.logs[ranked[0]]
        lead = dict(self.obs.stats[ranked[0]].config)
        ref: LogScores | None = None
        if self.reference is not None:
            ref_key = self.space.key(self.reference)
            if ref_key not in self.obs.stats:
                return dict(self.reference)  # never measured (a failed one is not retried)
            if ref_key != ranked[0]:
                ref = self.noise.get(ref_key)
        # the leader and the reference, the less measured first (so a short budget leaves
        # them even): the leader to MIN_CONFIRMED, the reference as long as the leader
        if ref is not None and ref.measured < leader.measured:
            return dict(self.reference)
        if leader.measured < MIN_CONFIRMED:
            return lead
        sigma = self.noise.sigma()
        lower = self.noise.lower(ranked[0], Z_SEPARATED, sigma)
        challengers = sorted(ranked[1:], key=lambda k: self.noise.upper(k, Z_SEPARATED, sigma),
                             reverse=True)[: self.top]
        open_ = [k for k in challengers if self.noise.upper(k, Z_SEPARATED, sigma) > lower]
        if not open_:
            return None  # separated: the leader is kept
        challenger = open_[0]
        if self.noise.logs[challenger].measured < leader.measured:
            return dict(self.obs.stats[challenger].config)
        return lead
