"""How far ``autotune selftest`` lets an average differ from ``all_reduce``'s: the
worst case of summing in another order (lossless), and each codec's bound (lossy). The
functions take torch tensors (float64) but import nothing."""

from __future__ import annotations

import math
from typing import Any, Mapping

#: unit roundoff of each dtype (half an ulp at 1)
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
#: half the smallest subnormal: the absolute floor of one rounding
TINY = {"float32": 2.0 ** -150, "float16": 2.0 ** -25, "bfloat16": 2.0 ** -134}


def lossless_bound(ref: Any, got: Any, abs_sum: Any, n: int, dtype: str,
                   divided_first: bool = False) -> Any:
    """Per element: how far two correct averages of the same ``n`` values may lie apart
    when their sums were taken in different orders (gloo's ring, a reduce tree, a Summation
    Service's arrival order), in float64. Each sum of ``n`` values is within
    ``(n-1) u sum|g_i|`` of the exact one (``u``: the dtype's unit roundoff, plus the
    subnormal floor), the division by ``n`` adds ``u`` of the result; both sides may err.
    ``divided_first``: ``got`` divided every value by ``n`` before summing (DDP, its comm
    hooks): ``n`` roundings of ``u |g_i| / n`` each (none when ``n`` is a power of two,
    but for the subnormal floor) instead of one of the result."""
    u, tiny = UNIT_ROUNDOFF[dtype], TINY[dtype]
    bound = ((2 * (n - 1) / n) * u * 1.01 * abs_sum + u * (ref.abs() + got.abs())
             + 2 * n * tiny)
    if divided_first:
        bound = bound + n * tiny
        if n & (n - 1):  # n not a power of two: g_i / n rounds
            bound = bound + u * 1.01 * abs_sum / n
    return bound


def half_codec_bound(ref: Any, got: Any, abs_sum: Any, n: int, dtype: str, codec: str,
                     divided_first: bool = False) -> Any:
    """Per element, fp16/bf16: each of up to ``n`` encodings and ``n - 1`` half-precision
    additions rounds by the codec's unit roundoff of at most ``sum|g_i|`` (the values are
    scaled by ``s = 2^-ceil(log2 n)``, exactly, so the subnormal floor grows by ``1/s``),
    on top of :func:`lossless_bound`. Gradients beyond the clamp (``max_half / (n s)``, over
    32,000 for fp16) are outside it (error feedback carries what the clamp removes).
    ``divided_first``: as :func:`lossless_bound` (chunks too small to compress)."""
    half = "float16" if codec == "fp16" else "bfloat16"
    s = 2.0 ** -math.ceil(math.log2(n)) if n > 1 else 1.0
    u, tiny = UNIT_ROUNDOFF[half], TINY[half] / s
    return 2 * (u * 1.01 * abs_sum + tiny) + lossless_bound(ref, got, abs_sum, n, dtype,
                                                            divided_first)


def contraction(cfg: Mapping[str, Any]) -> float:
    """``c`` with ``||x - decode(encode(x))|| <= c ||x||`` for a sparse or low-rank codec:
    top-k keeps the ``k >= ratio * len`` largest (``c = sqrt(1 - ratio)``); random-k keeps
    some elements, one-bit sends ``mean|x| sign(x)`` (error ``||x||^2 - len mean|x|^2``),
    PowerSGD an orthogonal projection: ``c = 1``."""
    if cfg.get("compression") == "topk":
        return math.sqrt(max(0.0, 1.0 - float(cfg.get("topk_ratio", 0.01))))
    return 1.0


def norm_factor(cfg: Mapping[str, Any]) -> float:
    """``K`` with ``||average - all_reduce average|| <= K sum_i ||g_i|| / n`` on a round
    with no error-feedback residual: one encoding of each cross-machine input (a worker's
    gradient, or a machine's sum or shard of it, whose norms add up to at most
    ``sum_i ||g_i||``) errs by ``c`` times its norm; a Summation Service that re-encodes
    the decoded sum (top-k, one-bit under push/pull) errs by ``c`` times that sum's norm,
    at most ``(1 + c) sum_i ||g_i||``."""
    c = contraction(cfg)
    reencodes = cfg.get("transport") == "pushpull" and cfg.get("compression") in ("topk",
                                                                                  "onebit")
    return c * (2 + c) if reencodes else c

