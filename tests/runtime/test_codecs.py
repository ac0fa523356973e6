"""Unit tests for autotune.runtime.codecs: codecs, wire format, error feedback,
selective compression, registry / space parameters."""

from __future__ import annotations

import math

import pytest
import torch

from autotune.runtime.codecs import (
    CODECS, BF16Codec, Context, ErrorFeedback, FP16Codec, IdentityCodec, OneBitCodec,
    PowerSGDCodec, RandomKCodec, TopKCodec, codec_for_chunk, codec_from_config,
    compress_min_bytes, compresses, decode_sum, make_codec, sum_packed, whole,
)
from autotune.runtime.codecs.selective import (
    break_even_bytes, sync_steps, t_sync_cpr, t_sync_orig, worth_compressing,
)
from autotune.runtime.config import ConfigError
from autotune.tuning.space import MiB, SearchSpace, codec_params

ALL = [
    ("none", {}), ("fp16", {}), ("bf16", {}), ("topk", {"ratio": 0.01}),
    ("randomk", {"ratio": 0.05}), ("onebit", {}), ("powersgd", {"rank": 2}),
]
IDS = [n for n, _ in ALL]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def chunk(n: int, seed: int = 0, device: str = "cpu") -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(device)


# ------------------------------------------------------------------ wire format
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,params", ALL, ids=IDS)
@pytest.mark.parametrize("n", [1, 7, 1000, 4099])
def test_pack_unpack_round_trip(name, params, n, device):
    codec = make_codec(name, world_size=4, seed=1, **params)
    ctx = Context(iteration=3, chunk_id=2)
    payload = codec.encode(chunk(n, device=device), ctx)
    assert [t.dtype for t in payload] == [d for d, _ in codec.layout(n)]
    assert [t.numel() for t in payload] == [k for _, k in codec.layout(n)]
    buf = codec.pack(payload)
    assert buf.dim() == 1 and buf.dtype == codec.wire_dtype
    assert buf.numel() == codec.payload_numel(n)
    assert buf.numel() * buf.element_size() == codec.payload_nbytes(n)
    back = codec.unpack(buf.clone(), n)
    assert len(back) == len(payload)
    for a, b in zip(payload, back):
        assert a.dtype == b.dtype and torch.equal(a.reshape(-1), b)
    torch.testing.assert_close(codec.decode(back, n, ctx), codec.decode(payload, n, ctx))
    assert codec.decode(back, n, ctx).device.type == device


@pytest.mark.parametrize("name,params", ALL, ids=IDS)
def test_unpack_rows_of_all_gathered_payloads(name, params):
    """Payloads laid back to back (an all-gather's output) unpack whatever their byte
    length: a one-bit payload of 3 + 4 bytes puts the next row's scale off alignment."""
    n = 17
    codec = make_codec(name, world_size=3, seed=1, **params)
    ctx = Context(iteration=1, chunk_id=0)
    chunks = [chunk(n, seed=s) for s in range(3)]
    rows = torch.cat([codec.pack(codec.encode(x, ctx)) for x in chunks])
    for x, row in zip(chunks, rows.view(3, -1)):
        torch.testing.assert_close(codec.decode(codec.unpack(row, n), n, ctx),
                                   codec.decode(codec.encode(x, ctx), n, ctx))


@pytest.mark.parametrize("name,params", ALL, ids=IDS)
def test_unpack_rejects_wrong_buffer(name, params):
    codec = make_codec(name, **params)
    with pytest.raises(ValueError, match="packed payload"):
        codec.unpack(torch.zeros(codec.payload_numel(100) + 1, dtype=codec.wire_dtype), 100)


def test_encode_rejects_non_chunks():
    with pytest.raises(ValueError, match="1-D float"):
        TopKCodec().encode(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="1-D float"):
        OneBitCodec().encode(torch.arange(5))


