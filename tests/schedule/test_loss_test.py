"""The loss test of a codec (issue 62): the fit of the loss rates, the rule, and how
often it keeps a codec that is faster, or slower, to the loss, on synthetic loss curves
with batch noise. No processes: the test is pure values."""

from __future__ import annotations

import math
import random

import pytest

from autotune.schedule.loss_test import BLOCK, ROUNDS, NO_LOSS, LossTest, loss_rates

CODEC = {"compression": "topk", "streams": 1}
LOSSLESS = {"compression": "none", "streams": 1}


def run(speed: float, progress: float, seed: int, noise: float = 0.01):
    """One loss test: the codec's iterations take ``1 / speed`` of a lossless one's
    second, and make ``progress`` of its loss decrease; the loss curve bends (its rate
    decays with a 60-iteration time constant) and each loss has the batch's noise."""
    rng = random.Random(seed)
    test = LossTest(CODEC, LOSSLESS)
    loss, k, verdict = 3.0, 0, None
    while verdict is None:
        config = test.config()
        codec = config == CODEC
        verdict = test.ran(config, 1.0 / speed if codec else 1.0, loss + rng.gauss(0, noise))
        loss -= 0.004 * (progress if codec else 1.0) * math.exp(-k / 60)
        k += 1
    return verdict, test


def test_the_fit_recovers_the_rates_of_a_bending_curve():
    codec, seconds, losses = [], [], []
    t_codec = t_lossless = 0.0
    for i in range(2 * BLOCK * ROUNDS):
        c = (i // BLOCK) % 2 == 0
        total = t_codec + t_lossless
        losses.append(2.0 - 0.01 * t_lossless - 0.03 * t_codec + 1e-4 * total ** 2)
        s = 0.5 if c else 1.5
        codec.append(c)
        seconds.append(s)
        t_codec, t_lossless = t_codec + (s if c else 0.0), t_lossless + (0.0 if c else s)
    b, a, se = loss_rates(codec, seconds, losses)
    assert b == pytest.approx(-0.03, abs=1e-9) and a == pytest.approx(-0.01, abs=1e-9)
    assert se < 1e-9
    assert loss_rates([True] * 10, [1.0] * 10, [1.0] * 10) is None  # one configuration


def test_the_blocks_alternate_codec_first():
    test = LossTest(CODEC, LOSSLESS)
    ran = []
    for _ in range(2 * BLOCK):
        ran.append(test.config())
        assert test.ran(ran[-1], 1.0, 1.0) is None
    assert ran == [CODEC] * BLOCK + [LOSSLESS] * BLOCK


def test_how_often_it_keeps_a_codec_faster_or_slower_to_the_loss():
    """The batch noise 2.5x a step's progress: a codec 3x as fast per step with a full
    step's progress (3x as fast to the loss) is mostly kept; one 3x as fast with a
    quarter of the progress (0.75x) rarely; one no faster seldom."""
    def kept(speed, progress):
        return sum(run(speed, progress, seed)[0].keep for seed in range(40)) / 40
    assert kept(3.0, 1.0) >= 0.7
    assert kept(3.0, 0.25) <= 0.1
    assert kept(1.0, 1.0) <= 0.15


def test_ahead_but_not_yet_confident_it_runs_as_long_again_once():
    lengths = {run(2.0, 0.9, seed, noise=0.03)[1].count for seed in range(20)}
    assert lengths <= {2 * 2 * BLOCK, 2 * BLOCK * ROUNDS, 4 * BLOCK * ROUNDS}  # (or stopped)
    assert 4 * BLOCK * ROUNDS in lengths


def test_without_a_loss_a_failure_or_a_loss_that_is_not_finite_no_codec_is_kept():
    verdict = LossTest(CODEC, LOSSLESS).ran(CODEC, 1.0, None)
    assert not verdict.keep and verdict.why == NO_LOSS
    assert "session.step(loss=...)" in verdict.line
    verdict = LossTest(CODEC, LOSSLESS).ran(CODEC, 1.0, float("nan"))
    assert not verdict.keep and "nan" in verdict.line
    verdict = LossTest(CODEC, LOSSLESS).ran(CODEC, 1.0, 2.0, failed="could not apply it")
    assert not verdict.keep and verdict.line == "codec not kept: could not apply it"


def test_a_codec_slower_with_confidence_stops_the_test_after_two_pairs_of_blocks():
    """A codec that hurts costs the job while it runs: once two pairs of blocks show it
    slower to the loss by Z standard errors, the test ends there."""
    verdict, test = run(1.0, 0.0, seed=0, noise=0.001)  # no progress at all under the codec
    assert not verdict.keep and verdict.line.endswith("; slower")
    assert test.count == 2 * 2 * BLOCK
    verdict, test = run(3.0, 1.0, seed=0, noise=0.001)  # a clear win runs the whole test
    assert verdict.keep and test.count == 2 * BLOCK * ROUNDS


def test_the_watch_ends_the_codec_trials_only_when_codecs_make_the_loss_fall_slower():
    """The search's iterations in the order a search runs them (lossless first, then
    codec trials among the rest): codecs that raise the loss end the trials in most of
    20 seeds; codecs as good per second as the rest seldom do, twice as good never."""
    from autotune.schedule.loss_test import CodecWatch

    def search(codec_progress, seed):
        rng, watch, loss = random.Random(seed), CodecWatch(), 3.0
        kinds = [False] * 12 + [rng.random() < 0.6 for _ in range(60)]
        for i, judged in enumerate(kinds):
            why = watch.ran(judged, 0.5 if judged else 1.0, loss + rng.gauss(0, 0.01))
            if why is not None:
                return i, why
            loss -= 0.004 * (codec_progress * 0.5 if judged else 1.0)
        return None, None

    stopped = [search(-1.0, seed) for seed in range(20)]
    assert sum(i is not None for i, _ in stopped) >= 16
    assert "the codec trials end" in next(why for _, why in stopped if why)
    assert sum(search(1.0, seed)[0] is not None for seed in range(20)) <= 3
    assert all(search(2.0, seed)[0] is None for seed in range(20))  # twice as fast
