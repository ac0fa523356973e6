"""What a gradient codec costs: bytes on the wire and encode/decode time.

:data:`DEFAULT_CODECS` holds rough CPU numbers (Gbit/s of float32 input, one core,
error feedback included); :func:`calibrate_codecs` replaces them by timing the real
codecs of :mod:`autotune.runtime.codecs` on this machine (when that package is there),
and a cluster's ``codecs`` field overrides single entries. ``summable`` codecs are summed
as they are (all-reduce, or a Summation Service adding buffers); the others are
all-gathered (or decoded, summed and re-encoded by a Summation Service), as in
:mod:`autotune.runtime.codecs.base`.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping


@dataclass(frozen=True)
class CodecCost:
    """``ratio``: wire bytes / float32 bytes; throughputs in Gbit/s of float32 input."""

    name: str
    ratio: float
    encode_gbps: float = math.inf
    decode_gbps: float = math.inf
    summable: bool = True


DEFAULT_CODECS: dict[str, CodecCost] = {
    c.name: c
    for c in (
        CodecCost("none", 1.0),
        CodecCost("fp16", 0.5, 40.0, 40.0, True),
        CodecCost("bf16", 0.5, 40.0, 40.0, True),
        CodecCost("topk", 0.02, 4.0, 40.0, False),       # 1%: float32 values + int32 indices
        CodecCost("randomk", 0.1, 20.0, 20.0, True),     # shared indices: values only (10%)
        CodecCost("onebit", 1 / 32 + 1e-4, 16.0, 24.0, False),
        CodecCost("powersgd", 0.05, 8.0, 8.0, True),
    )
}

_calibrated: dict[str, CodecCost] = {}


def codec_table(overrides: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, CodecCost]:
    """Defaults, then calibrated values (if :func:`calibrate_codecs` ran), then overrides."""
    table = {**DEFAULT_CODECS, **_calibrated}
    for name, fields in (overrides or {}).items():
        base = table.get(name, CodecCost(name, 1.0))
        table[name] = replace(base, **dict(fields))
    return table


def _codec_classes() -> dict[str, type]:
    """Concrete codec classes of ``autotune.runtime.codecs`` by name ({} if absent)."""
    try:
        pkg = importlib.import_module("autotune.runtime.codecs")
        base = importlib.import_module("autotune.runtime.codecs.base")
    except ImportError:
        return {}
    modules = [pkg, base]
    for info in pkgutil.iter_modules(getattr(pkg, "__path__", [])):
        try:
            modules.append(importlib.import_module(f"{pkg.__name__}.{info.name}"))
        except ImportError:
            continue
    found: dict[str, type] = {}
    for mod in modules:
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if (issubclass(cls, base.Codec) and not inspect.isabstract(cls)
                    and isinstance(getattr(cls, "name", None), str) and cls.name != "?"):
                found.setdefault(cls.name, cls)
    return found


def time_codec(name: str, numel: int, *, device: Any = "cpu", repeats: int = 3,
               seconds: float = 0.0) -> CodecCost | None:
    """Time the real codec ``name`` encoding and decoding a ``numel``-element float32
    chunk on ``device``: the best of at least ``repeats`` rounds (more while under
    ``seconds``). ``None`` when the codec is unknown or cannot run here."""
    cls = _codec_classes().get(name)
    if cls is None:
        return None
    import torch

    device = torch.device(device)
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0)).to(device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    try:
        codec = cls(world_size=2, seed=0)
        enc = dec = math.inf
        began, rounds = time.perf_counter(), 0
        while rounds < repeats or (time.perf_counter() - began < seconds and rounds < 50):
            t0 = time.perf_counter()
            payload = codec.encode(x)
            sync()
            t1 = time.perf_counter()
            codec.decode(payload, numel)
            sync()
            t2 = time.perf_counter()
            enc, dec = min(enc, t1 - t0), min(dec, t2 - t1)
            rounds += 1
        gbits = numel * 4 * 8 / 1e9
        return CodecCost(name, float(codec.ratio(numel)),
                         math.inf if name == "none" else gbits / max(enc, 1e-9),
                         math.inf if name == "none" else gbits / max(dec, 1e-9),
                         bool(getattr(codec, "summable", True)))
    except Exception:  # a codec that cannot run here keeps its default
        return None


def calibrate_codecs(numel: int = 1 << 20, repeats: int = 3,
                     names: list[str] | None = None, install: bool = True) -> dict[str, CodecCost]:
    """Time the real codecs on a ``numel``-element float32 chunk (best of ``repeats``;
    :func:`time_codec`).

    Returns the measured :class:`CodecCost` per codec (empty when
    ``autotune.runtime.codecs`` is not importable) and, with ``install``, makes them the
    simulator's defaults for this process. Ratios come from the codecs' own payload sizes.
    """
    out: dict[str, CodecCost] = {}
    for name in sorted(_codec_classes()):
        if names is not None and name not in names:
            continue
        cost = time_codec(name, numel, repeats=repeats)
        if cost is not None:
            out[name] = cost
    if install:
        _calibrated.update(out)
    return out


def reset_calibration() -> None:
    """Forget calibrated values (back to :data:`DEFAULT_CODECS`)."""
    _calibrated.clear()