@pytest.mark.parametrize("n", [4096, 1 << 20])
def test_payload_sizes_match_nominal_ratio(n):
    raw = 4 * n
    assert IdentityCodec().payload_nbytes(n) == raw
    assert FP16Codec().payload_nbytes(n) == raw // 2
    assert BF16Codec().payload_nbytes(n) == raw // 2
    for r in (0.001, 0.01, 0.1):
        k = math.ceil(r * n)
        assert TopKCodec(r).payload_nbytes(n) == 8 * k  # float32 value + int32 index
        assert abs(TopKCodec(r).ratio(n) - 2 * r) <= 2 / n
        assert RandomKCodec(r).payload_nbytes(n) == 4 * k  # values only
        assert abs(RandomKCodec(r).ratio(n) - r) <= 1 / n
    assert OneBitCodec().payload_nbytes(n) == n // 8 + 4
    m = math.isqrt(n - 1) + 1
    assert PowerSGDCodec(4).payload_nbytes(n) == 4 * 4 * m


# ------------------------------------------------------------------ half precision
@pytest.mark.parametrize("cls,rtol", [(FP16Codec, 2 ** -11), (BF16Codec, 2 ** -8)])
def test_half_round_trip_within_half_precision(cls, rtol):
    x = torch.randn(10_000) * torch.logspace(-3, 3, 10_000)
    for world in (1, 3, 8):
        codec = cls(world_size=world)
        y = codec.decode(codec.encode(x), x.numel())
        assert y.dtype == torch.float32
        finfo = torch.finfo(codec.half)
        atol = finfo.tiny * finfo.eps / 2 / codec.scale  # subnormal spacing, scaled back
        assert torch.all((y - x).abs() <= rtol * x.abs() + atol)
        assert float((y - x).abs().max()) > 0  # it is lossy: the test can fail


@pytest.mark.parametrize("cls", [FP16Codec, BF16Codec])
@pytest.mark.parametrize("world", [2, 3, 4, 7, 64])
def test_half_sum_of_n_workers_cannot_overflow(cls, world):
    codec = cls(world_size=world)
    big = torch.finfo(codec.half).max
    # Every worker sends the largest values its type holds (and beyond), same sign.
    beyond = min(4 * big, torch.finfo(torch.float32).max)
    x = torch.tensor([big, beyond, -big, 1.0], dtype=torch.float32)
    bufs = [codec.pack(codec.encode(x)) for _ in range(world)]
    # Summed in the half type itself, one addition at a time (as a ring all-reduce does).
    acc = bufs[0].clone()
    for b in bufs[1:]:
        acc = acc + b
        assert torch.isfinite(acc).all()
    total = codec.decode(codec.unpack(acc, x.numel()), x.numel())
    assert float(total[3]) == pytest.approx(world, rel=1e-2)
    if cls is FP16Codec:  # (a bf16 sum this big is beyond float32 itself)
        assert torch.isfinite(total).all()
        per_worker = min(big * codec.scale, codec.bound) / codec.scale  # what one sends of big
        assert per_worker >= 0.5 * big
        assert float(total[0]) == pytest.approx(world * per_worker, rel=1e-2)
    # Without the codec's scale the same sum overflows (the test can fail).
    if cls is FP16Codec:
        naive = torch.full((world,), big, dtype=torch.float16).sum(dtype=torch.float16)
        assert not torch.isfinite(naive)


def test_half_sum_decodes_to_sum():
    codec = FP16Codec(world_size=4)
    xs = [chunk(500, s) for s in range(4)]
    got = decode_sum(codec, [codec.pack(codec.encode(x)) for x in xs], 500)
    torch.testing.assert_close(got, sum(xs), atol=4e-3, rtol=4e-3)


# ------------------------------------------------------------------ top-k
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ratio", [0.001, 0.01, 0.3, 1.0])
def test_topk_keeps_exactly_the_k_largest_magnitudes(ratio, device):
    n = 5000
    x = chunk(n, 7, device)
    codec = TopKCodec(ratio)
    values, indices = codec.encode(x)
    k = codec.k(n)
    assert k == max(1, math.ceil(ratio * n)) and values.numel() == k == indices.numel()
    idx = indices.long()
    assert idx.unique().numel() == k
    torch.testing.assert_close(values, x[idx])
    dropped = torch.ones(n, dtype=torch.bool, device=device)
    dropped[idx] = False
    if k < n:
        assert x[idx].abs().min() >= x[dropped].abs().max()
    y = codec.decode((values, indices), n)
    assert torch.equal(y[idx], x[idx]) and torch.all(y[dropped] == 0)


