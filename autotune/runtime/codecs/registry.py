"""Codec names, their parameters, and their conditional dimensions of the search space.

``make_codec("topk", ratio=0.01, world_size=4)`` builds one codec; ``codec_from_config``
builds the codec a configuration asks for. ``codec_params(values)`` gives the codec
parameters as :class:`autotune.space.Param` objects, each active only under the codecs
that use it, for ``space.with_params(*codec_params(space["compression"].values))``.

Configuration keys read here: ``compression``, ``topk_ratio`` (topk, randomk),
``powersgd_rank`` (powersgd), ``compress_min_bytes`` (every lossy codec).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from autotune.space import KiB, LOSSY_CODECS, MiB, Param

from .base import Codec, IdentityCodec
from .fp16 import BF16Codec, FP16Codec
from .onebit import OneBitCodec
from .powersgd import PowerSGDCodec
from .randomk import RandomKCodec
from .selective import DEFAULT_COMPRESS_MIN_BYTES
from .topk import TopKCodec

CODECS: dict[str, type[Codec]] = {
    "none": IdentityCodec,
    "fp16": FP16Codec,
    "bf16": BF16Codec,
    "topk": TopKCodec,
    "randomk": RandomKCodec,
    "onebit": OneBitCodec,
    "powersgd": PowerSGDCodec,
}

TOPK_RATIOS = (0.001, 0.01, 0.1)
DEFAULT_TOPK_RATIO = 0.01
POWERSGD_RANKS = (1, 2, 4, 8)
DEFAULT_POWERSGD_RANK = 4
COMPRESS_MIN_BYTES = (64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB)

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
    if name in SPARSE_CODECS:
        params["ratio"] = config.get("topk_ratio", DEFAULT_TOPK_RATIO)
    elif name == "powersgd":
        params["rank"] = config.get("powersgd_rank", DEFAULT_POWERSGD_RANK)
    return make_codec(name, world_size=world_size, seed=seed, **params)


def compress_min_bytes(config: Mapping[str, Any]) -> int:
    """The selective-compression threshold of ``config`` (default 1 MiB)."""
    return int(config.get("compress_min_bytes", DEFAULT_COMPRESS_MIN_BYTES))


def codec_params(compression_values: Sequence[str] = ("none",) + LOSSY_CODECS) -> tuple[Param, ...]:
    """The codec parameters as conditional dimensions, for the codecs in
    ``compression_values`` (the domain of ``compression`` in the space). A parameter
    none of whose codecs is in the domain is left out; with no lossy codec, ``()``."""
    values = tuple(compression_values)
    unknown = [v for v in values if v not in CODECS]
    if unknown:
        raise ValueError(f"unknown codec(s) {unknown}; known: {', '.join(CODECS)}")
    lossy = tuple(v for v in values if v != "none")
    out: list[Param] = []
    sparse = tuple(v for v in values if v in SPARSE_CODECS)
    if sparse:
        out.append(Param(
            "topk_ratio", TOPK_RATIOS, DEFAULT_TOPK_RATIO, ordinal=True, log=True,
            when=(("compression", sparse),),
            doc="fraction of a chunk's elements that topk/randomk send",
        ))
    if "powersgd" in values:
        out.append(Param(
            "powersgd_rank", POWERSGD_RANKS, DEFAULT_POWERSGD_RANK, ordinal=True, log=True,
            when=(("compression", ("powersgd",)),),
            doc="rank of PowerSGD's low-rank approximation",
        ))
    if lossy:
        out.append(Param(
            "compress_min_bytes", COMPRESS_MIN_BYTES, DEFAULT_COMPRESS_MIN_BYTES,
            ordinal=True, log=True, when=(("compression", lossy),),
            doc="chunks smaller than this travel uncompressed (HiPress selective compression)",
        ))
    return tuple(out)
