"""RuntimeConfig: the runtime's own typed configuration (checks, canonical form, wire)."""

from __future__ import annotations

import pytest

from autotune.runtime.config import (KNOBS, NAMES, ConfigError, Intra, Limits, RuntimeConfig,
                                     Transport)
from autotune.tuning.space import MiB, SearchSpace


def test_defaults_enums_and_the_mapping_view():
    c = RuntimeConfig()
    assert c.transport is Transport.ALLREDUCE and c.intra is Intra.FLAT
    assert c["transport"] == "allreduce" and type(c["transport"]) is str
    assert dict(c) == c.as_dict() and list(c) == list(NAMES)
    p = RuntimeConfig.of({"transport": "pushpull", "servers": 2, "streams": 3})
    assert p.pushpull and p == {**c.as_dict(), "transport": "pushpull", "servers": 2, "streams": 3}


def test_unused_parameters_take_their_defaults():
    c = RuntimeConfig.of({"servers": 3, "reduce_root": 1, "topk_ratio": 0.1})
    assert (c.servers, c.reduce_root, c.topk_ratio) == (0, 0, 0.01)
    t = RuntimeConfig.of({"compression": "topk", "topk_ratio": 0.1, "randomk_ratio": 0.25})
    assert (t.topk_ratio, t.randomk_ratio) == (0.1, 0.1)


def test_the_table_of_knobs_is_the_configuration_and_the_widest_space():
    """One table (KNOBS) for the runtime, the tuner's space and the display: its names and
    defaults are RuntimeConfig's fields, its conditions and docs the space's."""
    assert tuple(k.name for k in KNOBS) == NAMES
    assert {k.name: k.default for k in KNOBS} == RuntimeConfig().as_dict()
    widest = SearchSpace.build(k_max=1, workers_per_machine=2, allow_lossy=True)
    assert widest.names == NAMES
    for knob, param in zip(KNOBS, widest.params):
        assert (param.when, param.doc, param.ordinal, param.log) == (
            knob.when, knob.doc, knob.ordinal, knob.log)
        assert not knob.values or param.values == knob.values


@pytest.mark.parametrize("bad, match", [
    ({"transport": "ring"}, "transport='ring' is not one of allreduce, pushpull"),
    ({"streams": 0}, "streams=0 is outside 1..64"),
    ({"streams": 2.5}, "streams=2.5 is not an integer"),
    ({"chunk_bytes": 1000}, "chunk_bytes=1000"),
    ({"compression": "zstd"}, "compression='zstd'"),
    ({"compression": "topk", "topk_ratio": 0}, "topk_ratio=0"),
    ({"intra": "tree"}, "intra='tree'"),
    ({"colour": 1}, "unknown parameter"),
])
def test_bad_values_name_the_parameter(bad, match):
    with pytest.raises(ConfigError, match=match):
        RuntimeConfig.of(bad)


def test_limits_of_the_job():
    limits = Limits(servers=1, workers_per_machine=2, max_streams=4)
    RuntimeConfig.of({"transport": "pushpull", "servers": 1, "intra": "root",
                      "reduce_root": 1, "streams": 4}).check(limits)
    for bad, match in [({"streams": 5}, "at most 4"),
                       ({"transport": "pushpull", "servers": 2}, "has 1"),
                       ({"intra": "root", "reduce_root": 2}, "reduce_root=2")]:
        with pytest.raises(ConfigError, match=match):
            RuntimeConfig.of(bad).check(limits)
    with pytest.raises(ConfigError, match="several workers"):
        RuntimeConfig.of({"intra": "scatter"}).check(Limits())


def test_the_wire_encoding_round_trips_points_of_the_space():
    """Every point of a lossless space, and 500 of a lossy one (codec parameters)."""
    import random

    lossless = SearchSpace.build(k_max=2, workers_per_machine=2)
    lossy = SearchSpace.build(k_max=2, workers_per_machine=2, allow_lossy=True)
    rng = random.Random(0)
    points = list(lossless.all_configs()) + [lossy.sample(rng) for _ in range(500)]
    for point in points:
        c = RuntimeConfig.of(point)
        ints = c.encode()
        assert all(isinstance(i, int) for i in ints) and len(ints) == len(NAMES)
        assert RuntimeConfig.decode(ints) == c  # floats travel bit for bit
        assert all(c[k] == v for k, v in point.items())
    with pytest.raises(ConfigError, match="transport: code 7"):
        RuntimeConfig.decode([1, MiB, 7] + RuntimeConfig().encode()[3:])
    with pytest.raises(ConfigError, match="has 11 ints"):
        RuntimeConfig.decode([1, 2])


def test_pipelining_depths_have_a_public_setter():
    from autotune.runtime.control import prepared

    before = (prepared.SEND_DEPTH, prepared.TAIL_DEPTH, prepared.SUM_DEPTH,
              prepared.SUM_INFLIGHT_BYTES)
    try:
        prepared.set_depths(send=2, tail=8)
        assert (prepared.SEND_DEPTH, prepared.TAIL_DEPTH, prepared.SUM_DEPTH) == (2, 8, before[2])
        with pytest.raises(ValueError, match="send must be >= 1"):
            prepared.set_depths(send=0)
    finally:
        prepared.set_depths(*before)
