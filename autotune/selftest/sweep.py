"""Which configurations ``autotune selftest`` checks (:func:`sweep`), how a configuration is
named in its table (:func:`label`), and the model-like gradient shapes its workers
register (:func:`shapes`). Pure Python: no torch."""

from __future__ import annotations

import random
from typing import Any, Mapping, Sequence

from autotune.selftest import SelftestError

KiB, MiB = 1024, 1024 * 1024
DTYPES = ("float32", "float16", "bfloat16")
LOSSY_CODECS = ("fp16", "bf16", "topk", "randomk", "onebit", "powersgd")
STREAMS = (1, 2, 4)
CHUNKS = (64 * KiB, 1 * MiB, 4 * MiB)


def label(cfg: Mapping[str, Any]) -> str:
    """``pushpull k1 s2 1M scatter`` (+ ``topk 0.01``): a configuration in one short line."""
    chunk = cfg.get("chunk_bytes", 4 * MiB)
    size = f"{chunk // MiB}M" if chunk % MiB == 0 else f"{chunk // KiB}K"
    parts = [str(cfg.get("transport", "allreduce"))]
    if parts[0] == "pushpull":
        parts.append(f"k{cfg.get('servers', 0)}")
    parts += [f"s{cfg.get('streams', 1)}", size]
    intra = cfg.get("intra", "flat")
    parts.append(f"root{cfg.get('reduce_root', 0)}" if intra == "root" else intra)
    codec = cfg.get("compression", "none")
    if codec != "none":
        extra = {"topk": cfg.get("topk_ratio"), "randomk": cfg.get("randomk_ratio"),
                 "powersgd": cfg.get("powersgd_rank")}.get(codec)
        parts.append(f"+{codec}" + (f" {extra}" if extra is not None else ""))
    return " ".join(parts)


def _intra_modes(workers_per_machine: int) -> list[tuple[str, int]]:
    if workers_per_machine < 2:
        return [("flat", 0)]
    return [("flat", 0), ("root", 0), ("root", workers_per_machine - 1), ("scatter", 0)]


def sweep_of(limits: Any, quick: bool = False, lossy: bool = False) -> list[dict[str, Any]]:
    """:func:`sweep` over what ``limits`` (a :class:`autotune.runtime.config.Limits`)
    allows: the native runtime's (``rt.limits``) or DDP's comm hook's
    (``CommHookState.limits``: the runtime's, when the hook has one)."""
    return sweep(limits.workers_per_machine, limits.servers, limits.max_streams,
                 quick=quick, lossy=lossy, transports=tuple(limits.transports))


def sweep(workers_per_machine: int, servers: int, max_streams: int | None = None,
          quick: bool = False, lossy: bool = False,
          transports: Sequence[str] = ("allreduce", "pushpull")) -> list[dict[str, Any]]:
    """The configurations to check, in run order (plain dicts for ``rt.sync``).

    Full: every (transport, servers, intra mode) meets two (streams, chunk) pairs, all of
    :data:`STREAMS` and :data:`CHUNKS` covered; push/pull runs with ``k`` = 0 (the worker
    machines' own Summation Services) up to ``servers``. Where only one (transport, intra)
    exists (all-reduce alone with one worker per machine: DDP's comm hook), it meets every
    (streams, chunk) pair. ``quick``: a handful that still covers the transports, several
    streams and chunk sizes, and an intra mode where a machine has several workers.
    ``lossy``: every codec after the lossless ones (with ``compress_min_bytes`` = 64 KiB,
    so they apply to most chunks). ``max_streams``: the job's limit (default: the
    runtime's, :class:`autotune.runtime.config.Limits`). ``transports``: those the job
    offers (push/pull only where listed)."""
    if max_streams is None:
        from autotune.runtime.config import Limits

        max_streams = Limits().max_streams
    streams = [s for s in STREAMS if s <= max_streams] or [1]
    intras = _intra_modes(workers_per_machine)
    pushpull = "pushpull" in transports
    out: list[dict[str, Any]] = []

    def add(transport: str, k: int, s: int, chunk: int, intra: tuple[str, int] = ("flat", 0),
            **codec: Any) -> None:
        cfg = {"transport": transport, "servers": k if transport == "pushpull" else 0,
               "streams": min(s, streams[-1]), "chunk_bytes": chunk, "intra": intra[0],
               "reduce_root": intra[1] if intra[0] == "root" else 0,
               "compression": codec.pop("compression", "none"), **codec}
        if cfg not in out:
            out.append(cfg)

    several = workers_per_machine > 1
    if quick:
        add("allreduce", 0, 1, 4 * MiB)
        add("allreduce", 0, 4, 64 * KiB)
        if several:
            add("allreduce", 0, 2, 1 * MiB, ("scatter", 0))
        if not pushpull:
            add("allreduce", 0, 2, 1 * MiB)
        else:
            add("pushpull", servers, 2, 64 * KiB)
            if servers:
                add("pushpull", 0, 2, 1 * MiB)
            if several:
                add("pushpull", servers, 1, 1 * MiB, ("root", workers_per_machine - 1))
    else:
        combos = [("allreduce", 0, i) for i in intras]
        if pushpull:
            combos += [("pushpull", k, i) for k in range(servers + 1) for i in intras]
        if len(combos) == 1:  # one transport, one intra mode: the whole grid
            (t, k, intra), = combos
            for s in streams:
                for chunk in CHUNKS:
                    add(t, k, s, chunk, intra)
        else:
            for n, (t, k, intra) in enumerate(combos):
                for a in range(2):
                    add(t, k, streams[(n + a) % len(streams)],
                        CHUNKS[(n + 2 * a) % len(CHUNKS)], intra)
    if lossy:
        base = {"compress_min_bytes": 64 * KiB}
        pp = ("pushpull", servers) if pushpull else ("allreduce", 0)
        for n, codec in enumerate(LOSSY_CODECS):
            places = [("allreduce", 0)] if quick and n % 2 == 0 else \
                [pp] if quick else list(dict.fromkeys([("allreduce", 0), pp]))
            for m, (t, k) in enumerate(places):
                intra = intras[(n + m) % len(intras)] if not quick else ("flat", 0)
                add(t, k, 2, 256 * KiB, intra, compression=codec, **base)
    return out


def shapes(size_bytes: int, tensors: int, dtypes: Sequence[str] = ("float32",),
           seed: int = 0) -> list[tuple[tuple[int, ...], str]]:
    """``tensors`` parameter shapes holding about ``size_bytes`` of gradients, as a model's:
    sizes spread over orders of magnitude (biases to large matrices), 1-D, 2-D and 4-D,
    dtypes taken in turn from ``dtypes``. The same on every rank (seeded)."""
    if tensors < 1:
        raise SelftestError(f"--tensors must be >= 1, got {tensors}")
    rng = random.Random(seed)
    weights = [rng.lognormvariate(0.0, 2.0) for _ in range(tensors)]
    total = sum(weights)
    out: list[tuple[tuple[int, ...], str]] = []
    for j, w in enumerate(weights):
        dtype = dtypes[j % len(dtypes)]
        item = 4 if dtype == "float32" else 2
        numel = max(1, int(size_bytes * w / total) // item)
        if j % 4 == 1 and numel >= 4 * 9 * 2:
            shape: tuple[int, ...] = (numel // 36, 4, 3, 3)
        elif j % 4 == 2 and numel >= 128:
            shape = (numel // 64, 64)
        else:
            shape = (numel,)
        out.append((shape, dtype))
    return out

