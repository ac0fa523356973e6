"""The polish phase: coordinate steps around the kept configuration before the race.

The techniques under the bandit spread their trials over the space: Bayesian optimisation
on a rough landscape tries its corners, Hyperband and PBT their own picks. What none of
them is sure to do is step the ordinal knobs (streams, chunk size, a codec's ratio) of
the configuration the Tuner would keep, which is where a near-optimum next to the best
found so far lies (16 streams kept where 8 or 11 run 5 % faster). AutoCCL (NSDI 2025)
tunes a collective by coordinate descent inside its categorical subspace; the polish
phase does the same for the share ``polish`` of the budget (at most half of what the
confirm phase leaves, :func:`phase_iterations`) that comes just before the confirm phase's
race (:mod:`autotune.tuning.confirm`):

- the search is :class:`~autotune.tuning.search.structured.StructuredSearch`'s compass:
  each active ordinal knob of the centre moved :data:`FIRST_STEP` of its range up and
  down, the move that paid repeated at twice its step, the steps halving once no move
  pays; in turns with those, the centre with one of the collective's categorical knobs
  (:data:`FLIPS`: transport, intra-machine strategy, reduce root) changed, its other knobs
  kept. On the unseen lossy-incast job a search that found PowerSGD at rank 1 often kept
  it under push/pull or a reduce to a root where all-reduce or a reduce-scatter with the
  same settings ran 1.2-1.4x faster. The codec family is not flipped: a codec's other
  settings rarely suit another codec, and those flips made the trials slower;
- the centres are the configurations the Tuner would keep, by the noise model's lower
  bound (:mod:`autotune.tuning.noise`), not by the mean: a configuration one lucky
  measurement put on top is not polished around;
- a move the physics calls hopeless is not run (the guard, :mod:`autotune.tuning.guard`);
- its trials are the Tuner's, not the bandit's (no technique is credited); once the
  compass has nothing left around its centres, the techniques have the rest of the phase.

The race that follows then decides among the leader and the best of its neighbours.
Nothing here imports torch.
"""

from __future__ import annotations

from autotune.tuning.noise import NoiseModel
from autotune.tuning.screen import Screen
from autotune.tuning.search.base import Observations
from autotune.tuning.search.structured import StructuredSearch
from autotune.tuning.space import Config, SearchSpace

POLISH = "polish"  # technique name of the polish phase's trials
FIRST_STEP = 0.125  # the compass's first step, a share of each ordinal knob's range
FLIPS = ("transport", "intra", "reduce_root")  # categorical knobs the compass changes


def phase_iterations(polish: float, budget: int, confirm: int) -> int:
    """The polish phase's iterations: the ``polish`` share of the ``budget``, at most half
    of what the confirm phase's ``confirm`` iterations leave to the techniques."""
    return max(0, min(round(polish * budget), (budget - confirm) // 2))


class PolishPhase:
    """The compass around the kept configuration for ``iterations`` of the budget before
    the confirm phase (module docstring), reading the Tuner's history ``obs`` and its
    ``noise`` model."""

    def __init__(self, space: SearchSpace, seed: int, obs: Observations, noise: NoiseModel,
                 iterations: int) -> None:
        self.iterations = int(iterations)
        self.obs = obs
        self.noise = noise
        self.search = StructuredSearch(space, seed, first_step=FIRST_STEP, openers=False,
                                       centres=self.leaders, flips=FLIPS)
        self.search.share(obs)

    def leaders(self) -> list[Config]:
        """The configurations the Tuner would keep, best first (highest lower bound)."""
        return [self.obs.stats[k].config for k in self.noise.by_bound()]

    def ask(self, remaining: int, confirm: int, screen: Screen) -> Config | None:
        """The next configuration to polish while ``remaining`` iterations of the budget,
        of which the confirm phase takes the last ``confirm``, are in the phase; ``None``
        outside it or when the compass has nothing left. A move the ``screen``'s guard
        calls hopeless is not run (the compass is noted the prediction and moves on)."""
        if not (self.iterations and self.obs.scored()
                and confirm < remaining <= confirm + self.iterations):
            return None
        config = self.search.ask()
        while config is not None and screen.guards(POLISH, config):
            config = self.search.ask()
        return config


__all__ = ["FIRST_STEP", "FLIPS", "POLISH", "PolishPhase", "phase_iterations"]
