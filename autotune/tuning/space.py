"""The tunable parameters of the communication runtime and their domains.

A *configuration* (``Config``) is a plain ``dict`` mapping every parameter name to a
value. A :class:`SearchSpace` is built from the facts of a job (how many Summation
Service processes were launched, workers per machine, which local workers may be a
reduce root, whether lossy codecs are allowed) and knows, for each parameter, its
finite domain, its default and when it is *active*. An inactive parameter (``servers``
under ``transport=allreduce``, ``reduce_root`` unless ``intra=root``) always holds its
default, so two configurations that behave the same compare equal.

Every domain is finite and ordered, so a configuration encodes as one integer per
parameter: the index of its value in the domain, what model-based searchers search over
and the key of a configuration. ``decode(encode(c)) == c`` for every valid ``c``. (What
crosses the wire between ranks is the runtime's own encoding, ``RuntimeConfig.encode``.)

The domains come from the runtime's :class:`~autotune.runtime.config.Limits`
(:meth:`SearchSpace.of`); a user may pin or narrow any knob (``fixed``), checked against
what the runtime can run.

Nothing here imports torch: searchers use this module and know nothing of torch.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping, Sequence

from autotune.errors import did_you_mean

# The knobs, their domains and defaults are the runtime's (its table KNOBS); the space is
# a grid of search points over them. (MiB is re-exported: tests and benchmarks import it
# from here.)
from autotune.runtime.config import (
    DEFAULT_CHUNK_BYTES, INTRA_MODES, KNOBS, LOSSY_CODECS, MAX_CHUNK_BYTES, MIN_CHUNK_BYTES,
    NAMES, TRANSPORTS, ConfigError, Knob, KiB, Limits, MiB, RuntimeConfig,  # noqa: F401
    log2_range)

Config = dict[str, Any]

#: chunk size of the push/pull seed (:meth:`SearchSpace.seeds`); on the emulated cluster
#: push/pull reached 0.88-0.93 of BytePS's optimum at 256 KiB, 0.57-0.63 at 4 MiB
PUSHPULL_SEED_CHUNK_BYTES = 256 * KiB


@dataclass(frozen=True)
class Param:
    """One tunable parameter with a finite, ordered domain.

    ``ordinal`` parameters are numeric and ordered (``streams``, ``chunk_bytes``,
    ``servers``): searchers may move along them and scale them. Other parameters are
    categorical. ``when`` maps another parameter's name to the values under which this
    one is active; an inactive parameter holds ``default``.
    """

    name: str
    values: tuple
    default: Any
    ordinal: bool = False
    log: bool = False
    when: tuple[tuple[str, tuple], ...] = ()
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"parameter {self.name!r} has an empty domain")
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"parameter {self.name!r} has repeated values: {self.values}")
        if self.default not in self.values:
            raise ValueError(
                f"default {self.default!r} of {self.name!r} is not in its domain {self.values}"
            )
        if self.ordinal and list(self.values) != sorted(self.values):
            raise ValueError(f"ordinal parameter {self.name!r} must have sorted values")

    def index(self, value: Any) -> int:
        try:
            return self.values.index(value)
        except ValueError:
            raise ConfigError(
                f"{self.name}={value!r} is not in its domain {self.describe()}"
            ) from None

    def describe(self) -> str:
        """The domain in words, for error messages."""
        if self.ordinal and len(self.values) > 6:
            return f"{{{self.values[0]}, {self.values[1]}, ..., {self.values[-1]}}}"
        return "{" + ", ".join(repr(v) if isinstance(v, str) else str(v) for v in self.values) + "}"

    def active(self, config: Mapping[str, Any]) -> bool:
        return all(config.get(parent) in allowed for parent, allowed in self.when)

    def nearest(self, value: float) -> Any:
        """The domain value closest to ``value`` (log distance for log parameters)."""
        if not self.ordinal:
            raise TypeError(f"{self.name!r} is categorical")
        if self.log:
            value = max(value, 1e-300)
            return min(self.values, key=lambda v: abs(math.log(v) - math.log(value)))
        return min(self.values, key=lambda v: abs(v - value))


@dataclass(frozen=True)
class SearchSpace:
    """An ordered collection of :class:`Param`; see the module docstring."""

    params: tuple[Param, ...]
    facts: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    # ------------------------------------------------------------------ building
    @classmethod
    def of(cls, limits: Limits, *, root_candidates: Sequence[int] | None = None,
           allow_lossy: bool = False, fixed: Mapping[str, Any] | None = None) -> "SearchSpace":
        """The space of a job whose world allows ``limits`` (the runtime's
        :class:`~autotune.runtime.config.Limits`); see :meth:`build` for the rest."""
        return cls.build(k_max=limits.servers, workers_per_machine=limits.workers_per_machine,
                         max_streams=limits.max_streams, transports=limits.transports,
                         root_candidates=root_candidates, allow_lossy=allow_lossy, fixed=fixed)

    @classmethod
    def build(
        cls,
        *,
        k_max: int = 0,
        workers_per_machine: int = 1,
        root_candidates: Sequence[int] | None = None,
        allow_lossy: bool = False,
        max_streams: int = Limits.max_streams,
        min_chunk_bytes: int = MIN_CHUNK_BYTES,
        max_chunk_bytes: int = MAX_CHUNK_BYTES,
        transports: Sequence[str] = TRANSPORTS,
        fixed: Mapping[str, Any] | None = None,
    ) -> "SearchSpace":
        """The space of a job, from its facts.

        ``k_max``: dedicated Summation Service processes launched (``servers`` ranges
        over 0..k_max). ``workers_per_machine``: with more than one, the intra-machine
        strategies ``root`` and ``scatter`` join ``flat``. ``root_candidates``: local
        worker indices allowed as reduce root, best first (from the topology classifier;
        default: all local workers). ``allow_lossy``: let compression codecs in.
        ``transports``: a subset of :data:`TRANSPORTS` (after a server loss, all-reduce only).
        ``fixed``: knobs the user pins, ``{name: value}``, or narrows, ``{name: [values]}``
        (as BytePS's ``BYTEPS_PARTITION_BYTES`` or DDP's ``bucket_cap_mb`` fix the
        partition size); a value outside the tuner's grid is fine if the runtime can run
        it in this job, anything else is a :class:`ConfigError` naming the knob.
        """
        return cls(*_job_params(k_max, workers_per_machine, root_candidates, allow_lossy,
                                 max_streams, min_chunk_bytes, max_chunk_bytes, transports,
                                 fixed or {}))

    # ---------------------------------------------------------------- inspection
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def __getitem__(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def __len__(self) -> int:
        return len(self.params)

    def default(self) -> Config:
        return {p.name: p.default for p in self.params}

    def seeds(self) -> list[Config]:
        """Configurations worth a trial in any job, tried first after a warm start: the
        default and, when servers were launched, push/pull through all of them (BytePS,
        the BytePS paper (OSDI 2020, section 4.1): more Summation Services put fewer bytes on each NIC) with
        chunks of :data:`PUSHPULL_SEED_CHUNK_BYTES` (a Summation Service returns a sum
        only once every part of its chunk is in, so push/pull wants smaller chunks than
        all-reduce)."""
        default = self.default()
        out = [default]
        k_max = int(dict(self.facts).get("k_max", 0))
        if k_max > 0:
            chunk = self["chunk_bytes"].nearest(PUSHPULL_SEED_CHUNK_BYTES)
            out.append(self.validate({**default, "transport": "pushpull", "servers": k_max,
                                      "chunk_bytes": chunk}))
        return out

    @property
    def lossy(self) -> bool:
        """Whether a lossy codec is in the space."""
        return "compression" in self.names and self["compression"].values != ("none",)

    def lossless(self, keep: Sequence[str] = ()) -> "SearchSpace":
        """This space with ``compression`` narrowed to ``none`` and the codecs ``keep`` it
        has (the codec parameters stay, inactive where they do not apply: a configuration
        of one space is one of the other, with the same key)."""
        if not self.lossy:
            return self
        params = tuple(replace(p, values=("none", *(v for v in p.values if v in keep)),
                               default="none") if p.name == "compression"
                       else p for p in self.params)
        return SearchSpace(params, self.facts)

    def signature(self) -> int:
        """A 63-bit integer identifying the domains, so ranks can check they agree."""
        text = json.dumps([[p.name, list(p.values), p.default] for p in self.params])
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1

    def size(self) -> int:
        """Number of distinct canonical configurations."""
        return sum(1 for _ in self.all_configs())

    # ---------------------------------------------------------------- validation
    def canonical(self, config: Mapping[str, Any]) -> Config:
        """``config`` with every inactive parameter reset to its default (no checks), and
        a codec that can encode no chunk made ``none`` (:meth:`dead_codec`), where the
        space has ``none``: the same configuration as the runtime runs it."""
        out = dict(config)
        if self.dead_codec(out) and "none" in self["compression"].values:
            out["compression"] = "none"
        for p in self.params:
            if not p.active(out):
                out[p.name] = p.default
        return out

    def dead_codec(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config`` names a codec that encodes no chunk: the runtime encodes
        only chunks of ``compress_min_bytes`` or more, and under a codec no chunk is
        larger than ``chunk_bytes``, so with ``compress_min_bytes > chunk_bytes`` it runs
        lossless under a codec's name (issue 63: about half a cloud-codecs run's codec
        trials were such, and the searchers learnt a flat codec landscape from them)."""
        codec = config.get("compression", "none")
        if codec == "none" or "compress_min_bytes" not in self.names:
            return False
        least = config.get("compress_min_bytes", self["compress_min_bytes"].default)
        chunk = config.get("chunk_bytes", self["chunk_bytes"].default
                           if "chunk_bytes" in self.names else None)
        return chunk is not None and least > chunk

    def validate(self, config: Mapping[str, Any]) -> Config:
        """Check ``config`` and return its canonical, complete form.

        Missing parameters take their defaults; unknown names and values outside a
        domain raise :class:`ConfigError` naming the parameter and its domain.
        """
        if not isinstance(config, Mapping):
            raise ConfigError(f"a configuration is a dict, got {type(config).__name__}")
        unknown = sorted(set(config) - set(self.names))
        if unknown:
            raise ConfigError(
                f"unknown parameter(s) {', '.join(unknown)}; the space has {', '.join(self.names)}"
            )
        full = {p.name: config.get(p.name, p.default) for p in self.params}
        for p in self.params:
            value = full[p.name]
            if p.active(full):
                if isinstance(value, bool) or (
                    p.ordinal and not isinstance(value, (int, float))
                ):
                    raise ConfigError(
                        f"{p.name}={value!r} is not in its domain {p.describe()}"
                    )
                p.index(value)
        return self.canonical(full)

    def contains(self, config: Mapping[str, Any]) -> bool:
        try:
            self.validate(config)
        except ConfigError:
            return False
        return True

    def project(self, config: Mapping[str, Any]) -> Config | None:
        """Map a configuration from another space into this one, or ``None``.

        Ordinal values are clipped/snapped to this space's domain; unknown names are
        ignored; a categorical value this space lacks (a codec not allowed here) makes the
        configuration unusable, so ``None`` is returned.
        """
        out: Config = {}
        for p in self.params:
            if p.name not in config:
                continue
            value = config[p.name]
            if p.ordinal and isinstance(value, (int, float)) and not isinstance(value, bool):
                out[p.name] = p.nearest(value)
            else:
                out[p.name] = value
        out = {p.name: out.get(p.name, p.default) for p in self.params}
        try:
            return self.validate(self.canonical(out))
        except ConfigError:
            return None

    # ------------------------------------------------------------------ encoding
    def encode(self, config: Mapping[str, Any]) -> list[int]:
        """One int per parameter: the index of its value. Validates first."""
        c = self.validate(config)
        return [p.index(c[p.name]) for p in self.params]

    def decode(self, ints: Sequence[int]) -> Config:
        """Inverse of :meth:`encode`; raises :class:`ConfigError` on a bad vector."""
        ints = [int(i) for i in ints]
        if len(ints) != len(self.params):
            raise ConfigError(
                f"encoded configuration has {len(ints)} ints, the space has {len(self.params)} parameters"
            )
        config: Config = {}
        for p, i in zip(self.params, ints):
            if not 0 <= i < len(p.values):
                raise ConfigError(
                    f"{p.name}: index {i} outside 0..{len(p.values) - 1} (domain {p.describe()})"
                )
            config[p.name] = p.values[i]
        c = self.canonical(config)
        if c != config:
            raise ConfigError(f"encoded configuration is not canonical: {ints}")
        return c

    def key(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        """A hashable identity of a configuration (its encoding)."""
        return tuple(self.encode(config))

    # ------------------------------------------------------------------- moving
    def active_params(self, config: Mapping[str, Any]) -> list[Param]:
        return [p for p in self.params if p.active(config)]

    def sample(self, rng: random.Random) -> Config:
        """A uniformly drawn value per parameter, then made canonical."""
        return self.canonical({p.name: rng.choice(p.values) for p in self.params})

    def neighbours(self, config: Mapping[str, Any]) -> list[Config]:
        """Configurations one step away: an ordinal one index up or down, or a
        categorical parameter changed to another value. Distinct and canonical."""
        c = self.validate(config)
        seen = {self.key(c)}
        out: list[Config] = []
        for p in self.active_params(c):
            i = p.index(c[p.name])
            if p.ordinal:
                moves = [p.values[j] for j in (i - 1, i + 1) if 0 <= j < len(p.values)]
            else:
                moves = [v for v in p.values if v != c[p.name]]
            for v in moves:
                n = self.canonical({**c, p.name: v})
                k = self.key(n)
                if k not in seen:
                    seen.add(k)
                    out.append(n)
        return out

    def perturb(
        self,
        config: Mapping[str, Any],
        rng: random.Random,
        factors: tuple[float, float] = (0.8, 1.2),
        resample_prob: float = 0.25,
    ) -> Config:
        """PBT's explore step: each active ordinal parameter is scaled by one of
        ``factors`` (moving at least one step), each categorical one is resampled with
        probability ``resample_prob``. Always returns a valid, canonical config."""
        c = self.validate(config)
        out = dict(c)
        for p in self.active_params(c):
            if len(p.values) < 2:
                continue
            if p.ordinal:
                f = rng.choice(factors)
                i = p.index(c[p.name])
                target = p.nearest(c[p.name] * f) if c[p.name] != 0 else p.values[min(i + 1, len(p.values) - 1)]
                j = p.index(target)
                if j == i:
                    j = min(max(i + (1 if f > 1 else -1), 0), len(p.values) - 1)
                out[p.name] = p.values[j]
            elif rng.random() < resample_prob:
                out[p.name] = rng.choice(p.values)
            out = self.canonical(out)
        return out

    def coarse_values(self, p: Param, levels: int = 5) -> tuple:
        """At most ``levels`` values of an ordinal parameter, evenly spread over its
        indices and always including the default; all values of a categorical one."""
        if not p.ordinal or len(p.values) <= levels:
            return p.values
        n = len(p.values)
        idx = {round(k * (n - 1) / (levels - 1)) for k in range(levels)}
        idx.add(p.index(p.default))
        return tuple(p.values[i] for i in sorted(idx))

    def all_configs(self) -> Iterator[Config]:
        """Every canonical configuration once (for exhaustive evaluation of small spaces)."""
        seen: set[tuple[int, ...]] = set()
        for c in _walk(self, {p.name: p.values for p in self.params}):
            k = self.key(c)
            if k not in seen:
                seen.add(k)
                yield c

    def describe(self) -> str:
        return "\n".join(f"{p.name:12s} {p.describe()} (default {p.default!r})" for p in self.params)


def _walk(space: SearchSpace, choices: Mapping[str, Sequence]) -> Iterator[Config]:
    """Canonical configurations over ``choices`` (values per parameter), in product
    order, with each inactive parameter pinned to its default instead of iterated
    (conditional codec parameters would otherwise multiply the product). Falls back
    to filtering the full product when a condition refers to a later parameter."""
    order = {p.name: i for i, p in enumerate(space.params)}
    if not all(order.get(parent, len(order)) < order[p.name]
               for p in space.params for parent, _ in p.when):
        for combo in itertools.product(*(choices[p.name] for p in space.params)):
            yield space.canonical(dict(zip(space.names, combo)))
        return
    partial: Config = {}

    def walk(i: int) -> Iterator[Config]:
        if i == len(space.params):
            yield dict(partial)
            return
        p = space.params[i]
        for v in (choices[p.name] if p.active(partial) else (p.default,)):
            partial[p.name] = v
            yield from walk(i + 1)
        del partial[p.name]

    yield from walk(0)


def _job_params(k_max: int, workers_per_machine: int, root_candidates: Sequence[int] | None,
                allow_lossy: bool, max_streams: int, min_chunk_bytes: int, max_chunk_bytes: int,
                transports: Sequence[str], fixed: Mapping[str, Any],
                ) -> tuple[tuple[Param, ...], tuple[tuple[str, Any], ...]]:
    """The parameters and facts of :meth:`SearchSpace.build` (its arguments, checked)."""
    transports = tuple(dict.fromkeys(transports))
    if not transports or any(t not in TRANSPORTS for t in transports):
        raise ValueError(f"transports must be a non-empty subset of {TRANSPORTS}, "
                         f"got {transports}")
    if k_max < 0:
        raise ValueError(f"k_max must be >= 0, got {k_max}")
    if workers_per_machine < 1:
        raise ValueError(f"workers_per_machine must be >= 1, got {workers_per_machine}")
    if not 1 <= max_streams <= 64:
        raise ValueError(f"max_streams must be in 1..64, got {max_streams}")
    if not (0 < min_chunk_bytes <= DEFAULT_CHUNK_BYTES <= max_chunk_bytes):
        raise ValueError(
            f"chunk range [{min_chunk_bytes}, {max_chunk_bytes}] must contain "
            f"the default {DEFAULT_CHUNK_BYTES}"
        )
    if root_candidates is None:
        root_candidates = range(workers_per_machine)
    roots = tuple(dict.fromkeys(int(r) for r in root_candidates))
    if not roots:
        raise ValueError("root_candidates is empty")
    bad = [r for r in roots if not 0 <= r < workers_per_machine]
    if bad:
        raise ValueError(
            f"root candidates {bad} are not local worker indices 0..{workers_per_machine - 1}"
        )
    compression = ("none",) + (LOSSY_CODECS if allow_lossy else ())
    # the knobs whose domain this job decides (the codec parameters follow ``compression``)
    domains = {
        "streams": tuple(range(1, max_streams + 1)),
        "chunk_bytes": log2_range(min_chunk_bytes, max_chunk_bytes),
        "transport": transports,
        "servers": tuple(range(k_max + 1)),
        "intra": INTRA_MODES if workers_per_machine > 1 else ("flat",),
        "reduce_root": roots,
        "compression": compression,
    }
    defaults = {"transport": transports[0], "reduce_root": roots[0]}
    params = tuple(_param(k, domains[k.name], defaults.get(k.name, k.default), k.when)
                   for k in KNOBS if k.name in domains) + codec_params(compression)
    limits = Limits(servers=k_max, workers_per_machine=workers_per_machine,
                    max_streams=max_streams, transports=transports)
    pins = _pins(params, fixed, limits, allow_lossy)
    params = tuple(pins.get(p.name, p) for p in params)
    facts = (
        ("k_max", k_max),
        ("workers_per_machine", workers_per_machine),
        ("root_candidates", roots),
        ("allow_lossy", allow_lossy),
        ("max_streams", max_streams),
    ) + ((("fixed", tuple((n, pins[n].values) for n in sorted(pins))),) if pins else ())
    return params, facts


def check_fixed(fixed: Mapping[str, Any], allow_lossy: bool) -> None:
    """What can be known of ``fixed`` before the job is: each name is a knob (a
    :class:`ConfigError` with "did you mean" otherwise), and nothing lossy is pinned
    without ``allow_lossy``. Values are checked against the job's world when it starts
    (:func:`_pins`)."""
    codec_knobs = {p.name for p in codec_params()}
    for name, wanted in fixed.items():
        if name not in NAMES:
            raise ConfigError(f"cannot fix {name!r}: not a tunable knob{did_you_mean(name, NAMES)}"
                              f"; the knobs are {', '.join(NAMES)}")
        if allow_lossy:
            continue
        if name in codec_knobs:
            raise ConfigError(f"cannot fix {name}: it is a codec parameter, and codecs are "
                              "lossy (pass allow_lossy=True)")
        if name == "compression":
            many = isinstance(wanted, (list, tuple, set, frozenset, range))
            for value in wanted if many else (wanted,):
                if value != "none":
                    raise ConfigError(f"cannot fix compression={value!r}: the codec is "
                                      "lossy (pass allow_lossy=True)")


def _pins(params: Sequence[Param], fixed: Mapping[str, Any], limits: Limits,
          allow_lossy: bool) -> dict[str, Param]:
    """The parameters ``fixed`` pins or narrows, each as its new :class:`Param`; every
    value is checked against what the runtime runs in a job with ``limits``."""
    check_fixed(fixed, allow_lossy)
    by_name = {p.name: p for p in params}
    out: dict[str, Param] = {}
    for name, wanted in fixed.items():
        if name not in by_name:
            raise ConfigError(f"cannot fix {name!r}: not a knob of this job; its knobs are "
                              f"{', '.join(by_name)}")
        p = by_name[name]
        many = isinstance(wanted, (list, tuple, set, frozenset, range))
        values = tuple(dict.fromkeys(wanted if many else (wanted,)))
        if not values:
            raise ConfigError(f"cannot fix {name}: no value given")
        values = tuple(dict.fromkeys(_runnable(p, v, limits, by_name)
                                     for v in values))
        if p.ordinal:
            values = tuple(sorted(values))
        default = p.default if p.default in values else values[0]
        out[name] = Param(p.name, values, default, ordinal=p.ordinal, log=p.log, when=p.when,
                          doc=p.doc)
    return out


def _runnable(p: Param, value: Any, limits: Limits, by_name: Mapping[str, Param]) -> Any:
    """``value`` as the runtime holds it (``4194304.0`` -> ``4194304``); a
    :class:`ConfigError` naming ``p`` if the runtime cannot run it in a job with ``limits``
    (with ``p`` active: its conditions met)."""
    if not p.ordinal and value not in p.values:
        raise ConfigError(f"cannot fix {p.name}={value!r}: this job allows {p.describe()}")
    config = {parent: allowed[0] for parent, allowed in p.when}
    config[p.name] = value
    for parent in list(config):
        # the parent's own condition (a codec parameter under a lossy codec)
        for grand, allowed in by_name[parent].when if parent in by_name else ():
            config.setdefault(grand, allowed[0])
    if isinstance(value, bool):
        raise ConfigError(f"cannot fix {p.name}={value!r}: not a value of {p.describe()}")
    try:
        return RuntimeConfig.of(config).check(limits)[p.name]
    except (ConfigError, TypeError, ValueError) as exc:
        raise ConfigError(f"cannot fix {p.name}={value!r}: {exc}") from None


def _param(knob: Knob, values: tuple, default: Any,
           when: tuple[tuple[str, tuple], ...]) -> Param:
    """The tuner's :class:`Param` of a runtime knob, over ``values``."""
    return Param(knob.name, values, default, ordinal=knob.ordinal, log=knob.log, when=when,
                 doc=knob.doc)


def codec_params(compression_values: Sequence[str] = ("none",) + LOSSY_CODECS) -> tuple[Param, ...]:
    """The codec parameters as conditional dimensions, for the codecs in
    ``compression_values`` (the domain of ``compression``): ``topk_ratio`` (topk),
    ``randomk_ratio`` (randomk), ``powersgd_rank`` (powersgd), ``compress_min_bytes``
    (every lossy codec; HiPress's selective compression), each active under those of its
    codecs (:data:`~autotune.runtime.config.KNOBS`) that are in the domain. A parameter
    none of whose codecs is in the domain is left out; with no lossy codec, ``()``."""
    values = tuple(compression_values)
    unknown = [v for v in values if v != "none" and v not in LOSSY_CODECS]
    if unknown:
        raise ValueError(f"unknown codec(s) {unknown}; known: none, {', '.join(LOSSY_CODECS)}")
    out: list[Param] = []
    for knob in KNOBS:
        if not knob.when or knob.when[0][0] != "compression":
            continue
        users = tuple(v for v in values if v in knob.when[0][1])
        if users:
            out.append(_param(knob, knob.values, knob.default, (("compression", users),)))
    return tuple(out)
