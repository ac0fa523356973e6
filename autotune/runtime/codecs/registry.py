"""Codec names, their parameters, and how a configuration names a codec.

``make_codec("topk", ratio=0.01, world_size=4)`` builds one codec; ``codec_from_config``
builds the codec a configuration asks for. The codec parameters' domains live in
:mod:`autotune.runtime.config` (no torch there); the tuner's grid over them is
:func:`autotune.tuning.space.codec_params`.

Configuration keys read here: ``compression``, ``topk_ratio`` (topk), ``randomk_ratio``
(randomk), ``powersgd_rank`` (powersgd), ``compress_min_bytes`` (every lossy codec).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from autotune.runtime.config import (COMPRESS_MIN_BYTES, DEFAULT_POWERSGD_RANK,
                                     DEFAULT_RANDOMK_RATIO, DEFAULT_TOPK_RATIO, POWERSGD_RANKS,
                                     RANDOMK_RATIOS, TOPK_RATIOS)

from autotune.runtime.codecs.base import Codec, IdentityCodec
from autotune.runtime.codecs.fp16 import BF16Codec, FP16Codec
from autotune.runtime.codecs.onebit import OneBitCodec
from autotune.runtime.codecs.powersgd import PowerSGDCodec
from autotune.runtime.codecs.randomk import RandomKCodec
from autotune.runtime.codecs.selective import DEFAULT_COMPRESS_MIN_BYTES
from autotune.runtime.codecs.topk import TopKCodec

CODECS: dict[str, type[Codec]] = {
    "none": IdentityCodec,
    "fp16": FP16Codec,
    "bf16": BF16Codec,
    "topk": TopKCodec,
    "randomk": RandomKCodec,
    "onebit": OneBitCodec,
    "powersgd": PowerSGDCodec,
}

SPARSE_CODECS = ("topk", "randomk")


def make_codec(name: str, *, world_size: int = 1, seed: int = 0, **params: Any) -> Codec:
    """The codec called ``name`` with its parameters (``ratio`` for topk/randomk,
    ``rank`` for powersgd). ``world_size``: workers whose payloads get summed."""
    try:
        cls = CODECS[name]
    except KeyError:
        raise ValueError(f"unknown codec {name!r}; known: {', '.join(CODECS)}") from None
    try:
        return cls(world_size=world_size, seed=seed, **params)
    except TypeError as e:
        raise ValueError(f"bad parameters {params} for codec {name!r}: {e}") from None


def codec_from_config(config: Mapping[str, Any], *, world_size: int = 1, seed: int = 0) -> Codec:
    """The codec ``config["compression"]`` names, with its parameters from ``config``
    (defaults for missing ones)."""
    name = config.get("compression", "none")
    params: dict[str, Any] = {}
    if name == "topk":
        params["ratio"] = config.get("topk_ratio", DEFAULT_TOPK_RATIO)
    elif name == "randomk":
        params["ratio"] = config.get("randomk_ratio", DEFAULT_RANDOMK_RATIO)
    elif name == "powersgd":
        params["rank"] = config.get("powersgd_rank", DEFAULT_POWERSGD_RANK)
    return make_codec(name, world_size=world_size, seed=seed, **params)


def compress_min_bytes(config: Mapping[str, Any]) -> int:
    """The selective-compression threshold of ``config`` (default 1 MiB)."""
    return int(config.get("compress_min_bytes", DEFAULT_COMPRESS_MIN_BYTES))


__all__ = ["CODECS", "COMPRESS_MIN_BYTES", "POWERSGD_RANKS", "RANDOMK_RATIOS", "SPARSE_CODECS",
           "TOPK_RATIOS", "codec_from_config", "compress_min_bytes", "make_codec"]
