"""The partition plan is a pure function: packing, splitting, coalescing, streams, Summation
owners."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.runtime.data.plan import (
    DTYPE_BYTES, bytes_per_owner, coalesce, coalesces, cut, flat_layout, make_plan, pushers,
    pushes_from_grad, shard_bounds, shared_parts, summation_shares, summation_units,
)
from autotune.runtime.control.world import WorldInfo

KiB = 1024


def world(n_machines: int, per: int, k: int, rank: int = 0) -> WorldInfo:
    roles = ("worker",) * (n_machines * per) + ("server",) * k
    machines = tuple(f"m{i // per}" for i in range(n_machines * per)) + tuple(
        f"s{j}" for j in range(k))
    return WorldInfo(rank, len(roles), roles, machines)


def cfg(**kw) -> dict:
    base = {"streams": 1, "chunk_bytes": 64 * KiB, "transport": "allreduce", "servers": 0,
            "intra": "flat", "reduce_root": 0, "compression": "none"}
    return {**base, **kw}


def covered(plan, sizes) -> None:
    """Every element of every gradient is in exactly one chunk, chunks are contiguous."""
    offsets, totals = flat_layout(sizes)
    seen = {d: [] for d in totals}
    for c in plan:
        seen[c.dtype].append((c.offset, c.numel))
    for d, spans in seen.items():
        spans.sort()
        pos = 0
        for off, n in spans:
            assert off == pos and n > 0
            pos += n
        assert pos == totals[d]


def test_packs_small_and_splits_large() -> None:
    sizes = [10] * 100 + [100_000] + [(3, "float16")]
    plan = cut(sizes, 64 * KiB)
    cap = 64 * KiB // 4
    assert plan[0].numel == cap and plan[0].tensors[:3] == (0, 1, 2)  # packed
    big = [c for c in plan if 100 in c.tensors]
    assert sum(c.numel for c in big) >= 100_000 and len(big) == -(-(1000 + 100_000) // cap)
    assert all(c.numel == cap for c in plan[:-2])  # all full but the last of each dtype
    assert plan[-1].dtype == "float16" and plan[-1].numel == 3
    covered(plan, sizes)


def test_chunk_larger_than_everything_gives_one_chunk_per_dtype() -> None:
    sizes = [5, (7, "bfloat16"), 9, (2, "bfloat16")]
    plan = make_plan(sizes, cfg(chunk_bytes=64 * 1024 * KiB), world(1, 1, 0))
    # a dtype change closes the chunk: f32 | bf16 | f32 | bf16
    assert [(c.dtype, c.numel) for c in plan] == [("float32", 5), ("bfloat16", 7),
                                                  ("float32", 9), ("bfloat16", 2)]
    assert plan[2].offset == 5  # the second f32 span continues the f32 flat buffer


def test_zero_sized_gradients_are_in_no_chunk() -> None:
    plan = make_plan([0, 4, 0], cfg(), world(1, 1, 0))
    assert len(plan) == 1 and plan[0].tensors == (1,)


def test_coalescing_sends_a_gradients_whole_chunks_as_one_message_per_stream() -> None:
    # 1000 small elements and the head of the big gradient fill chunk 0; the big one's 5
    # whole chunks (ready together) go as 3 messages of 2, 2 and 1 chunks on 3 streams; its
    # tail shares the last chunk with gradient 101
    sizes = [10] * 100 + [100_000, 5]
    cap = 64 * KiB // 4
    plan = make_plan(sizes, cfg(streams=3), world(1, 1, 0))
    assert [(c.numel, c.tensors[-1], c.stream) for c in plan] == [
        (cap, 100, 0), (2 * cap, 100, 1), (2 * cap, 100, 2), (cap, 100, 0),
        (1000 + 100_000 + 5 - 6 * cap, 101, 1)]
    covered(plan, sizes)
    # one stream: the whole run is one message; more streams than chunks: one chunk each
    assert [c.numel for c in make_plan(sizes, cfg(streams=1), world(1, 1, 0))][1] == 5 * cap
    assert len(make_plan(sizes, cfg(streams=16), world(1, 1, 0))) == len(cut(sizes, 64 * KiB))


def test_no_coalesced_message_exceeds_the_largest_chunk_a_config_may_ask_for() -> None:
    # 200 MiB in one gradient at 3 MiB chunks (21 fit in 64 MiB, not 21.33): with 2
    # streams, 67 whole chunks become 4 messages (2 per stream) of at most 21 chunks, not
    # 2 of 34
    sizes = [50 * 1024 * 1024, 1]
    plan = make_plan(sizes, cfg(streams=2, chunk_bytes=3 * 1024 * KiB), world(1, 1, 0))
    big = [c for c in plan if c.tensors == (0,)]
    assert len(big) == 4 and max(c.nbytes for c in big) <= 21 * 3 * 1024 * KiB
    covered(plan, sizes)
    spans = cut(sizes, 3 * 1024 * KiB)
    for limit in (1, 3 * 1024 * KiB, 10 * 1024 * KiB):  # below one chunk: one chunk each
        merged = coalesce(spans, 2, max_bytes=limit)
        assert all(sp.nbytes <= max(limit, 3 * 1024 * KiB) for sp in merged)
        assert sum(sp.numel for sp in merged) == sum(sp.numel for sp in spans)


@pytest.mark.parametrize("kw", [dict(transport="pushpull", servers=1), dict(intra="root"),
                                dict(intra="scatter"), dict(compression="fp16")])
def test_no_coalescing_where_chunks_pipeline_or_are_encoded(kw) -> None:
    sizes = [10] * 100 + [100_000, 5]
    c = cfg(streams=3, **kw)
    assert not coalesces(c)
    spans = cut(sizes, 64 * KiB)
    assert [(p.offset, p.numel) for p in make_plan(sizes, c, world(2, 1, 1))] == [
        (sp.offset, sp.numel) for sp in spans]
    assert coalesces(cfg()) and coalesces({})  # the defaults: a lossless flat all-reduce
    with pytest.raises(ValueError):
        coalesce(spans, 0)


def test_streams_round_robin() -> None:
    plan = make_plan([16384] * 10, cfg(streams=3), world(1, 1, 0))
    assert [c.stream for c in plan] == [i % 3 for i in range(10)]


@pytest.mark.parametrize("n,k", [(2, 0), (2, 1), (2, 2), (4, 1), (4, 2), (4, 3), (3, 5), (1, 0),
                                 (8, 4)])
def test_bytes_per_owner_follow_bytePS_split(n: int, k: int) -> None:
    info = world(n, 2, max(k, 0))
    sizes = [1_000_003] * 20 + [17] * 50  # ~80 MB in 64 KiB chunks
    plan = make_plan(sizes, cfg(transport="pushpull", servers=k), info)
    total = sum(c.nbytes for c in plan)
    got = bytes_per_owner(plan)
    s_share, m_share = summation_shares(n, k)
    for r in info.servers[:k]:
        assert abs(got.get(r, 0) / total - s_share) < 0.002
    for r in info.summation_hosts:
        assert abs(got.get(r, 0) / total - m_share) < 0.002
    assert set(got) <= set(info.servers[:k]) | set(info.summation_hosts)


def test_summation_shares_formula() -> None:
    # BytePS Eq. 1/2 with n=4, k=2: denominators n^2+kn-2k = 20
    assert summation_shares(4, 2) == pytest.approx((6 / 20, 2 / 20))
    for n in range(1, 9):
        for k in range(0, 10):
            s, m = summation_shares(n, k)
            assert k * s + n * m == pytest.approx(1.0)
    assert summation_shares(3, 0) == (0.0, 1 / 3)  # all-reduce-like
    assert summation_shares(2, 2) == (0.5, 0.0)    # non-colocated PS


def test_plan_is_deterministic_and_owner_free_under_allreduce() -> None:
    sizes = [(i * 37) % 5000 + 1 for i in range(300)]
    a = make_plan(sizes, cfg(streams=5), world(2, 2, 2))
    b = make_plan(list(sizes), cfg(streams=5), world(2, 2, 2, rank=3))
    assert a == b and all(c.owner is None for c in a)


def test_pushers_and_units_by_intra_mode() -> None:
    info = world(2, 2, 1)
    assert pushers(cfg(intra="flat"), info, 0) == (0, 1, 2, 3)
    assert pushers(cfg(intra="root", reduce_root=1), info, 0) == (1, 3)
    assert pushers(cfg(intra="scatter"), info, 1) == (1, 3)
    c = cfg(transport="pushpull", servers=1, intra="scatter")
    plan = make_plan([16385, 1], c, info)
    units = summation_units(plan, c, info, owner=4)
    assert units and all(u.chunk.owner == 4 for u in units)
    assert {u.id for u in units} == {u.chunk.index * 2 + u.shard for u in units}


def test_shard_bounds() -> None:
    assert shard_bounds(10, 3) == [(0, 4), (4, 3), (7, 3)]
    assert shard_bounds(1, 2) == [(0, 1), (1, 0)]


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        make_plan([(3, "complex64")], cfg(), world(1, 1, 0))
    with pytest.raises(ValueError):
        make_plan([-1], cfg(), world(1, 1, 0))
    with pytest.raises(ValueError):
        make_plan([3], cfg(transport="pushpull", servers=3), world(2, 1, 1))


def test_shared_parts_are_what_a_gradient_pushed_from_grad_still_copies() -> None:
    # 64 KiB chunks hold 16384 floats. Gradient 0 (100) and the head of 1 (16284) share
    # chunk 0; gradient 1 then has a chunk of its own, and its tail (40000 = 16284 + 16384
    # + 7332, from element 32668) shares chunk 2 with gradient 2 (no chunk of its own) and
    # the head of 3 (9002 = 16384 - 7332 - 50); 3 ends the plan alone in a partial chunk
    sizes = [100, 40_000, 50, 20_000]
    plan = make_plan(sizes, cfg(transport="pushpull", servers=1), world(2, 1, 1))
    assert [c.tensors for c in plan] == [(0, 1), (1,), (1, 2, 3), (3,)]
    assert shared_parts(plan, sizes) == [None, ((0, 16284), (32668, 7332)), None,
                                         ((0, 9002),)]
    assert pushes_from_grad(cfg(transport="pushpull", servers=1))
    for kw in (dict(), dict(transport="pushpull", servers=1, intra="root"),
               dict(transport="pushpull", servers=1, intra="scatter"),
               dict(transport="pushpull", servers=1, compression="fp16")):
        assert not pushes_from_grad(cfg(**kw)), kw  # in-place reductions, or a codec


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(0, 50_000), st.sampled_from(["float32", "float16",
                                                                        "bfloat16"])),
                      min_size=1, max_size=40),
       chunk_exp=st.integers(6, 20), streams=st.integers(1, 16), k=st.integers(0, 2))
def test_plan_properties(sizes, chunk_exp, streams, k) -> None:
    info = world(2, 2, 2)
    c = cfg(chunk_bytes=1 << chunk_exp, streams=streams,
            transport="pushpull" if k else "allreduce", servers=k)
    plan = make_plan(sizes, c, info)
    covered(plan, sizes)
    alone: dict[int, list[int]] = {}  # gradient -> streams of the messages holding it alone
    for ch in plan:
        whole = ch.nbytes <= max(1 << chunk_exp, DTYPE_BYTES[ch.dtype])
        assert whole or (not k and len(ch.tensors) == 1)  # only coalescing goes beyond a chunk
        if len(ch.tensors) == 1:
            alone.setdefault(ch.tensors[0], []).append(ch.stream)
        assert 0 <= ch.stream < streams
        assert (ch.owner is not None) == bool(k)
    if not k:  # coalesced: at most one message per stream for each gradient's own chunks
        assert all(len(set(s)) == len(s) for s in alone.values())
    # pushed from .grad: a gradient's own chunks and its shared parts tile it exactly
    offsets, _ = flat_layout(sizes)
    for t, parts in enumerate(shared_parts(plan, sizes)):
        if parts is None:
            assert t not in alone
            continue
        pieces = sorted([(ch.offset - offsets[t], ch.numel) for ch in plan
                         if ch.tensors == (t,)] + list(parts))
        ends = [0] + [a + n for a, n in pieces]
        assert [a for a, _ in pieces] == ends[:-1] and ends[-1] == sizes[t][0], (t, pieces)
    assert plan == make_plan(sizes, c, info)
