"""Tests for autotune.tuning.space: domains, validation, encoding, moves, grid."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.tuning.space import ConfigError, MiB, SearchSpace

spaces = st.builds(
    lambda k, w, lossy: SearchSpace.build(k_max=k, workers_per_machine=w, allow_lossy=lossy),
    st.integers(0, 4),
    st.integers(1, 4),
    st.booleans(),
)


def test_default_is_the_safe_baseline():
    d = SearchSpace.build(k_max=2).default()
    assert d == {
        "streams": 1, "chunk_bytes": 4 * MiB, "transport": "allreduce", "servers": 0,
        "intra": "flat", "reduce_root": 0, "compression": "none",
    }


def test_seeds_are_the_default_then_pushpull_through_every_server():
    assert SearchSpace.build().seeds() == [SearchSpace.build().default()]
    space = SearchSpace.build(k_max=3, workers_per_machine=2)
    default, byteps = space.seeds()
    assert default == space.default()
    assert byteps == space.validate({**default, "transport": "pushpull", "servers": 3,
                                     "chunk_bytes": 256 * 1024})


@settings(max_examples=60, deadline=None)
@given(spaces, st.integers(0, 2**31))
def test_encode_decode_round_trip(space, seed):
    rng = random.Random(seed)
    for _ in range(20):
        c = space.sample(rng)
        ints = space.encode(c)
        assert all(isinstance(i, int) for i in ints) and len(ints) == len(space)
        assert space.decode(ints) == c


@settings(max_examples=60, deadline=None)
@given(spaces, st.integers(0, 2**31))
def test_moves_stay_valid_and_canonical(space, seed):
    rng = random.Random(seed)
    c = space.sample(rng)
    for n in space.neighbours(c) + [space.perturb(c, rng) for _ in range(10)]:
        assert space.validate(n) == n


def test_validation_names_parameter_and_domain():
    s = SearchSpace.build(k_max=1)
    with pytest.raises(ConfigError, match=r"streams=0 .*\{1, 2, \.\.\., 16\}"):
        s.validate({"streams": 0})
    with pytest.raises(ConfigError, match="compression='topk'"):
        s.validate({"compression": "topk"})
    with pytest.raises(ConfigError, match="unknown parameter"):
        s.validate({"stream": 2})
    with pytest.raises(ConfigError, match="servers=3"):
        s.validate({"transport": "pushpull", "servers": 3})
    with pytest.raises(ConfigError, match="index 99"):
        s.decode([0, 99, 0, 0, 0, 0, 0])
    with pytest.raises(ConfigError, match="ints"):
        s.decode([0])


def test_inactive_parameters_hold_their_default():
    s = SearchSpace.build(k_max=2, workers_per_machine=2, root_candidates=[1, 0])
    c = s.validate({"transport": "allreduce", "servers": 2, "intra": "flat", "reduce_root": 0})
    assert c["servers"] == 0 and c["reduce_root"] == 1
    c = s.validate({"transport": "pushpull", "servers": 2, "intra": "root", "reduce_root": 0})
    assert c["servers"] == 2 and c["reduce_root"] == 0
    # a non-canonical vector (inactive servers=2 under allreduce) is rejected
    with pytest.raises(ConfigError, match="canonical"):
        s.decode([0, 0, 0, 2, 0, 0, 0])


def test_perturb_moves_ordinals_by_at_least_one_step():
    s = SearchSpace.build()
    rng = random.Random(1)
    c = s.validate({"streams": 4, "chunk_bytes": 4 * MiB})
    moved = [s.perturb(c, rng) for _ in range(50)]
    assert all(m["streams"] in (3, 5) for m in moved)
    assert {m["chunk_bytes"] for m in moved} == {2 * MiB, 8 * MiB}


def test_grid_starts_at_default_and_moves_outward():
    s = SearchSpace.build(k_max=2, workers_per_machine=2)
    g = s.grid()
    assert g[0] == s.default()
    changed = [sum(c[k] != g[0][k] for k in c) for c in g]
    assert changed == sorted(changed)
    assert len({s.key(c) for c in g}) == len(g)


def test_project_clips_and_drops():
    small = SearchSpace.build(k_max=1)
    assert small.project({"transport": "pushpull", "servers": 4, "streams": 99})["servers"] == 1
    assert small.project({"compression": "onebit"}) is None
    assert small.project({"chunk_bytes": 3 * MiB})["chunk_bytes"] in (2 * MiB, 4 * MiB)


def test_build_rejects_bad_facts():
    with pytest.raises(ValueError, match="root candidates"):
        SearchSpace.build(workers_per_machine=2, root_candidates=[2])
    with pytest.raises(ValueError, match="k_max"):
        SearchSpace.build(k_max=-1)


def test_signature_tells_spaces_apart():
    assert SearchSpace.build(k_max=1).signature() == SearchSpace.build(k_max=1).signature()
    assert SearchSpace.build(k_max=1).signature() != SearchSpace.build(k_max=2).signature()
