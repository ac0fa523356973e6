"""The gradient noise scale and a codec's statistical efficiency (issue 39, item 1).

- On synthetic gradients with a known true gradient and a known per-sample variance, the
  estimator recovers ``S / |G|^2`` from local and averaged squared norms alone.
- On a real model (least squares on a fixed input distribution), it agrees within 25 %
  with the direct measurement: the variance of per-sample gradients over a large batch.
- The efficiency is 1 for a lossless configuration and falls as a codec's error grows; a
  codec with a large measured error (top-k at 1 % under error feedback) gets a low one,
  half precision stays at 1.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from autotune.runtime.codecs import Context, codec_from_config
from autotune.tuning.efficiency import GradientNoiseScale, efficiency


def test_known_noise_is_recovered():
    rng = np.random.default_rng(0)
    d, workers, b = 2000, 4, 8
    G = rng.normal(size=d)                 # |G|^2 ~ 2000
    S = 50_000.0                           # total per-sample variance
    ns = GradientNoiseScale(beta=0.99, stable_after=50)
    for _ in range(800):
        local = G + rng.normal(size=(workers, d)) * np.sqrt(S / (b * d))
        avg = local.mean(axis=0)
        ns.update(float((local ** 2).sum(axis=1).mean()), float(avg @ avg), b, workers)
    true = S / float(G @ G)
    assert ns.stable
    assert ns.value == pytest.approx(true, rel=0.1)
    assert ns.variance == pytest.approx(S, rel=0.1)


def _per_sample_grads(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    rows = []
    for i in range(len(x)):
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1]).backward()
        rows.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    return torch.stack(rows)


def test_agrees_with_per_sample_variance_on_a_real_model():
    torch.manual_seed(0)
    d = 16
    model = torch.nn.Linear(d, 1)
    w_true = torch.randn(d, 1)

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, d)
        return x, x @ w_true + 0.5 * torch.randn(n, 1)

    # direct: per-sample gradients over a large batch at the current parameters
    g = _per_sample_grads(model, *batch(4000))
    mean = g.mean(0)
    S_direct = float(((g - mean) ** 2).sum(1).mean()) * len(g) / (len(g) - 1)
    G2_direct = float(mean @ mean) - S_direct / len(g)
    direct = S_direct / G2_direct

    # the estimator: 4 workers of 8 samples, norms only, parameters unchanged
    workers, b = 4, 8
    ns = GradientNoiseScale(beta=0.99, stable_after=50)
    for _ in range(600):
        locals_ = []
        for _w in range(workers):
            model.zero_grad()
            x, y = batch(b)
            torch.nn.functional.mse_loss(model(x), y).backward()
            locals_.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        stack = torch.stack(locals_)
        avg = stack.mean(0)
        ns.update(float((stack ** 2).sum(1).mean()), float(avg @ avg), b, workers)
    assert ns.value == pytest.approx(direct, rel=0.25)


def test_efficiency_is_one_lossless_and_falls_with_the_error():
    assert efficiency(100.0, 64, 0.0, 1.0) == 1.0
    values = [efficiency(100.0, 64, e, 1.0) for e in (0.01, 0.1, 1.0, 10.0)]
    assert all(0 < v < 1 for v in values)
    assert values == sorted(values, reverse=True)
    # a larger batch leaves less noise of its own: the same codec error costs more
    assert efficiency(100.0, 1024, 1.0, 1.0) < efficiency(100.0, 16, 1.0, 1.0)
    with pytest.raises(ValueError):
        efficiency(1.0, 0, 0.1, 1.0)


def _net_error(codec, local: np.ndarray, residual: np.ndarray, it: int) -> float:
    """One step of ``codec`` with error feedback on each worker's gradient: the squared norm
    of what it changed in the average (the change of the residuals)."""
    workers, d = local.shape
    out = np.zeros(d)
    for w in range(workers):
        x = torch.tensor(local[w] + residual[w], dtype=torch.float32)
        ctx = Context(iteration=it, chunk_id=0)
        y = codec.decode(codec.encode(x, ctx), d, ctx).double().numpy()
        residual[w] = x.double().numpy() - y
        out += y
    diff = out / workers - local.mean(axis=0)
    return float(diff @ diff)


def test_a_codec_with_a_large_error_gets_a_low_efficiency():
    rng = np.random.default_rng(1)
    d, workers, b = 4096, 4, 16
    G = rng.normal(size=d)
    S = float(G @ G) * b  # B_noise = b: a minibatch's noise of the order of |G|^2
    ns = GradientNoiseScale(beta=0.98, stable_after=20)
    codecs = {"topk": codec_from_config({"compression": "topk", "topk_ratio": 0.01},
                                        world_size=workers),
              "fp16": codec_from_config({"compression": "fp16"}, world_size=workers)}
    residuals = {name: np.zeros((workers, d)) for name in codecs}
    errors: dict[str, list[float]] = {name: [] for name in codecs}
    for it in range(150):
        local = G + rng.normal(size=(workers, d)) * np.sqrt(S / (b * d))
        avg = local.mean(axis=0)
        ns.update(float((local ** 2).sum(axis=1).mean()), float(avg @ avg), b, workers)
        for name, codec in codecs.items():
            e = _net_error(codec, local, residuals[name], it)
            if it >= 50:  # once the residuals have built up
                errors[name].append(e)
    assert ns.stable
    batch = b * workers
    # half precision: its error is far below the minibatch's own noise
    assert ns.efficiency(batch, float(np.mean(errors["fp16"]))) > 0.999
    # top-k at 1 % under error feedback: each step emits the residual's largest entries,
    # an error about 12x |G|^2 a step (measured), far above the minibatch noise
    assert ns.efficiency(batch, float(np.mean(errors["topk"]))) < 0.2
