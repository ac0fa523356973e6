"""The confirm phase's race (issue 63): a candidate worse with confidence is dropped and
never measured again; one that is not stays in the race."""

import itertools
import random

from autotune.tuning.confirm import FIRST_TEST
from autotune.tuning.space import MiB, SearchSpace
from autotune.tuning.tuner import CONFIRM, Tuner

SMALL = SearchSpace.build(k_max=1, max_streams=4, min_chunk_bytes=1 * MiB, max_chunk_bytes=8 * MiB)
A, B, C = (SMALL.validate({"streams": s}) for s in (2, 3, 4))


def race(scores, budget=60):
    """A Tuner whose whole budget after the three warm trials is the race; ``scores``
    maps a configuration's streams to an iterator of its scores."""
    t = Tuner(SMALL, budget=budget, seed=0, trial_iterations=2, warm_start=[A, B, C],
              techniques=("grid",), confirm=(budget - 6) / budget)
    while (trial := t.ask()) is not None:
        t.tell(trial, next(scores[trial.config["streams"]]))
    return t


def trials_of(t, config):
    return [x for x in t.history if x.config == config]


def test_a_candidate_worse_with_confidence_is_dropped_and_one_that_is_not_stays():
    rng = random.Random(0)
    noisy = lambda mean: (mean * (1 + rng.gauss(0, 0.01)) for _ in itertools.count())  # noqa: E731
    t = race({2: noisy(100.0), 3: noisy(99.5), 4: noisy(50.0)})
    key = SMALL.key
    assert key(C) in t.confirming.dropped
    assert len(trials_of(t, C)) == FIRST_TEST  # its warm trial and one in the race: no more
    assert key(A) not in t.confirming.dropped and key(B) not in t.confirming.dropped
    # the two alike share the race in rounds: neither is starved
    a, b = len(trials_of(t, A)), len(trials_of(t, B))
    assert a >= 5 and b >= 5 and abs(a - b) <= 1
    assert t.best[0] in (A, B)


def test_a_dropped_candidate_does_not_come_back_when_the_leader_turns_noisy():
    # A and B are alike, so the race goes on; C is dropped after its second trial; then
    # A's scores swing wildly, so that C's upper bound is no longer below A's lower one.
    # A race does not reopen it (LUCB, before, measured C again).
    swings = itertools.chain([100.0, 100.0, 100.0], itertools.cycle([40.0, 250.0]))
    t = race({2: swings, 3: itertools.repeat(99.0), 4: itertools.repeat(60.0)})
    assert SMALL.key(C) in t.confirming.dropped
    assert len(trials_of(t, C)) == FIRST_TEST
    assert len(trials_of(t, A)) >= 8  # the swings were measured
    sigma = t.noise_model.sigma()
    assert t.noise_model.upper(SMALL.key(C), 2, sigma) > t.noise_model.lower(SMALL.key(A), 2, sigma)
    assert t.best[0] != C


def test_one_trial_is_not_enough_to_drop():
    t = Tuner(SMALL, budget=40, seed=0, trial_iterations=2, warm_start=[A, C],
              techniques=("grid",), confirm=0.9)
    for score in (100.0, 50.0):
        t.tell(t.ask(), score)
    again = t.ask()
    assert again.technique == CONFIRM
    assert not t.confirming.dropped  # C has one trial: the noise is not known from it
    t.tell(again, 100.0)
    nxt = t.ask()  # C's second trial (the least measured): now it may be tested
    assert nxt.config == C
    t.tell(nxt, 50.0)
    t.ask()
    assert t.confirming.dropped == {SMALL.key(C)}


def test_the_reference_is_never_dropped_and_measured_as_long_as_the_kept_one():
    t = Tuner(SMALL, budget=40, seed=0, trial_iterations=2, warm_start=[A, B],
              techniques=("grid",), confirm=0.9, reference=B)
    while (trial := t.ask()) is not None:
        t.tell(trial, 100.0 if trial.config == A else 50.0)
    assert SMALL.key(B) not in t.confirming.dropped
    assert t.separated and t.best[0] == A
    assert t.measurements(B) >= t.measurements(A)
