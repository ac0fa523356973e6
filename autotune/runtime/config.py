"""The runtime's own configuration: what one iteration of gradient averaging runs under.

:class:`RuntimeConfig` is typed and frozen: the transport and the intra-machine mode are
enums, every field is checked when it is made (:meth:`RuntimeConfig.of`), parameters that
the transport, intra mode or codec do not use are reset to their defaults (so one
behaviour has one configuration), and it crosses the wire as one int64 per field
(:meth:`encode`/:meth:`decode`; floats as their IEEE-754 bits: nothing is pickled).
What this job's world allows (servers launched, workers per machine, streams made at
bootstrap) is checked separately, against :class:`Limits`.

The tuner's :class:`~autotune.tuning.space.SearchSpace` is a grid of search points over these
fields (a subset of values of each); it maps its points onto a ``RuntimeConfig``, never
the other way round, so nothing here knows about tuning. The domains' values and
defaults live here, in the one table of knobs (:data:`KNOBS`: each knob's domain, default,
when it is active, whether it is a byte size, what it does), which
:mod:`autotune.tuning.space` builds its grid from and :mod:`autotune.units` shows
configurations by.

A ``RuntimeConfig`` is also a read-only mapping (``cfg["transport"] == "pushpull"``,
``dict(cfg)``), with plain values (strings, not enum members).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any, Iterator, Mapping, Sequence

from autotune.errors import AutotuneError

KiB = 1024
MiB = 1024 * KiB


class ConfigError(AutotuneError, ValueError):
    """A configuration (or an encoded one) is outside its domain, or not possible in this
    job; the message names the parameter and its domain."""


class Transport(str, Enum):
    """How gradients are summed: collective all-reduce among the workers (AIACC-Training)
    or push/pull through Summation Services (BytePS)."""

    ALLREDUCE = "allreduce"
    PUSHPULL = "pushpull"

    def __str__(self) -> str:
        return self.value


class Intra(str, Enum):
    """With several workers per machine: everyone sends across machines, reduce to a root
    and broadcast, or reduce-scatter + all-gather (BytePS §4.2)."""

    FLAT = "flat"
    ROOT = "root"
    SCATTER = "scatter"

    def __str__(self) -> str:
        return self.value


TRANSPORTS = tuple(t.value for t in Transport)
INTRA_MODES = tuple(m.value for m in Intra)
LOSSY_CODECS = ("fp16", "bf16", "topk", "randomk", "onebit", "powersgd")
CODEC_NAMES = ("none",) + LOSSY_CODECS

MAX_STREAMS = 64
DEFAULT_CHUNK_BYTES = 4 * MiB
MIN_CHUNK_BYTES = 64 * KiB
MAX_CHUNK_BYTES = 64 * MiB

# Codec parameters. The tuner searches the values below; the runtime runs any value in
# the field's range. Random-k gets its own, larger ratios: with error feedback an element
# waits ~1/ratio iterations to be sent, and at 1% it does not converge
# (docs/compression.md).
TOPK_RATIOS = (0.001, 0.01, 0.1)
DEFAULT_TOPK_RATIO = 0.01
RANDOMK_RATIOS = (0.05, 0.1, 0.25)
DEFAULT_RANDOMK_RATIO = 0.1
POWERSGD_RANKS = (1, 2, 4, 8)
DEFAULT_POWERSGD_RANK = 4
COMPRESS_MIN_BYTES = (64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB)
DEFAULT_COMPRESS_MIN_BYTES = 1 * MiB



@dataclass(frozen=True)
class Knob:
    """One knob of the runtime, in the one table of knobs (:data:`KNOBS`) that the runtime
    (:class:`RuntimeConfig` resets an inactive knob to its default), the tuner's
    :class:`~autotune.tuning.space.SearchSpace` (its parameters) and
    :mod:`autotune.units` (which knobs to show, byte sizes) all read.

    ``values``: the tuner's grid, widest first; ``()`` where only the job can say
    (``SearchSpace.of`` takes those from :class:`Limits`: streams, servers, transports,
    intra modes, reduce roots; the codecs from ``allow_lossy``). The runtime runs any
    value in the field's range, not only these. ``when``: the knob is active only while
    each named knob holds one of the listed values; an inactive knob holds its default, so
    one behaviour has one configuration. ``ordinal``/``log``: numeric and ordered (on a log
    scale); ``byte_size``: a size in bytes (shown as KiB/MiB)."""

    name: str
    default: Any
    doc: str
    values: tuple = ()
    when: tuple[tuple[str, tuple], ...] = ()
    ordinal: bool = False
    log: bool = False
    byte_size: bool = False

    def active(self, config: Mapping[str, Any]) -> bool:
        """Whether this knob matters in ``config`` (which holds every knob it depends on)."""
        return all(config.get(parent) in allowed for parent, allowed in self.when)


def log2_range(low: int, high: int) -> tuple[int, ...]:
    """The powers of two from ``low`` to ``high``."""
    return tuple(1 << e for e in range(low.bit_length() - 1, high.bit_length()))


#: Every knob of the runtime, in :class:`RuntimeConfig`'s field order (:class:`Knob`).
KNOBS: tuple[Knob, ...] = (
    Knob("streams", 1, "concurrent communication streams", ordinal=True),
    Knob("chunk_bytes", DEFAULT_CHUNK_BYTES,
         "partition size: small gradients packed up to it, large ones split",
         log2_range(MIN_CHUNK_BYTES, MAX_CHUNK_BYTES), ordinal=True, log=True,
         byte_size=True),
    Knob("transport", "allreduce",
         "allreduce among workers, or push/pull through Summation Services", TRANSPORTS),
    Knob("servers", 0, "dedicated Summation Service processes used",
         when=(("transport", ("pushpull",)),), ordinal=True),
    Knob("intra", "flat", "intra-machine strategy: flat, reduce to a root, or reduce-scatter",
         INTRA_MODES),
    Knob("reduce_root", 0, "local worker that reduces for its machine under intra=root",
         when=(("intra", ("root",)),)),
    Knob("compression", "none", "gradient codec", CODEC_NAMES),
    Knob("topk_ratio", DEFAULT_TOPK_RATIO, "fraction of a chunk's elements that topk sends",
         TOPK_RATIOS, when=(("compression", ("topk",)),), ordinal=True, log=True),
    Knob("randomk_ratio", DEFAULT_RANDOMK_RATIO,
         "fraction of a chunk's elements that randomk sends",
         RANDOMK_RATIOS, when=(("compression", ("randomk",)),), ordinal=True, log=True),
    Knob("powersgd_rank", DEFAULT_POWERSGD_RANK, "rank of PowerSGD's low-rank approximation",
         POWERSGD_RANKS, when=(("compression", ("powersgd",)),), ordinal=True, log=True),
    Knob("compress_min_bytes", DEFAULT_COMPRESS_MIN_BYTES,
         "chunks smaller than this travel uncompressed (HiPress)",
         COMPRESS_MIN_BYTES, when=(("compression", LOSSY_CODECS),), ordinal=True, log=True,
         byte_size=True),
)


#: all-reduce stream groups made at bootstrap when servers run, so that the workers can go
#: on alone if servers are lost (no group can be created once a member is dead)
FALLBACK_STREAMS = 4


@dataclass(frozen=True)
class Limits:
    """What a job's world allows: dedicated servers launched, workers on every machine
    (1 when machines differ), streams whose groups may be made, transports. The one
    home of these limits: the runtime checks configurations against them
    (:meth:`RuntimeConfig.check`) and the tuner's space is built from them."""

    servers: int = 0
    workers_per_machine: int = 1
    max_streams: int = 16
    transports: tuple[str, ...] = TRANSPORTS

    def after_server_loss(self) -> "Limits":
        """What is left once servers are lost: all-reduce among the workers, intra-machine
        flat, on the :data:`FALLBACK_STREAMS` stream groups made at bootstrap."""
        return Limits(servers=0, workers_per_machine=1,
                      max_streams=min(self.max_streams, FALLBACK_STREAMS),
                      transports=(Transport.ALLREDUCE.value,))