# ------------------------------------------------------------------ random-k
def test_randomk_same_indices_on_two_ranks_with_the_same_seed():
    rank0 = RandomKCodec(0.01, world_size=2, seed=42)
    rank1 = RandomKCodec(0.01, world_size=2, seed=42)
    n = 100_000
    ctx = Context(iteration=5, chunk_id=3)
    i0, i1 = rank0.indices(n, ctx), rank1.indices(n, ctx)
    assert torch.equal(i0, i1) and i0.numel() == 1000 and i0.unique().numel() == 1000
    assert torch.all(i0[1:] > i0[:-1])
    # A new iteration, another chunk or another seed draws other indices.
    assert not torch.equal(i0, rank0.indices(n, Context(6, 3)))
    assert not torch.equal(i0, rank0.indices(n, Context(5, 4)))
    assert not torch.equal(i0, RandomKCodec(0.01, seed=43).indices(n, ctx))
    # Both ranks' payloads are summable: the decoded sum is the sum at the shared indices.
    x0, x1 = chunk(n, 0), chunk(n, 1)
    p0, p1 = rank0.encode(x0, ctx), rank1.encode(x1, ctx)
    total = rank0.decode(rank0.unpack(sum_packed(rank0, [rank0.pack(p0), rank1.pack(p1)]), n), n, ctx)
    torch.testing.assert_close(total[i0], x0[i0] + x1[i0])
    mask = torch.ones(n, dtype=torch.bool)
    mask[i0] = False
    assert torch.all(total[mask] == 0)


# ------------------------------------------------------------------ one-bit
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1, 8, 13, 1000])
def test_onebit_decode_has_the_encoded_signs_and_the_scale(n, device):
    x = chunk(n, 3, device)
    x[0] = 0.0  # zero encodes as +
    codec = OneBitCodec()
    scale, bits = codec.encode(x)
    assert bits.numel() == (n + 7) // 8
    assert float(scale) == pytest.approx(float(x.abs().mean()))
    y = codec.decode((scale, bits), n)
    expected_sign = torch.where(x >= 0, 1.0, -1.0)
    torch.testing.assert_close(y, expected_sign * scale)
    # The bits themselves: MSB first.
    first = int(bits[0])
    for j in range(min(8, n)):
        assert ((first >> (7 - j)) & 1) == int(x[j] >= 0)


# ------------------------------------------------------------------ PowerSGD
def test_powersgd_is_a_projection_and_summable():
    n = 900  # 30 x 30
    codecs = [PowerSGDCodec(3, world_size=2, seed=9) for _ in range(2)]
    ctx = Context(iteration=0, chunk_id=1)
    xs = [chunk(n, s) for s in range(2)]
    bufs = [c.pack(c.encode(x, ctx)) for c, x in zip(codecs, xs)]
    summed = codecs[0].unpack(sum_packed(codecs[0], bufs), n)
    total = codecs[0].decode(summed, n, ctx)
    own = [c.decode(c.unpack(b, n), n, ctx) for c, b in zip(codecs, bufs)]
    torch.testing.assert_close(total, own[0] + own[1], atol=1e-5, rtol=1e-5)
    # Decode is an orthogonal projection: applying it twice changes nothing, and the
    # dropped part is orthogonal to the kept part.
    c = codecs[0]
    again = c.decode(c.encode(own[0], ctx), n, ctx)
    torch.testing.assert_close(again, own[0], atol=1e-5, rtol=1e-5)
    assert abs(float(own[0] @ (xs[0] - own[0]))) < 1e-3 * float(xs[0].norm() ** 2)
    # after_sum on every worker with the same sum keeps the bases identical and flips side.
    for cc in codecs:
        cc.after_sum(summed, n, ctx)
    b0, b1 = (cc.basis(n, ctx) for cc in codecs)
    assert b0.side == b1.side == "left" and torch.equal(b0.matrix, b1.matrix)
    torch.testing.assert_close(b0.matrix.T @ b0.matrix, torch.eye(3), atol=1e-5, rtol=0)


