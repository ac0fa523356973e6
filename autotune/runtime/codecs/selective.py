"""Selective compression (HiPress §3.3): which chunks are worth compressing.

The runtime rule is a threshold, tuned like any other parameter: a chunk of fewer than
``compress_min_bytes`` bytes (float32) travels uncompressed (:func:`compresses`,
:func:`codec_for_chunk`). Every rank applies it to the same plan, so all agree.

HiPress's cost model, for choosing the threshold's domain and for the simulator:
synchronising an m-byte gradient split into K partitions among N nodes costs

    T_orig(m, K) = alpha * T_send(m / K)                                          (Eq. 1)
    T_cpr(m, K)  = alpha * T_send(r m / K) + beta * T_enc(m / K) + gamma * T_dec(r m / K)   (Eq. 2)

with (alpha, beta, gamma) from Table 3 (:func:`sync_steps`). Codecs whose payloads can be
summed without decoding (HiPress's low-rank case; here every ``summable`` codec) need one
encode and one decode: beta = gamma = 1.
"""

from __future__ import annotations

from typing import Callable

from autotune.runtime.config import DEFAULT_COMPRESS_MIN_BYTES

from autotune.runtime.codecs.base import Codec, IdentityCodec

CostFn = Callable[[float], float]


def compresses(nbytes: int, compress_min_bytes: int = DEFAULT_COMPRESS_MIN_BYTES) -> bool:
    """Whether a chunk of ``nbytes`` (float32) bytes is compressed."""
    if nbytes < 0 or compress_min_bytes < 0:
        raise ValueError(f"sizes must be >= 0, got {nbytes}, {compress_min_bytes}")
    return nbytes >= compress_min_bytes


def codec_for_chunk(
    codec: Codec, nbytes: int, compress_min_bytes: int = DEFAULT_COMPRESS_MIN_BYTES
) -> Codec:
    """``codec`` for a chunk that is compressed, the identity codec for one that is not."""
    if codec.lossless or compresses(nbytes, compress_min_bytes):
        return codec
    return IdentityCodec(world_size=codec.world_size, seed=codec.seed)


def sync_steps(strategy: str, n: int, k: int = 1, summable: bool = False) -> tuple[int, int, int]:
    """(alpha, beta, gamma) of HiPress Table 3 for ``strategy`` in {"ring", "ps"} with
    ``n`` nodes and ``k`` partitions; ``summable`` codecs use the low-rank row."""
    if n < 1 or k < 1:
        raise ValueError(f"n and k must be >= 1, got n={n}, k={k}")
    if strategy == "ring":
        return (2 * (n - 1), 1, 1) if summable else (2 * (n - 1), n, n)
    if strategy == "ps":
        return (2 * n, 1, 1) if summable else (2 * n, k + 1, n + 1)
    raise ValueError(f"strategy must be 'ring' or 'ps', got {strategy!r}")


def t_sync_orig(m: float, k: int, alpha: int, t_send: CostFn) -> float:
    """Eq. 1: time to synchronise m bytes in k partitions without compression."""
    return alpha * t_send(m / k)


def t_sync_cpr(
    m: float, k: int, r: float, steps: tuple[int, int, int],
    t_send: CostFn, t_enc: CostFn, t_dec: CostFn,
) -> float:
    """Eq. 2: the same with compression at rate ``r`` (payload bytes / raw bytes)."""
    alpha, beta, gamma = steps
    return alpha * t_send(r * m / k) + beta * t_enc(m / k) + gamma * t_dec(r * m / k)


def worth_compressing(
    m: float, k: int, r: float, steps: tuple[int, int, int],
    t_send: CostFn, t_enc: CostFn, t_dec: CostFn,
) -> bool:
    """HiPress's decision for one gradient: compress when Eq. 2 beats Eq. 1."""
    return t_sync_cpr(m, k, r, steps, t_send, t_enc, t_dec) < t_sync_orig(m, k, steps[0], t_send)


def break_even_bytes(
    r: float, steps: tuple[int, int, int], t_send: CostFn, t_enc: CostFn, t_dec: CostFn,
    sizes: tuple[int, ...] = tuple(1 << e for e in range(10, 31)),
) -> int | None:
    """The smallest size in ``sizes`` (unpartitioned) from which compression pays off
    for every larger size in ``sizes``; ``None`` if it never does."""
    best = None
    for m in sorted(sizes, reverse=True):
        if not worth_compressing(m, 1, r, steps, t_send, t_enc, t_dec):
            break
        best = m
    return best
