"""Numbers for people: byte sizes, scores with their unit, durations, configurations.

One place for every human-readable number autotune prints (``autotune db``, ``autotune
report``, ``autotune tune``, the session's table), except speed-ups: those are
:mod:`autotune.speedup`'s. Machine formats (``--json``, CSV) keep
the raw numbers: sizes in bytes in fields ending in ``_bytes``, times in seconds, scores as
floats beside a ``unit`` field (one of :data:`UNITS`).

Nothing here imports torch or rich. Which parameters are byte sizes and when each
matters come from the runtime's table of knobs (:data:`autotune.runtime.config.KNOBS`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from autotune.runtime.config import KNOBS

#: the units a score (higher is better) can be in; a run has one. Throughput is samples/s
#: (or it/s without a batch size); a run scored by goodput (lossy codecs judged by their
#: statistical efficiency: goodput = throughput x efficiency, docs/compression.md) has
#: its own units, so that no table, ``db best`` or warm start ranks one against the other
UNITS = ("samples/s", "it/s", "goodput samples/s", "goodput it/s", "simulated samples/s",
         "simulated it/s")
#: the start of a goodput unit
GOODPUT = "goodput "
#: shown where a run's unit is unknown (runs stored before schema v4)
UNKNOWN_UNIT = "?"

#: configuration parameters that are byte sizes (the runtime's table of knobs says which)
BYTE_PARAMS = frozenset(k.name for k in KNOBS if k.byte_size)
#: each parameter's activity condition (``servers`` only under ``transport=pushpull``,
#: ``reduce_root`` only under ``intra=root``, codec parameters only under their codecs),
#: in the knobs' order
_WHEN = {k.name: k.when for k in KNOBS}

_BINARY = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def fmt_bytes(n: float | int | None) -> str:
    """``67108864`` -> ``"64 MiB"``, ``1536`` -> ``"1.5 KiB"``, ``100`` -> ``"100 B"``."""
    if n is None:
        return ""
    n = float(n)
    for unit, size in _BINARY:
        if abs(n) >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_efficiency(x: float | None) -> str:
    """A statistical efficiency (goodput = throughput x it): ``0.83``; ``""`` for None
    (a lossless trial, or one scored by throughput)."""
    return "" if x is None or not math.isfinite(float(x)) else f"{float(x):.2f}"


def fmt_number(x: float | int | None) -> str:
    """A throughput-like number: thousands separators from 100 up, else 3 significant
    digits (``3759.2`` -> ``"3,759"``, ``12.54`` -> ``"12.5"``, ``0.01234`` -> ``"0.0123"``)."""
    if x is None:
        return ""
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if x == 0:
        return "0"
    return f"{x:.3g}"


def alike_units(unit: str) -> tuple[str, ...]:
    """The units whose runs' best configurations a job scored in ``unit`` may start from:
    samples/s and it/s of the same kind (measured, goodput or simulated), which differ by
    the job's samples per step, a constant of the job; ``unit`` first. A score in one is
    never ranked against a score in the other (a warm start ranks a stored run's best by
    its speed-up over that run's default, :meth:`autotune.store.nearest.NearestRuns.nearest`)."""
    for kind in ("samples/s", "it/s"):
        if unit.endswith(kind):
            other = "it/s" if kind == "samples/s" else "samples/s"
            return unit, unit[: -len(kind)] + other
    return (unit,)


def unit_of(unit: str | None) -> str:
    """A run's unit for display (``"?"`` when not recorded)."""
    return unit or UNKNOWN_UNIT


def fmt_score(x: float | None, unit: str | None = None, spread: float | None = None) -> str:
    """``"3,759 samples/s"``, with the spread: ``"3,759 ± 41 samples/s"``; ``""`` for None.
    Pass :func:`unit_of` the run's unit to show ``?`` where it is unknown."""
    if x is None:
        return ""
    text = fmt_number(x)
    if spread is not None and math.isfinite(spread):
        text += f" ± {fmt_number(spread)}"
    return f"{text} {unit}" if unit else text


def fmt_seconds(s: float | None) -> str:
    """``0.0123`` -> ``"12.3 ms"``, ``1.94`` -> ``"1.94 s"``, ``125`` -> ``"2 min 5 s"``."""
    if s is None:
        return ""
    s = float(s)
    if not math.isfinite(s):
        return str(s)
    if abs(s) < 1:
        return f"{s * 1e3:.3g} ms"
    if abs(s) < 60:
        return f"{s:.3g} s"
    m, rest = divmod(round(s), 60)
    if m < 60:
        return f"{m} min {rest} s"
    h, m = divmod(m, 60)
    return f"{h} h {m} min"


def fmt_value(name: str, value: Any, *, compact: bool = False) -> str:
    """One configuration value: byte parameters in KiB/MiB (``compact``: no space,
    ``"64MiB"``, so a wrapped line never splits it), other values as they are."""
    if name in BYTE_PARAMS and isinstance(value, (int, float)) and not isinstance(value, bool):
        text = fmt_bytes(value)
        return text.replace(" ", "") if compact else text
    return str(value)


def parse_value(name: str, text: str) -> Any:
    """A configuration value as a person writes it: ``4MiB``/``256KiB``/``1GiB`` (or
    bytes) for byte parameters, integers, fractions, names (``pushpull``)."""
    text = text.strip()
    if name in BYTE_PARAMS:
        for unit, size in _BINARY:
            if text.lower().endswith(unit.lower()):
                number = float(text[: -len(unit)])
                if number * size != int(number * size):
                    raise ValueError(f"{name}={text}: not a whole number of bytes")
                return int(number * size)
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_knob(text: str) -> tuple[str, Any]:
    """``"chunk_bytes=4MiB"`` -> ``("chunk_bytes", 4194304)``; several values separated by
    commas (``"streams=1,2,4"``) narrow the knob to them: a list."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or not name or not values.strip():
        raise ValueError(f"{text!r} is not KNOB=VALUE (e.g. chunk_bytes=4MiB, streams=1,2,4)")
    parsed = [parse_value(name, v) for v in values.split(",") if v.strip()]
    return name, parsed[0] if len(parsed) == 1 else parsed


def active(config: Mapping[str, Any], name: str) -> bool:
    """Whether parameter ``name`` matters in ``config`` (unknown names always do)."""
    when = _WHEN.get(name, ())
    return all(config.get(parent, None) in allowed for parent, allowed in when
               if parent in config)


def ordered(names: Any) -> list[str]:
    """Parameter names in the knobs' order (unknown names last, sorted)."""
    order = {name: i for i, name in enumerate(_WHEN)}
    return sorted(names, key=lambda k: (order.get(k, len(order)), k))


def shown_params(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameters of ``config`` that matter for it, in order (``reduce_root`` is left
    out under ``intra=scatter``, ``servers`` under ``transport=allreduce``, ...)."""
    if not config:
        return {}
    return {k: config[k] for k in ordered(config) if active(config, k)}


def fmt_config(config: Mapping[str, Any] | None, *, sep: str = " ") -> str:
    """``"streams=4 chunk_bytes=64MiB transport=allreduce intra=flat compression=none"``:
    only the parameters that matter (:func:`shown_params`), sizes compact."""
    return sep.join(f"{k}={fmt_value(k, v, compact=True)}"
                    for k, v in shown_params(config).items())
