"""The polish phase (issue 63, item 2): coordinate steps on the ordinal knobs of the
configuration the Tuner would keep, just before the confirm phase's race."""

import math

import pytest

from autotune.tuning.polish import POLISH
from autotune.tuning.space import MiB, SearchSpace
from autotune.tuning.tuner import Tuner

SPACE = SearchSpace.build(k_max=0, max_streams=16)
ORDINAL = [p.name for p in SPACE.params if p.ordinal]


def speed(config):
    """Fastest at 14 streams and 4 MiB chunks under all-reduce: 14 is not one of the
    coarse grid's stream levels (1, 5, 9, 12, 16), so the grid alone stops next to it."""
    if config["transport"] != "allreduce":
        return 30.0
    return (100.0 * (1 - 0.04 * abs(config["streams"] - 14))
            * (1 - 0.1 * abs(math.log2(config["chunk_bytes"] / (4 * MiB)))))


def tune(**settings):
    t = Tuner(SPACE, budget=60, techniques=("grid",), seed=0, trial_iterations=2,
              reference=SPACE.default(), **settings)
    while (trial := t.ask()) is not None:
        t.tell(trial, speed(trial.config))
    return t


def test_the_polish_phase_finds_the_neighbour_the_techniques_stepped_over():
    before = tune(polish=0.0)
    assert not [x for x in before.history if x.technique == POLISH]
    assert before.best[0]["streams"] in (12, 16)  # a coarse level next to the optimum

    t = tune()
    polished = [x for x in t.history if x.technique == POLISH]
    assert polished
    assert t.best[0]["streams"] == 14 and t.best[0]["chunk_bytes"] == 4 * MiB
    assert speed(t.best[0]) > speed(before.best[0])
    # each polish trial is an earlier trial with one ordinal knob moved (a compass step)
    for x in polished:
        earlier = [y.config for y in t.history if y.index < x.index]
        assert any(sum(x.config[k] != c[k] for k in x.config) == 1
                   and next(k for k in x.config if x.config[k] != c[k]) in ORDINAL
                   for c in earlier)
    # its trials come just before the race: none after the first confirm trial, and the
    # bandit credits none of them
    first_confirm = min(x.index for x in t.history if x.technique == "confirm")
    assert all(x.index < first_confirm for x in polished)
    assert POLISH not in t.bandit.uses


def test_polish_is_a_share_of_the_budget_that_leaves_the_techniques_half_of_theirs():
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="polish"):
            Tuner(SPACE, budget=60, polish=bad)
    assert Tuner(SPACE, budget=100).polishing.iterations == 15  # the defaults: 0.15, 0.15
    assert Tuner(SPACE, budget=100, polish=0.6, confirm=0.2).polishing.iterations == 40
    assert Tuner(SPACE, budget=40, confirm=0.9).polishing.iterations == 2
    assert Tuner(SPACE, budget=100, polish=0).polishing.iterations == 0
