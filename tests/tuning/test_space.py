"""Tests for autotune.tuning.space: domains, validation, encoding, moves, grid."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.runtime.config import ConfigError
from autotune.tuning.search.grid import GridSearch
from autotune.tuning.space import MiB, SearchSpace

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


def test_a_codec_that_encodes_no_chunk_is_the_lossless_configuration():
    """Issue 63: with compress_min_bytes above chunk_bytes no chunk is ever encoded, so
    the trial ran lossless under a codec's name; about half a cloud-codecs run's codec
    trials were such. Such a configuration is now the lossless one (same key), no draw or
    move yields one, and the space counts it once; a codec pinned alone stays pinned."""
    s = SearchSpace.build(k_max=0, allow_lossy=True)
    dead = s.validate({"compression": "topk", "topk_ratio": 0.001, "chunk_bytes": 1 * MiB,
                       "compress_min_bytes": 4 * MiB})
    assert dead["compression"] == "none" and dead["topk_ratio"] == s["topk_ratio"].default
    assert s.key(dead) == s.key({"chunk_bytes": 1 * MiB, "compress_min_bytes": 4 * MiB})
    live = s.validate({"compression": "topk", "chunk_bytes": 4 * MiB,
                       "compress_min_bytes": 4 * MiB})  # a 4 MiB chunk is encoded
    assert live["compression"] == "topk"
    rng = random.Random(0)
    drawn = [s.sample(rng) for _ in range(2000)]
    drawn += [n for c in drawn[:200] for n in s.neighbours(c)]
    assert not any(s.dead_codec(c) for c in drawn)
    assert sum(c["compression"] != "none" for c in drawn) > 500  # codecs are still drawn
    assert not any(s.dead_codec(c) for c in s.all_configs())
    from autotune.tuning.search.base import canonical_table  # what the searchers draw from

    table = canonical_table(s)
    assert len(table) == s.size()
    assert not any(s.dead_codec(s.decode(row)) for row in table)  # every row decodes
    pinned = SearchSpace.build(k_max=0, allow_lossy=True, fixed={"compression": "topk"})
    kept = pinned.validate({"chunk_bytes": 1 * MiB, "compress_min_bytes": 4 * MiB})
    assert kept["compression"] == "topk"  # no "none" to be: the user's pin holds


def test_perturb_moves_ordinals_by_at_least_one_step():
    s = SearchSpace.build()
    rng = random.Random(1)
    c = s.validate({"streams": 4, "chunk_bytes": 4 * MiB})
    moved = [s.perturb(c, rng) for _ in range(50)]
    assert all(m["streams"] in (3, 5) for m in moved)
    assert {m["chunk_bytes"] for m in moved} == {2 * MiB, 8 * MiB}


def test_grid_starts_at_default_and_moves_outward():
    s = SearchSpace.build(k_max=2, workers_per_machine=2)
    g = GridSearch(s).points()
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


# ------------------------------------------------------------------ pinned knobs
def test_a_pinned_knob_has_one_value_even_off_the_grid():
    s = SearchSpace.build(k_max=2, fixed={"chunk_bytes": 3 * MiB})
    assert s["chunk_bytes"].values == (3 * MiB,) and s.default()["chunk_bytes"] == 3 * MiB
    assert all(c["chunk_bytes"] == 3 * MiB for c in GridSearch(s).points())
    assert all(c["chunk_bytes"] == 3 * MiB for c in s.seeds())  # push/pull seed too
    assert dict(s.facts)["fixed"] == (("chunk_bytes", (3 * MiB,)),)
    rng = random.Random(0)
    assert {s.perturb(s.default(), rng)["chunk_bytes"] for _ in range(20)} == {3 * MiB}


def test_a_narrowed_knob_keeps_its_default_when_it_can():
    s = SearchSpace.build(fixed={"streams": [8, 1, 4]})
    assert s["streams"].values == (1, 4, 8) and s.default()["streams"] == 1
    assert SearchSpace.build(fixed={"streams": [2, 4]}).default()["streams"] == 2


@pytest.mark.parametrize("fixed, words", [
    ({"streams": 20}, "at most 16"),
    ({"chunk_bytes": 1000}, "multiple of 8"),
    ({"servers": 3}, "the job has 2"),
    ({"compression": "fp16"}, "allow_lossy=True"),
    ({"topk_ratio": 0.1}, "allow_lossy=True"),
    ({"chunk_byte": 4 * MiB}, "did you mean 'chunk_bytes'"),
    ({"intra": "root"}, "allows {'flat'}"),
    ({"streams": True}, "not a value"),
    ({"streams": []}, "no value"),
])
def test_a_pin_the_runtime_cannot_run_is_a_clear_error(fixed, words):
    name = next(iter(fixed))
    with pytest.raises(ConfigError, match="cannot fix") as err:
        SearchSpace.build(k_max=2, fixed=fixed)
    assert words in str(err.value) and name in str(err.value)


def test_the_space_is_built_from_the_runtimes_limits():
    from autotune.runtime.config import FALLBACK_STREAMS, Limits

    limits = Limits(servers=2, workers_per_machine=4, max_streams=8)
    s = SearchSpace.of(limits)
    assert s["servers"].values == (0, 1, 2) and s["streams"].values[-1] == 8
    assert "root" in s["intra"].values
    lost = SearchSpace.of(limits.after_server_loss())
    assert lost["transport"].values == ("allreduce",) and lost["servers"].values == (0,)
    assert lost["streams"].values[-1] == FALLBACK_STREAMS and lost["intra"].values == ("flat",)
    assert SearchSpace.build()["streams"].values[-1] == Limits().max_streams


def test_knobs_as_people_write_them():
    from autotune.units import parse_knob

    assert parse_knob("chunk_bytes=4MiB") == ("chunk_bytes", 4 * MiB)
    assert parse_knob("chunk_bytes=256KiB") == ("chunk_bytes", 256 * 1024)
    assert parse_knob("streams=1,2,4") == ("streams", [1, 2, 4])
    assert parse_knob("transport=pushpull") == ("transport", "pushpull")
    assert parse_knob("topk_ratio=0.01") == ("topk_ratio", 0.01)
    for bad in ("chunk_bytes", "=4", "streams=", "chunk_bytes=1.3KiB"):
        with pytest.raises(ValueError):
            parse_knob(bad)