def test_powersgd_power_iteration_finds_a_low_rank_gradient():
    # A fixed rank-2 gradient is recovered exactly after a few warm-started iterations.
    m = 40
    g = torch.Generator().manual_seed(0)
    grad = (torch.randn(m, 2, generator=g) @ torch.randn(2, m, generator=g)).reshape(-1)
    codec = PowerSGDCodec(2, seed=1)
    ctx = Context(chunk_id=0)
    errors = []
    for it in range(4):
        payload = codec.encode(grad, Context(it, 0))
        errors.append(float((codec.decode(payload, m * m, ctx) - grad).norm() / grad.norm()))
        codec.after_sum(payload, m * m, ctx)
    assert errors[0] > 0.1 and errors[-1] < 1e-4


# ------------------------------------------------------------------ error feedback
@pytest.mark.parametrize("name,params", ALL, ids=IDS)
def test_error_feedback_identity_over_many_steps(name, params):
    n, steps = 3000, 40
    codec = make_codec(name, world_size=4, seed=5, **params)
    ef = ErrorFeedback(n + 100)  # the chunk sits at offset 100 of a bigger space
    seg = whole(100, n)
    prev = torch.zeros(n)
    sent_total = torch.zeros(n)
    grad_total = torch.zeros(n)
    for t in range(steps):
        ctx = Context(iteration=t, chunk_id=0)
        g = chunk(n, t) + 0.3
        payload = ef.encode(codec, g, seg, ctx)
        sent = codec.decode(codec.unpack(codec.pack(payload), n), n, ctx)
        res = ef.residual(seg)
        torch.testing.assert_close(sent + res, g + prev, atol=1e-5, rtol=1e-6)
        if codec.summable:
            codec.after_sum(payload, n, ctx)
        prev = res
        sent_total += sent
        grad_total += g
    # Over the run nothing is lost: what was sent plus what is held back is all gradient.
    torch.testing.assert_close(sent_total + ef.residual(seg), grad_total, atol=1e-3, rtol=1e-5)
    if codec.lossless:
        assert ef.norm() == 0.0
    elif name in ("topk", "onebit", "randomk"):
        assert ef.norm() > 0.0
    assert torch.all(ef.total()[:100] == 0)


def test_leaving_a_codec_adds_at_most_one_gradient_of_residual():
    """Issue 62: the runtime flushed a codec's whole residual into the first lossless step
    (under top-k 0.1%, most of many steps' gradients), flooding the optimiser. Now a chunk
    that leaves its codec, encoded lossless or folded, adds its residual scaled to at most
    its own gradient's norm, and the residual is cleared; a small residual goes out
    whole."""
    n = 4000
    for leave in ("encode", "fold"):
        ef = ErrorFeedback(n)
        codec = TopKCodec(0.001)
        for it in range(20):
            ef.encode(codec, chunk(n, it), whole(0, n), Context(it, 0))
        held = ef.total()
        g = chunk(n, 99)
        assert held.norm() > 3 * g.norm()  # the residual is several gradients' worth
        if leave == "encode":
            sent = IdentityCodec().decode(ef.encode(IdentityCodec(), g, whole(0, n)), n)
        else:
            sent = g.clone()
            ef.fold(sent, whole(0, n))
        added = sent - g
        assert ef.norm() == 0.0
        torch.testing.assert_close(added.norm(), g.norm(), rtol=1e-5, atol=0)  # bounded
        torch.testing.assert_close(added / added.norm(), held / held.norm())  # its direction
    ef = ErrorFeedback(n)  # a residual under the gradient's norm is sent whole
    ef.store(whole(0, n), 0.1 * chunk(n, 5))
    sent = chunk(n, 6)
    ef.fold(sent, whole(0, n))
    torch.testing.assert_close(sent, chunk(n, 6) + 0.1 * chunk(n, 5))


