"""Convergence evidence for the codecs (tests/codecs_helpers.py simulates 4 workers with
non-IID data in one process): with error feedback every codec ends within 5% of the
uncompressed loss after the same number of steps; without it top-k and one-bit end
measurably worse. The table in docs/compression.md comes from the same code."""

from __future__ import annotations

import functools

import pytest

from codecs_helpers import CODEC_RUNS
from codecs_helpers import train as _train

pytestmark = pytest.mark.slow

SEED = 0


@functools.lru_cache(maxsize=None)
def _cached(name: str, feedback: bool, params: tuple) -> tuple[float, float]:
    return _train(name, feedback=feedback, seed=SEED, **dict(params))


def train(name: str, feedback: bool = True, seed: int = SEED, **params) -> tuple[float, float]:
    assert seed == SEED
    return _cached(name, feedback, tuple(sorted(params.items())))


@pytest.fixture(scope="module")
def reference() -> float:
    loss, ratio = train("none", seed=SEED)
    assert ratio == 1.0
    return loss


@pytest.mark.parametrize("label,name,params", CODEC_RUNS, ids=[r[0] for r in CODEC_RUNS])
def test_codec_with_error_feedback_matches_uncompressed(reference, label, name, params):
    loss, ratio = train(name, feedback=True, seed=SEED, **params)
    assert ratio < 0.51, f"{label} does not compress ({ratio:.3f})"
    assert loss <= 1.05 * reference, f"{label}: {loss:.4f} vs uncompressed {reference:.4f}"


@pytest.mark.parametrize("name,params", [("topk", {"ratio": 0.01}), ("onebit", {})])
def test_without_error_feedback_topk_and_onebit_do_worse(reference, name, params):
    with_fb, _ = train(name, feedback=True, seed=SEED, **params)
    without, _ = train(name, feedback=False, seed=SEED, **params)
    assert without > 1.05 * reference, f"{name} without feedback: {without:.4f} vs {reference:.4f}"
    assert without > with_fb * 1.05
