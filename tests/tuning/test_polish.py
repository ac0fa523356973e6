"""The polish phase (issue 63, item 2): coordinate steps on the ordinal knobs of the
configuration the Tuner would keep, just before the confirm phase's race."""

import math

import pytest

from autotune.tuning.polish import FLIPS, POLISH
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
    # each polish trial is an earlier trial with one knob moved: an ordinal one (a compass
    # step), or one of the collective's categorical knobs (a flip)
    for x in polished:
        assert _one_moves(x, t) & {*ORDINAL, *FLIPS}
    # its trials come just before the race: none after the first confirm trial, and the
    # bandit credits none of them
    first_confirm = min(x.index for x in t.history if x.technique == "confirm")
    assert all(x.index < first_confirm for x in polished)
    assert POLISH not in t.bandit.uses


def _one_moves(trial, tuner):
    """The knobs in which ``trial`` differs from an earlier trial of ``tuner`` that differs
    from it in one knob only."""
    out = set()
    for y in tuner.history:
        moved = [k for k in trial.config if trial.config[k] != y.config[k]]
        if y.index < trial.index and len(moved) == 1:
            out.add(moved[0])
    return out


def ridge(config):
    """``speed``, but push/pull runs 10 % faster than all-reduce at all-reduce's optimum
    (14 streams, 4 MiB) and slowly everywhere else: the grid's coarse levels never find
    it, and only a change of transport at the optimum's settings does."""
    if config["transport"] == "pushpull":
        return 110.0 if (config["streams"], config["chunk_bytes"]) == (14, 4 * MiB) else 20.0
    return speed(config)


def test_the_polish_phase_flips_the_transport_of_the_kept_configuration():
    def run(polish):
        t = Tuner(SPACE, budget=60, techniques=("grid",), seed=0, trial_iterations=2,
                  reference=SPACE.default(), polish=polish)
        while (trial := t.ask()) is not None:
            t.tell(trial, ridge(trial.config))
        return t

    assert run(0.0).best[0]["transport"] == "allreduce"
    t = run(0.3)
    kept = t.best[0]
    assert (kept["transport"], kept["streams"], kept["chunk_bytes"]) == ("pushpull", 14, 4 * MiB)
    found = next(x for x in t.history if x.config == kept)
    assert found.technique == POLISH and "transport" in _one_moves(found, t)


def test_polish_is_a_share_of_the_budget_that_leaves_the_techniques_half_of_theirs():
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="polish"):
            Tuner(SPACE, budget=60, polish=bad)
    assert Tuner(SPACE, budget=100).polishing.iterations == 15  # the defaults: 0.15, 0.15
    assert Tuner(SPACE, budget=100, polish=0.6, confirm=0.2).polishing.iterations == 40
    assert Tuner(SPACE, budget=40, confirm=0.9).polishing.iterations == 2
    assert Tuner(SPACE, budget=100, polish=0).polishing.iterations == 0
