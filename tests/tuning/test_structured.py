"""The structured technique (issue 63): categorical subspaces opened from the best
configuration, a compass search with a shrinking step on the ordinal knobs."""

import math

from autotune.tuning.search import StructuredSearch
from autotune.tuning.space import MiB, SearchSpace
from autotune.tuning.tuner import Tuner

SPACE = SearchSpace.build(k_max=3, workers_per_machine=2, max_streams=16)


def unimodal(c):
    """Unimodal in each ordinal knob; push/pull with servers, and intra=scatter, pay."""
    v = 100.0 - 1.5 * (c["streams"] - 11) ** 2 - 6 * (math.log2(c["chunk_bytes"] / MiB) + 1) ** 2
    if c["transport"] == "pushpull":
        v += 40.0 + 15.0 * c["servers"]
    return v + (30.0 if c["intra"] == "scatter" else 0.0)


def run(searcher, objective, trials):
    seen = []
    for _ in range(trials):
        c = searcher.ask()
        if c is None:
            break
        assert SPACE.key(c) not in seen  # never the same configuration twice
        assert c == SPACE.canonical(c)
        seen.append(SPACE.key(c))
        searcher.tell(c, objective(c))
    return seen


def test_it_finds_the_optimum_of_a_unimodal_space_in_few_trials():
    optimum = max(SPACE.all_configs(), key=unimodal)
    s = StructuredSearch(SPACE, seed=0)
    run(s, unimodal, 40)
    assert s.obs.best()[0] == optimum
    # the space has thousands of configurations; 40 trials found its best
    assert SPACE.size() > 1000


def test_the_first_move_opens_another_subspace_and_then_the_compass_moves_an_ordinal_knob():
    s = StructuredSearch(SPACE, seed=0)
    first = s.ask()
    assert first == SPACE.default()
    s.tell(first, 50.0)
    opener = s.ask()  # one categorical knob changed, the ordinal ones kept
    changed = [n for n in SPACE.names if opener[n] != first[n]]
    assert len(changed) == 1 and not SPACE[changed[0]].ordinal
    s.tell(opener, 10.0)
    step = s.ask()  # then a compass move: one ordinal knob, a quarter of its range
    changed = [n for n in SPACE.names if step[n] != first[n]]
    assert len(changed) == 1 and SPACE[changed[0]].ordinal
    p = SPACE[changed[0]]
    assert abs(p.index(step[p.name]) - p.index(first[p.name])) == s.steps(first)[p.name] > 1


def test_the_step_halves_when_no_move_pays_and_the_technique_ends_when_none_is_left():
    peak = SPACE.default()
    s = StructuredSearch(SPACE, seed=0)
    start = dict(s.steps(peak))
    flat = lambda c: 100.0 if c == peak else 50.0  # noqa: E731
    seen = run(s, flat, 10_000)
    assert s.ask() is None  # every move from the best three is measured, every step is 1
    assert all(v == 1 for v in s.steps(peak).values()) and max(start.values()) > 1
    assert len(seen) < 200  # a local search, not an enumeration of the space


def test_a_prediction_chooses_which_subspace_to_open():
    scatter_best = lambda c: (5.0 if c["intra"] == "scatter" else 1.0, 0.0)  # noqa: E731
    s = StructuredSearch(SPACE, seed=0, predict=scatter_best)
    s.tell(SPACE.default(), 50.0)
    assert s.ask()["intra"] == "scatter"


def test_in_the_tuner_it_earns_trials_and_finds_new_bests_under_the_bandit():
    t = Tuner(SPACE, budget=100, seed=0, techniques=("grid", "structured"), trial_iterations=2)
    t.run(lambda c, it: unimodal(c))
    mine = [x for x in t.history if x.technique == "structured"]
    assert len(mine) >= 5 and any(x.new_best for x in mine)