def test_residual_fold_back_across_a_layout_change_loses_nothing():
    # Three gradients (10, 25, 7 elements) in one global space of 42 elements.
    numel = 42
    layout_a = [whole(0, 20), whole(20, 22)]  # two chunks
    layout_b = [((35, 7), (0, 10)), whole(10, 25)]  # other boundaries, packed out of order
    codec = TopKCodec(0.2)
    ef = ErrorFeedback(numel)
    sent = torch.zeros(numel)
    grads = torch.zeros(numel)

    def step(layout, it, codec=codec):
        g = chunk(numel, it) + 0.5
        grads.add_(g)
        for cid, segs in enumerate(layout):
            idx = torch.cat([torch.arange(o, o + k) for o, k in segs])
            payload = ef.encode(codec, g[idx], segs, Context(it, cid))
            sent.index_add_(0, idx, codec.decode(payload, idx.numel(), Context(it, cid)))

    for it in range(5):
        step(layout_a, it)
    held = ef.total()
    assert held.norm() > 0
    step(layout_b, 5)  # a new plan reads the residuals the old one left
    torch.testing.assert_close(sent + ef.total(), grads, atol=1e-4, rtol=1e-6)
    # Switching to no compression flushes every residual: everything has been sent.
    step(layout_b, 6, codec=IdentityCodec())
    assert ef.norm() == 0.0
    torch.testing.assert_close(sent, grads, atol=1e-4, rtol=1e-6)


def test_relayout_moves_each_gradients_residual():
    sizes = [3, 5, 2]
    old = [0, 3, 8]
    new = [9, 2, 0]  # reversed order, with a gap at 7..8
    ef = ErrorFeedback(10)
    before = chunk(10, 4)
    ef.store(whole(0, 10), before)
    ef.relayout(old, new, sizes, numel=12)
    after = ef.total()
    assert after.numel() == 12 and ef.numel == 12
    for o, n, k in zip(old, new, sizes):
        assert torch.equal(after[n:n + k], before[o:o + k])
    assert torch.all(after[7:9] == 0)
    with pytest.raises(ValueError, match="outside"):
        ef.relayout(new, [11, 0, 3], sizes)


def test_error_feedback_checks_segments():
    ef = ErrorFeedback(10)
    with pytest.raises(ValueError, match="outside"):
        ef.compensate(torch.zeros(5), whole(8, 5))
    with pytest.raises(ValueError, match="does not match"):
        ef.compensate(torch.zeros(4), whole(0, 5))
    with pytest.raises(ValueError):
        ErrorFeedback(0)


def test_error_feedback_allocates_nothing_without_loss():
    ef = ErrorFeedback(100)
    x = chunk(100)
    payload = ef.encode(IdentityCodec(), x, whole(0, 100))
    assert ef._residual is None and torch.equal(payload[0], x)
    out = ef.compensate(x, whole(0, 100))
    out += 1  # a new tensor: the gradient is not modified
    assert not torch.equal(out, x)


# ------------------------------------------------------------------ aggregation
@pytest.mark.parametrize("name,params", ALL, ids=IDS)
def test_decode_sum_equals_decoding_each_and_summing(name, params):
    n, world = 2000, 3
    codec = make_codec(name, world_size=world, seed=2, **params)
    ctx = Context(iteration=1, chunk_id=0)
    bufs = [codec.pack(codec.encode(chunk(n, s), ctx)) for s in range(world)]
    by_hand = sum(codec.decode(codec.unpack(b, n), n, ctx) for b in bufs)
    tol = 2e-2 if name in ("fp16", "bf16") else 1e-5
    torch.testing.assert_close(decode_sum(codec, bufs, n, ctx), by_hand, atol=tol, rtol=tol)
    assert codec.summable == (name in ("none", "fp16", "bf16", "randomk", "powersgd"))
    if not codec.summable:
        with pytest.raises(ValueError, match="not summable"):
            sum_packed(codec, bufs)