@dataclass(frozen=True, eq=False)
class RuntimeConfig(Mapping[str, Any]):
    """One configuration of the runtime (see the module docstring). Make one with
    :meth:`of`, which checks and canonicalises; the constructor does the same."""

    streams: int = 1
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    transport: Transport = Transport.ALLREDUCE
    servers: int = 0
    intra: Intra = Intra.FLAT
    reduce_root: int = 0
    compression: str = "none"
    topk_ratio: float = DEFAULT_TOPK_RATIO
    randomk_ratio: float = DEFAULT_RANDOMK_RATIO
    powersgd_rank: int = DEFAULT_POWERSGD_RANK
    compress_min_bytes: int = DEFAULT_COMPRESS_MIN_BYTES

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "transport", _enum(Transport, "transport", self.transport))
        set_(self, "intra", _enum(Intra, "intra", self.intra))
        for name in ("streams", "chunk_bytes", "servers", "reduce_root", "powersgd_rank",
                     "compress_min_bytes"):
            set_(self, name, _int(name, getattr(self, name)))
        for name in ("topk_ratio", "randomk_ratio"):
            set_(self, name, _ratio(name, getattr(self, name)))
        if self.compression not in CODEC_NAMES:
            raise ConfigError(f"compression={self.compression!r} is not one of "
                              f"{', '.join(CODEC_NAMES)}")
        if not 1 <= self.streams <= MAX_STREAMS:
            raise ConfigError(f"streams={self.streams} is outside 1..{MAX_STREAMS}")
        if self.chunk_bytes < 4 * KiB or self.chunk_bytes % 8:
            raise ConfigError(f"chunk_bytes={self.chunk_bytes} is not a multiple of 8 bytes "
                              "of at least 4096 (every dtype's elements fit whole)")
        for name in ("servers", "reduce_root", "compress_min_bytes"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} is negative")
        if self.powersgd_rank < 1:
            raise ConfigError(f"powersgd_rank={self.powersgd_rank} must be >= 1")
        # one behaviour, one configuration: what is not used takes its default
        for knob in KNOBS:
            if not knob.active(self):
                set_(self, knob.name, knob.default)

    # ------------------------------------------------------------------ making
    @classmethod
    def of(cls, config: Mapping[str, Any] | None = None) -> "RuntimeConfig":
        """From a mapping of field names (missing ones take their defaults); unknown
        names or values outside a field's domain raise :class:`ConfigError`."""
        if config is None:
            return cls()
        if isinstance(config, RuntimeConfig):
            return config
        if not isinstance(config, Mapping):
            raise ConfigError(f"a configuration is a mapping, got {type(config).__name__}")
        unknown = sorted(set(config) - set(NAMES))
        if unknown:
            raise ConfigError(f"unknown parameter(s) {', '.join(unknown)}; the runtime has "
                              f"{', '.join(NAMES)}")
        return cls(**dict(config))

    def replace(self, **changes: Any) -> "RuntimeConfig":
        return replace(self, **changes)

    def check(self, limits: Limits) -> "RuntimeConfig":
        """Raise :class:`ConfigError` if this job's world cannot run it; returns self."""
        if self.streams > limits.max_streams:
            raise ConfigError(f"streams={self.streams}: this job made groups for at most "
                              f"{limits.max_streams} (max_streams)")
        if self.transport.value not in limits.transports:
            raise ConfigError(f"transport={self.transport.value!r} is not possible in this "
                              f"job (only {', '.join(limits.transports)})")
        if self.servers > limits.servers:
            raise ConfigError(f"servers={self.servers} but the job has {limits.servers}")
        if self.intra is not Intra.FLAT and limits.workers_per_machine < 2:
            raise ConfigError(f"intra={self.intra.value!r} needs several workers on every "
                              "machine")
        if self.reduce_root >= limits.workers_per_machine:
            raise ConfigError(f"reduce_root={self.reduce_root} is not a local worker index "
                              f"0..{limits.workers_per_machine - 1}")
        return self

    @property
    def pushpull(self) -> bool:
        return self.transport is Transport.PUSHPULL

    @property
    def lossy(self) -> bool:
        return self.compression != "none"

    # ------------------------------------------------------------------ the wire
    def encode(self) -> list[int]:
        """One int64 per field (enum index, codec index, float bits)."""
        out = []
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Enum):
                out.append(list(type(v)).index(v))
            elif f.name == "compression":
                out.append(CODEC_NAMES.index(v))
            elif isinstance(v, float):
                out.append(struct.unpack("<q", struct.pack("<d", v))[0])
            else:
                out.append(int(v))
        return out

    @classmethod
    def decode(cls, ints: Sequence[int]) -> "RuntimeConfig":
        """Inverse of :meth:`encode`; :class:`ConfigError` on a malformed vector."""
        ints = [int(i) for i in ints]
        if len(ints) != len(NAMES):
            raise ConfigError(f"an encoded configuration has {len(NAMES)} ints, got {len(ints)}")
        values: dict[str, Any] = {}
        for name, i in zip(NAMES, ints):
            kind = _KINDS[name]
            try:
                if kind is float:
                    values[name] = struct.unpack("<d", struct.pack("<q", i))[0]
                elif kind is int:
                    values[name] = i
                elif 0 <= i < len(kind):
                    values[name] = kind[i]
                else:
                    raise IndexError(i)
            except (IndexError, struct.error):
                raise ConfigError(f"{name}: code {i} is outside its domain") from None
        return cls(**values)

    # ------------------------------------------------------------------ mapping view
    def __getitem__(self, name: str) -> Any:
        if name not in _KINDS:
            raise KeyError(name)
        v = getattr(self, name)
        return v.value if isinstance(v, Enum) else v

    def __iter__(self) -> Iterator[str]:
        return iter(NAMES)

    def __len__(self) -> int:
        return len(NAMES)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.items())

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.items() if v != _DEFAULTS[k]}
        return f"RuntimeConfig({', '.join(f'{k}={v!r}' for k, v in changed.items())})"


def _enum(kind: type[Enum], name: str, value: Any) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not one of "
                          f"{', '.join(m.value for m in kind)}") from None


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ConfigError(f"{name}={value!r} is not an integer")
    return int(value)


def _ratio(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(f"{name}={value!r} is not a fraction in (0, 1]")
    return float(value)


NAMES: tuple[str, ...] = tuple(f.name for f in fields(RuntimeConfig))
_DEFAULTS: dict[str, Any] = {k.name: k.default for k in KNOBS}
_KINDS: dict[str, Any] = {
    "streams": int, "chunk_bytes": int, "transport": tuple(Transport), "servers": int,
    "intra": tuple(Intra), "reduce_root": int, "compression": CODEC_NAMES,
    "topk_ratio": float, "randomk_ratio": float, "powersgd_rank": int,
    "compress_min_bytes": int,
}
#: identifies the fields and their codes, so that ranks can check they agree
SIGNATURE = int.from_bytes(hashlib.sha256(repr((NAMES, TRANSPORTS, INTRA_MODES, CODEC_NAMES))
                                           .encode()).digest()[:7], "big")
