"""The gradient sample (autotune.runtime.data.gradstats): the same coordinates on every rank,
and an unbiased estimate of a known error's squared norm from a few hundred of them."""

from __future__ import annotations

import statistics

import pytest
import torch

from autotune.runtime.data.gradstats import SAMPLES, GradientSample


def _segments(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g) for n in (100_000, 30_000, 7, 1)]


def test_every_rank_draws_the_same_coordinates_and_counts():
    total = sum(t.numel() for t in _segments(0))
    a, b = GradientSample(total), GradientSample(total)
    for s in (a, b):
        s.begin(7)
    for key, (x, y) in enumerate(zip(_segments(1), _segments(2))):
        a.local(key, x)
        b.local(key, y)
        a.averaged(key, x)
        b.averaged(key, y)
    sa, sb = a.take(), b.take()
    assert len(sa.local) == len(sb.local) and torch.equal(sa.weights, sb.weights)
    assert SAMPLES <= len(sa.local) <= SAMPLES + 4  # every segment at least one
    # the weights make the sampled sum of squares an estimate of the whole
    assert sa.local_sq == pytest.approx(sum(float(t.pow(2).sum()) for t in _segments(1)))


def test_the_error_estimate_is_unbiased():
    segs = _segments(3)
    total = sum(t.numel() for t in segs)
    g = torch.Generator().manual_seed(4)
    errors = [0.1 * torch.randn(t.numel(), generator=g) for t in segs]
    true = sum(float(e.pow(2).sum()) for e in errors)
    estimates = []
    sample = GradientSample(total)
    for it in range(200):
        sample.begin(it)
        for key, (t, e) in enumerate(zip(segs, errors)):
            sample.local(key, t)
            sample.averaged(key, t + e)
        s = sample.take()
        estimates.append(float((s.weights * (s.averaged.double() - s.local.double()) ** 2).sum()))
    assert statistics.fmean(estimates) == pytest.approx(true, rel=0.03)
    assert statistics.stdev(estimates) < 0.25 * true  # one iteration's estimate is usable


def test_a_segment_not_seen_after_averaging_leaves_no_error_estimate():
    sample = GradientSample(10)
    sample.begin(0)
    sample.local(0, torch.ones(5))
    sample.local(1, torch.ones(5))
    sample.averaged(0, torch.ones(5))
    s = sample.take()
    assert s.averaged is None and len(s.local) == len(s.weights)