# ------------------------------------------------------------------ selective compression
def test_selective_compression_predicate():
    assert not compresses(MiB - 4)
    assert compresses(MiB)
    assert compresses(100, 0)
    topk = TopKCodec(0.01)
    assert isinstance(codec_for_chunk(topk, 64 * 1024, MiB), IdentityCodec)
    assert codec_for_chunk(topk, 4 * MiB, MiB) is topk
    with pytest.raises(ValueError):
        compresses(-1)


def test_hipress_cost_model():
    assert sync_steps("ring", 16) == (30, 16, 16)
    assert sync_steps("ring", 16, summable=True) == (30, 1, 1)
    assert sync_steps("ps", 16, 4) == (32, 5, 17)
    with pytest.raises(ValueError):
        sync_steps("tree", 4)
    bw = 10e9 / 8  # 10 Gbit/s

    def send(m):
        return 20e-6 + m / bw

    def enc(m):
        return 30e-6 + m / 200e9

    steps = sync_steps("ring", 16)
    assert t_sync_orig(1 << 20, 1, steps[0], send) == pytest.approx(30 * send(1 << 20))
    assert t_sync_cpr(1 << 20, 2, 1 / 32, steps, send, enc, enc) == pytest.approx(
        30 * send((1 << 20) / 64) + 16 * enc(1 << 19) + 16 * enc((1 << 20) / 64))
    # Small gradients are not worth compressing, big ones are; the break-even is between.
    assert not worth_compressing(4096, 1, 1 / 32, steps, send, enc, enc)
    assert worth_compressing(64 << 20, 1, 1 / 32, steps, send, enc, enc)
    b = break_even_bytes(1 / 32, steps, send, enc, enc)
    assert b is not None and 4096 < b < 64 << 20
    assert not worth_compressing(b // 2, 1, 1 / 32, steps, send, enc, enc)


# ------------------------------------------------------------------ registry and space
def test_registry_builds_every_codec():
    assert set(CODECS) == {"none", "fp16", "bf16", "topk", "randomk", "onebit", "powersgd"}
    assert isinstance(make_codec("topk", ratio=0.1), TopKCodec)
    with pytest.raises(ValueError, match="unknown codec"):
        make_codec("zip")
    with pytest.raises(ValueError, match="bad parameters"):
        make_codec("onebit", ratio=0.1)
    with pytest.raises(ValueError, match="ratio"):
        make_codec("topk", ratio=0.0)
    c = codec_from_config({"compression": "randomk", "randomk_ratio": 0.1}, world_size=4, seed=7)
    assert isinstance(c, RandomKCodec) and c.ratio_kept == 0.1 and c.seed == 7
    assert codec_from_config({"compression": "powersgd", "powersgd_rank": 2}).rank == 2
    assert isinstance(codec_from_config({}), IdentityCodec)
    assert compress_min_bytes({}) == MiB


def test_codec_params_are_conditional_dimensions_of_the_space():
    assert codec_params(("none",)) == ()
    assert "compress_min_bytes" not in SearchSpace.build(allow_lossy=False).names
    full = SearchSpace.build(allow_lossy=True)  # the codec parameters are in the space
    assert set(full["compression"].values) == set(CODECS)  # every codec, powersgd too
    assert full.names[-4:] == ("topk_ratio", "randomk_ratio", "powersgd_rank",
                               "compress_min_bytes")
    assert full.params[-4:] == codec_params(full["compression"].values)
    d = full.validate({"compression": "none", "topk_ratio": 0.1})
    assert d["topk_ratio"] == 0.01 and d["compress_min_bytes"] == MiB  # inactive: defaults
    c = full.validate({"compression": "topk", "topk_ratio": 0.1, "compress_min_bytes": 4 * MiB})
    assert c["topk_ratio"] == 0.1 and c["compress_min_bytes"] == 4 * MiB
    assert full.validate({"compression": "onebit", "topk_ratio": 0.1})["topk_ratio"] == 0.01
    assert full.decode(full.encode(c)) == c
    assert codec_from_config(c).ratio_kept == 0.1
    # random-k has its own ratio, without the 1% that does not converge
    assert min(full["randomk_ratio"].values) >= 0.05
    r = full.validate({"compression": "randomk", "randomk_ratio": 0.25, "topk_ratio": 0.001})
    assert r["randomk_ratio"] == 0.25 and r["topk_ratio"] == 0.01
    assert codec_from_config(r).ratio_kept == 0.25
    with pytest.raises(ConfigError, match="randomk_ratio=0.01"):
        full.validate({"compression": "randomk", "randomk_ratio": 0.01})
    p = full.validate({"compression": "powersgd", "powersgd_rank": 2})
    assert codec_from_config(p).rank == 2
    with_psgd = codec_params(("none", "fp16", "powersgd"))
    assert [p.name for p in with_psgd] == ["powersgd_rank", "compress_min_bytes"]
    with pytest.raises(ValueError, match="unknown codec"):
        codec_params(("none", "zip"))


def test_another_codec_takes_at_most_one_gradient_of_residual():
    """Issue 62: the loss test alternates top-k with fp16. fp16 sends every element, so
    top-k's residual (most of many steps' gradients) landed whole in the first fp16
    step. A residual is carried whole only under the codec that made it: another codec
    takes it bounded by its own gradient's norm, as leaving for lossless does; the same
    codec at another ratio keeps it whole."""
    n = 4000
    ef = ErrorFeedback(n)
    for it in range(20):
        ef.encode(TopKCodec(0.001), chunk(n, it), whole(0, n), Context(it, 0))
    held, g = ef.total(), chunk(n, 99)
    assert held.norm() > 3 * g.norm()
    fp16 = FP16Codec(world_size=1)
    sent = fp16.decode(ef.encode(fp16, g, whole(0, n), Context(20, 0)), n)
    added = sent - g
    torch.testing.assert_close(added.norm(), g.norm(), rtol=2e-3, atol=0)  # bounded
    assert float(added @ held) > 0.99 * float(added.norm() * held.norm())  # its direction
    assert ef.norm() < 1e-2 * g.norm()  # what fp16 keeps is its own rounding
    sent = fp16.decode(ef.encode(fp16, g, whole(0, n), Context(21, 0)), n)
    torch.testing.assert_close(sent, g, atol=2e-3, rtol=2e-3)  # fp16's own: carried
    ef = ErrorFeedback(n)  # the same codec at another ratio carries it whole
    for it in range(20):
        ef.encode(TopKCodec(0.001), chunk(n, it), whole(0, n), Context(it, 0))
    held = ef.total()
    ef.encode(TopKCodec(0.01), g, whole(0, n), Context(20, 0))
    torch.testing.assert_close(ef.total() + TopKCodec(0.01).decode(
        TopKCodec(0.01).encode(held + g, Context(20, 0)), n, Context(20, 0)), held + g)


def test_each_chunk_takes_another_codecs_residual_bounded_once():
    """The switch marks what another codec held back; each chunk (here two, encoded one
    after the other as the runtime's streams do) takes its part bounded once, the first
    time it is encoded under the new codec, and its own residual whole after that."""
    n = 4000
    halves = (whole(0, n // 2), whole(n // 2, n // 2))
    ef = ErrorFeedback(n)
    for it in range(20):
        for c, seg in enumerate(halves):
            ef.encode(TopKCodec(0.001), chunk(n // 2, 2 * it + c), seg, Context(it, c))
    fp16 = FP16Codec(world_size=1)
    ef.switch_to("fp16")
    for step in range(2):
        for c, seg in enumerate(halves):
            g = chunk(n // 2, 100 + c)
            held = ef.residual(seg).norm()
            added = fp16.decode(ef.encode(fp16, g, seg, Context(20 + step, c)), n // 2) - g
            if step == 0:  # bounded: one gradient's worth of top-k's residual
                assert held > 3 * g.norm()
                torch.testing.assert_close(added.norm(), g.norm(), rtol=2e-3, atol=0)
            else:  # fp16's own rounding, carried whole
                assert held < 1e-2 * g.norm() and added.norm() < 1e-2 * g.norm()
