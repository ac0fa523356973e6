"""``autotune selftest``: check and time the runtime on the machines at hand.

    autotune selftest [--workers 2 --servers 1]          # this machine: starts the ranks
    autotune launch -n 2 -k 1 $(which autotune) selftest  # the same, through the launcher
    torchrun ... -m autotune.selftest [options]           # a cluster (servers: -m autotune.server)

Every worker registers a set of parameters of ``--tensors`` shapes (``--size`` MiB of
gradients in all, of ``--dtypes``) with :class:`autotune.runtime.Runtime` and sweeps a set
of configurations (:func:`sweep`): transports (push/pull when the job has servers, and with
the workers' own Summation Services), streams, chunk sizes, intra-machine modes where a
machine has several workers, and with ``--lossy`` every codec. For each configuration:

* **check** — gradients are made by a real backward pass (``loss = sum(p * t)``, so
  ``p.grad == t``, different on every worker); what ``rt.wait()`` leaves in ``.grad`` is
  compared with ``torch.distributed.all_reduce`` (SUM over the workers' group, then ``/= n``)
  of the same gradients, one flat tensor per dtype. Lossless: ``exact`` when bit for bit
  equal (``torch.equal``), else ``close`` when every element is within the worst-case bound
  of two float summations in different orders (:func:`lossless_bound`; only possible with
  3 or more workers or half-precision gradients), else ``FAILED``. Lossy: on the first
  iteration, error feedback cleared beforehand, within the codec's bound
  (:func:`lossy_bound`), else ``FAILED``. Lossless configurations are checked on every
  timed iteration too.
* **time** — the median over ``--iterations`` of the slowest worker's ``sync`` + forward +
  backward + ``wait`` (the first iteration of a configuration, which pays for the switch,
  is not timed), against the same iteration under
  ``torch.nn.parallel.DistributedDataParallel`` on parameters of the same shapes (gloo,
  25 MiB buckets, backward until DDP has averaged): ``vs DDP`` = DDP's median / this median
  (above 1: faster than DDP). ``dist.all_reduce`` of the flat gradients alone is shown
  too (pure communication, one call per dtype).

A configuration that fails (rejected, a fault, a check outside its bound) is reported as
``FAILED`` with its error and the sweep goes on; one that breaks the runtime (a dead or
stuck peer) ends the sweep, the rest marked ``SKIPPED``. The leader prints a table and
writes ``--json``, and exits 1 if any configuration failed (the other ranks exit 0).

Devices: CPU, or CUDA gradients (``--device cuda``; one GPU per worker, ``LOCAL_RANK``).
The runtime has no GPU path yet (issue 18): a CUDA gradient is copied synchronously into
host memory inside its backward hook, and all communication is gloo. The output says so;
see docs/gpu.md for what has and has not run on GPUs.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import sys
import time
from typing import Any, Iterable, Mapping, Sequence

import click

KiB, MiB = 1024, 1024 * 1024
DTYPES = ("float32", "float16", "bfloat16")
#: unit roundoff of each dtype (half an ulp at 1)
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
#: half the smallest subnormal: the absolute floor of one rounding
TINY = {"float32": 2.0 ** -150, "float16": 2.0 ** -25, "bfloat16": 2.0 ** -134}
LOSSY_CODECS = ("fp16", "bf16", "topk", "randomk", "onebit", "powersgd")
STREAMS = (1, 2, 4)
CHUNKS = (64 * KiB, 1 * MiB, 4 * MiB)
DEFAULT_TIMEOUT = 60.0
FLUSH = {"compression": "none"}  # an uncompressed round sends and clears every residual
RUNTIME_DEVICE_NOTE = ("the runtime has no GPU path yet (issue 18): CUDA gradients are copied "
                       "synchronously into host memory in the backward hook, and all "
                       "communication is gloo (no NCCL engine, no GPU codecs)")


class SelftestError(click.ClickException):
    """A selftest that cannot start (bad options, no distributed environment)."""


# ============================================================================ the sweep
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


def sweep(workers_per_machine: int, servers: int, max_streams: int = 16, quick: bool = False,
          lossy: bool = False) -> list[dict[str, Any]]:
    """The configurations to check, in run order (plain dicts for ``rt.sync``).

    Full: every (transport, servers, intra mode) meets two (streams, chunk) pairs, all of
    :data:`STREAMS` and :data:`CHUNKS` covered; push/pull runs with ``k`` = 0 (the worker
    machines' own Summation Services) up to ``servers``. ``quick``: a handful that still
    covers both transports, several streams and chunk sizes, and an intra mode where a
    machine has several workers. ``lossy``: every codec after the lossless ones (with
    ``compress_min_bytes`` = 64 KiB, so they apply to most chunks)."""
    streams = [s for s in STREAMS if s <= max_streams] or [1]
    intras = _intra_modes(workers_per_machine)
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
        add("pushpull", servers, 2, 64 * KiB)
        if servers:
            add("pushpull", 0, 2, 1 * MiB)
        if several:
            add("pushpull", servers, 1, 1 * MiB, ("root", workers_per_machine - 1))
    else:
        combos = [("allreduce", 0, i) for i in intras]
        combos += [("pushpull", k, i) for k in range(servers + 1) for i in intras]
        for n, (t, k, intra) in enumerate(combos):
            for a in range(2):
                add(t, k, streams[(n + a) % len(streams)], CHUNKS[(n + 2 * a) % len(CHUNKS)],
                    intra)
    if lossy:
        base = {"compress_min_bytes": 64 * KiB}
        pp = ("pushpull", servers)
        for n, codec in enumerate(LOSSY_CODECS):
            places = [("allreduce", 0)] if quick and n % 2 == 0 else \
                [pp] if quick else [("allreduce", 0), pp]
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


# ============================================================================ the bounds
def lossless_bound(ref: Any, got: Any, abs_sum: Any, n: int, dtype: str) -> Any:
    """Per element: how far two correct averages of the same ``n`` values may lie apart
    when their sums were taken in different orders (gloo's ring, a reduce tree, a Summation
    Service's arrival order), in float64. Each sum of ``n`` values is within
    ``(n-1) u sum|g_i|`` of the exact one (``u``: the dtype's unit roundoff, plus the
    subnormal floor), the division by ``n`` adds ``u`` of the result; both sides may err."""
    u, tiny = UNIT_ROUNDOFF[dtype], TINY[dtype]
    return ((2 * (n - 1) / n) * u * 1.01 * abs_sum + u * (ref.abs() + got.abs())
            + 2 * n * tiny)


def half_codec_bound(ref: Any, got: Any, abs_sum: Any, n: int, dtype: str, codec: str) -> Any:
    """Per element, fp16/bf16: each of up to ``n`` encodings and ``n - 1`` half-precision
    additions rounds by the codec's unit roundoff of at most ``sum|g_i|`` (the values are
    scaled by ``s = 2^-ceil(log2 n)``, exactly, so the subnormal floor grows by ``1/s``),
    on top of :func:`lossless_bound`. Gradients beyond the clamp (``max_half / (n s)``, over
    32,000 for fp16) are outside it (error feedback carries what the clamp removes)."""
    half = "float16" if codec == "fp16" else "bfloat16"
    s = 2.0 ** -math.ceil(math.log2(n)) if n > 1 else 1.0
    u, tiny = UNIT_ROUNDOFF[half], TINY[half] / s
    return 2 * (u * 1.01 * abs_sum + tiny) + lossless_bound(ref, got, abs_sum, n, dtype)


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


# ============================================================================ the ranks
def _parse_dtypes(text: str) -> list[str]:
    names = [d.strip() for d in text.split(",") if d.strip()]
    bad = [d for d in names if d not in DTYPES]
    if not names or bad:
        raise SelftestError(f"--dtypes: {', '.join(bad) or 'none given'}; choose from "
                            f"{', '.join(DTYPES)}")
    return names


class _Broken(Exception):
    """The runtime is unusable (a non-recoverable fault): the sweep ends."""


class Worker:
    """One worker's part of the selftest (all workers run it in lockstep)."""

    def __init__(self, rt: Any, opts: Mapping[str, Any], device: Any):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.rt = rt
        self.info = rt.info
        self.n = len(self.info.workers)
        self.leader = self.info.rank == self.info.leader
        self.opts = opts
        self.device = device
        self.iterations = int(opts["iterations"])
        self.wg = dist.new_group(list(self.info.workers), use_local_synchronization=True)
        self.specs = shapes(int(opts["size"] * MiB), int(opts["tensors"]), opts["dtypes"],
                            int(opts["seed"]))
        self.params = self._make_params()
        self.targets: list[Any] = []
        rt.register(self.params)

    # ------------------------------------------------------------------ tensors
    def _make_params(self) -> list[Any]:
        torch = self.torch
        out = []
        for shape, dtype in self.specs:
            t = torch.zeros(shape, dtype=getattr(torch, dtype), device=self.device)
            if len(shape) == 4:  # a conv weight as many models keep it
                t = t.contiguous(memory_format=torch.channels_last)
            out.append(torch.nn.Parameter(t))
        return out

    def _new_targets(self, index: int) -> None:
        """This worker's gradients for configuration ``index``: random, with per-tensor
        scales from 1e-3 to 1e2, different on every worker."""
        torch = self.torch
        g = torch.Generator().manual_seed(int(self.opts["seed"]) * 1_000_003 + index * 1009
                                          + self.info.rank)
        out = []
        for (shape, dtype), p in zip(self.specs, self.params):
            scale = 10.0 ** (torch.rand((), generator=g).item() * 5 - 3)
            t = (torch.randn(shape, generator=g) * scale).to(getattr(torch, dtype))
            out.append(t.to(self.device))
        self.targets = out

    def _by_dtype(self, tensors: Sequence[Any]) -> dict[str, Any]:
        """CPU flat vectors per dtype, in registration order."""
        torch = self.torch
        groups: dict[str, list[Any]] = {}
        for (shape, dtype), t in zip(self.specs, tensors):
            groups.setdefault(dtype, []).append(t.detach().reshape(-1).cpu())
        return {d: torch.cat(ts) for d, ts in groups.items()}

    def _reference(self) -> dict[str, dict[str, Any]]:
        """Per dtype: ``all_reduce`` SUM / n of the targets (the reference), ``sum_i |g_i|``
        and ``sum_i ||g_i||`` (for the bounds), over the workers' group."""
        torch, dist = self.torch, self.dist
        out = {}
        for dtype, flat in self._by_dtype(self.targets).items():
            ref = flat.clone()
            dist.all_reduce(ref, group=self.wg)
            ref /= self.n
            abs_sum = flat.double().abs()
            dist.all_reduce(abs_sum, group=self.wg)
            norm = torch.tensor([flat.double().norm().item()], dtype=torch.float64)
            dist.all_reduce(norm, group=self.wg)
            out[dtype] = {"ref": ref, "abs_sum": abs_sum, "norm_sum": norm.item()}
        return out

    def _compare(self, refs: Mapping[str, Mapping[str, Any]], got: Mapping[str, Any],
                 cfg: Mapping[str, Any] | None) -> dict[str, float]:
        """``exact`` (1/0), ``ratio`` (worst difference over its bound), ``max_abs``,
        ``max_ref`` for the gradients ``got`` against the reference. ``cfg``: the lossy
        configuration whose bound applies (``None``: lossless)."""
        exact, ratio, max_abs, max_ref = 1.0, 0.0, 0.0, 0.0
        codec = (cfg or {}).get("compression", "none")
        for dtype, r in refs.items():
            ref, mine = r["ref"], got[dtype]
            if not self.torch.equal(ref, mine):
                exact = 0.0
            ref64, mine64 = ref.double(), mine.double()
            diff = (mine64 - ref64).abs()
            max_abs = max(max_abs, diff.max().item() if diff.numel() else 0.0)
            max_ref = max(max_ref, ref64.abs().max().item() if ref64.numel() else 0.0)
            if codec in ("fp16", "bf16"):
                bound = half_codec_bound(ref64, mine64, r["abs_sum"], self.n, dtype, codec)
            elif codec != "none":
                u = UNIT_ROUNDOFF[dtype]
                bound = (norm_factor(cfg) * r["norm_sum"] / self.n * (1 + 1e-4)
                         + u * (ref64.norm().item() + mine64.norm().item())
                         + 2 * u * r["abs_sum"].norm().item() + 1e-30)
                ratio = max(ratio, (mine64 - ref64).norm().item() / bound)
                continue
            else:
                bound = lossless_bound(ref64, mine64, r["abs_sum"], self.n, dtype)
            if diff.numel():
                ratio = max(ratio, (diff / bound).max().item())
            if not math.isfinite(diff.sum().item()):
                ratio = math.inf
        return {"exact": exact, "ratio": ratio, "max_abs": max_abs, "max_ref": max_ref}

    def _max(self, values: Sequence[float]) -> list[float]:
        """MAX over the workers, element-wise."""
        t = self.torch.tensor([float(v) for v in values], dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=self.wg)
        return t.tolist()

    def _sync_device(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------------ iterations
    def _loss(self, params: Sequence[Any]) -> Any:
        return self.torch.stack([(p * t).sum().float()
                                 for p, t in zip(params, self.targets)]).sum()

    def _iteration(self, cfg: Mapping[str, Any] | None,
                   zero: bool = False) -> tuple[float, dict[str, Any]]:
        """One timed ``sync`` (the leader passes ``cfg``; ``None`` keeps the active one) +
        forward + backward + ``wait``; (seconds on this worker, the active configuration).
        One ``sync`` per iteration: under push/pull the servers serve one round per sync."""
        for p in self.params:
            p.grad = None
        if zero:
            saved, self.targets = self.targets, [self.torch.zeros_like(t) for t in self.targets]
        self.dist.barrier(group=self.wg)
        t0 = time.perf_counter()
        try:
            active = self.rt.sync(cfg if self.leader else None)
            self._loss(self.params).backward()
            self.rt.wait()
            self._sync_device()
        finally:
            if zero:
                self.targets = saved
        return time.perf_counter() - t0, active

    def _flush(self) -> float:
        """Clear error feedback: uncompressed rounds of zero gradients send every residual
        (the Summation Services hand theirs back first). Returns what is left (0.0)."""
        left = 0.0
        for _ in range(3):
            self._iteration(FLUSH, zero=True)
            left = max(self.rt.residual_norms.values(), default=0.0)
            left = self._max([left])[0]
            if left == 0.0:
                break
        return left

    # ------------------------------------------------------------------ one configuration
    def run_config(self, index: int, cfg: dict[str, Any]) -> dict[str, Any]:
        """Check and time one configuration. Raises :class:`_Broken` when the runtime is
        unusable afterwards (every worker alike)."""
        from autotune.runtime import ConfigError, RuntimeFault

        lossy = cfg.get("compression", "none") != "none"
        row: dict[str, Any] = {"index": index, "label": label(cfg), "config": dict(cfg),
                               "lossy": lossy, "status": "FAILED", "passed": False,
                               "exact": False, "error": None, "max_abs": None,
                               "max_rel": None, "bound_ratio": None, "times_ms": [],
                               "median_ms": None, "vs_ddp": None, "vs_all_reduce": None}
        self._new_targets(index)
        refs = self._reference()
        checks: list[dict[str, float]] = []
        times: list[float] = []
        try:
            if lossy:
                left = self._flush()
                if left:
                    raise RuntimeError(f"error feedback still holds {left:.3g} after 3 "
                                       "uncompressed rounds")
            for it in range(self.iterations + 1):  # the first switches, untimed
                sec, active = self._iteration(None if it else cfg)
                if it:
                    times.append(sec)
                else:
                    row["config"], row["label"] = active, label(active)
                if it == 0 or not lossy:  # lossy: the bound holds with no residual only
                    grads = self._by_dtype([p.grad if p.grad is not None
                                            else self.torch.zeros_like(p) for p in self.params])
                    checks.append(self._compare(refs, grads, cfg if lossy else None))
        except ConfigError as e:  # rejected on every rank alike
            row["error"] = f"ConfigError: {e}"
        except RuntimeFault as e:
            row["error"] = f"{type(e).__name__}: {e}"
            if not e.recoverable:
                raise _Broken(row["error"]) from e
        except RuntimeError as e:  # a flush that did not clear (all ranks: MAX above)
            row["error"] = str(e)
        # every worker reaches this point unless the runtime broke: combine their views
        worst = {"exact": 1.0, "ratio": 0.0, "max_abs": 0.0, "max_ref": 0.0}
        for c in checks:
            worst = {"exact": min(worst["exact"], c["exact"]),
                     "ratio": max(worst["ratio"], c["ratio"]),
                     "max_abs": max(worst["max_abs"], c["max_abs"]),
                     "max_ref": max(worst["max_ref"], c["max_ref"])}
        agg = self._max([1.0 - worst["exact"], worst["ratio"], worst["max_abs"],
                         worst["max_ref"], float(len(checks)), float(row["error"] is not None),
                         float(len(times))])
        inexact, ratio, max_abs, max_ref, n_checks, errored, n_times = agg
        # (faults are identical on every worker, so all timed as many iterations; should
        # one have timed fewer, its missing times count as infinite)
        padded = times + [math.inf] * (int(n_times) - len(times))
        per_iteration = self._max(padded) if padded else []
        if any(math.isinf(t) for t in per_iteration) and row["error"] is None:
            row["error"] = "the workers completed different numbers of iterations"
        if errored and row["error"] is None:
            row["error"] = "failed on another worker (see its output)"
        if n_checks:
            row.update(max_abs=max_abs, max_rel=(max_abs / max_ref if max_ref else 0.0),
                       bound_ratio=ratio, exact=not inexact)
        if row["error"] is None:
            if not n_checks:
                row["error"] = "no iteration completed"
            elif not ratio <= 1.0:
                row["error"] = (f"{'lossy' if lossy else 'lossless'} check failed: the "
                                f"difference from all_reduce is {ratio:.3g} x its bound "
                                f"(max |diff| {max_abs:.3g})")
            else:
                row["status"] = "exact" if not inexact else ("within bound" if lossy
                                                             else "close")
                row["passed"] = True
        row["times_ms"] = [round(t * 1000, 4) for t in per_iteration]
        if per_iteration and row["passed"]:
            row["median_ms"] = round(statistics.median(per_iteration) * 1000, 4)
        return row

    # ------------------------------------------------------------------ references
    def time_ddp(self) -> dict[str, Any]:
        """DDP (gloo, default 25 MiB buckets) on parameters of the same shapes and the same
        gradients: forward + backward until DDP averaged, median of the slowest worker."""
        torch = self.torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        worker = self

        class Same(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.ps = torch.nn.ParameterList(worker._make_params())

            def forward(self) -> Any:
                return worker._loss(list(self.ps))

        model = Same()
        kw: dict[str, Any] = {"process_group": self.wg}
        if self.device.type == "cuda":
            kw["device_ids"] = [self.device.index]
        ddp = DDP(model, **kw)
        self._new_targets(-1)
        refs = self._reference()
        times, check = [], None
        for it in range(self.iterations + 1):
            model.zero_grad(set_to_none=True)
            self.dist.barrier(group=self.wg)
            t0 = time.perf_counter()
            ddp().backward()
            self._sync_device()
            sec = time.perf_counter() - t0
            if it:
                times.append(sec)
            else:
                check = self._compare(refs, self._by_dtype([p.grad for p in model.ps]), None)
        per_iteration = self._max(times)
        assert check is not None
        agg = self._max([1.0 - check["exact"], check["ratio"], check["max_abs"],
                         check["max_ref"]])
        del ddp
        return {"what": "torch.nn.parallel.DistributedDataParallel (gloo, 25 MiB buckets): "
                        "forward + backward",
                "times_ms": [round(t * 1000, 4) for t in per_iteration],
                "median_ms": round(statistics.median(per_iteration) * 1000, 4),
                "exact": not agg[0], "bound_ratio": agg[1], "max_abs": agg[2]}

    def time_all_reduce(self) -> dict[str, Any]:
        """``dist.all_reduce`` of the flat gradients (one call per dtype): communication
        alone, the floor of any averaging on this group."""
        self._new_targets(-2)
        flats = [f.to(self.device) for f in self._by_dtype(self.targets).values()]
        times = []
        for it in range(self.iterations + 1):
            self.dist.barrier(group=self.wg)
            t0 = time.perf_counter()
            for f in flats:
                self.dist.all_reduce(f, group=self.wg)
            self._sync_device()
            sec = time.perf_counter() - t0
            if it:
                times.append(sec)
        per_iteration = self._max(times)
        return {"what": "dist.all_reduce of the flat gradients, one call per dtype "
                        "(communication only)",
                "times_ms": [round(t * 1000, 4) for t in per_iteration],
                "median_ms": round(statistics.median(per_iteration) * 1000, 4)}


def _device(choice: str) -> Any:
    import torch

    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SelftestError("--device cuda: torch sees no CUDA device on this machine")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def run_rank(opts: Mapping[str, Any]) -> int:
    """This rank's part (under ``torchrun`` or ``autotune launch``): servers serve, workers
    sweep; returns the exit code."""
    import torch
    import torch.distributed as dist

    from autotune.runtime import Runtime
    from autotune.runtime.world import local_role
    from autotune.server import serve

    torch.set_num_threads(1)
    role = local_role()
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    rt = Runtime.bootstrap(timeout=float(opts["timeout"]), role=role)
    if not rt.info.is_worker:
        try:
            serve(rt)
        finally:
            rt.shutdown()
        dist.destroy_process_group()
        return 0
    device = _device(opts["device"])
    w = Worker(rt, opts, device)
    info = rt.info
    configs = sweep(info.workers_per_machine, len(info.servers), rt.limits.max_streams,
                    quick=bool(opts["quick"]), lossy=bool(opts["lossy"]))
    t_start = time.monotonic()
    say = (lambda text: print(text, flush=True)) if w.leader else (lambda text: None)
    size = sum(math.prod(s) * (4 if d == "float32" else 2) for s, d in w.specs)
    say(f"autotune selftest: {len(configs)} configurations, {len(info.workers)} workers on "
        f"{info.n_machines} machine(s), {len(info.servers)} server(s), {len(w.specs)} tensors "
        f"({size / MiB:.3g} MiB, {', '.join(opts['dtypes'])}) on {device.type}")
    if device.type == "cuda":
        say(f"autotune selftest: note: {RUNTIME_DEVICE_NOTE}")
    rows: list[dict[str, Any]] = []
    broken = None
    for i, cfg in enumerate(configs):
        if broken is not None:
            rows.append({"index": i, "label": label(cfg), "config": cfg,
                         "lossy": cfg.get("compression", "none") != "none",
                         "status": "SKIPPED", "passed": False,
                         "error": f"not run: the runtime broke earlier ({broken})"})
            continue
        try:
            row = w.run_config(i, cfg)
        except _Broken as e:
            broken = str(e)
            row = {"index": i, "label": label(cfg), "config": cfg,
                   "lossy": cfg.get("compression", "none") != "none", "status": "FAILED",
                   "passed": False, "error": broken}
        rows.append(row)
        say(f"  [{i + 1}/{len(configs)}] {row['label']}: {row['status']}"
            + (f", {row['median_ms']:.2f} ms" if row.get("median_ms") else "")
            + (f" ({row['error']})" if row.get("error") else ""))
    refs: dict[str, Any] = {}
    if broken is None:
        refs["ddp"] = w.time_ddp()
        refs["all_reduce"] = w.time_all_reduce()
        for row in rows:
            if row.get("median_ms"):
                row["vs_ddp"] = round(refs["ddp"]["median_ms"] / row["median_ms"], 4)
                row["vs_all_reduce"] = round(refs["all_reduce"]["median_ms"]
                                             / row["median_ms"], 4)
        rt.sync(stop=True) if w.leader else rt.sync()
    failed = [r for r in rows if not r["passed"]]
    result = {
        "version": 1, "world": info.as_dict(), "device": str(device),
        "device_note": RUNTIME_DEVICE_NOTE if device.type == "cuda" else None,
        "gradient_bytes": size, "tensors": len(w.specs), "dtypes": list(opts["dtypes"]),
        "iterations": w.iterations, "quick": bool(opts["quick"]), "lossy": bool(opts["lossy"]),
        "timeout": float(opts["timeout"]), "seconds": round(time.monotonic() - t_start, 3),
        "timing": ("median over the iterations of the slowest worker's sync + forward + "
                   "backward + wait; vs_ddp = DDP's median / this median (>1: faster)"),
        "reference": refs, "configs": rows, "passed": not failed,
        "failed": [r["label"] for r in failed],
        "failed_lossless": [r["label"] for r in failed if not r["lossy"]],
        "broken": broken,
    }
    if w.leader:
        print_table(result)
        if opts.get("json"):
            with open(opts["json"], "w") as fh:
                json.dump(result, fh, indent=1)
            print(f"autotune selftest: wrote {opts['json']}", flush=True)
    rt.shutdown()
    if broken is None:
        dist.destroy_process_group()
    # the verdict is the leader's (its table names the failures): under a launcher the
    # failing rank whose last lines are repeated is the leader
    return 1 if failed and w.leader else 0


# ============================================================================ output
def _ms(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def print_table(result: Mapping[str, Any], out: Any = None) -> None:
    """The leader's table: every configuration, its check, differences, time and ratio."""
    from rich.console import Console
    from rich.table import Table

    con = Console(file=out or sys.stdout, highlight=False,
                  width=None if (out or sys.stdout).isatty() else 132)
    w = result["world"]
    title = (f"autotune selftest: {len(w['workers'])} workers, {len(w['servers'])} servers, "
             f"{result['device']}, {result['gradient_bytes'] / MiB:.3g} MiB in "
             f"{result['tensors']} tensors, median of {result['iterations']}")
    t = Table(title=title)
    for name, just in (("#", "right"), ("configuration", "left"), ("check", "left"),
                       ("max |diff|", "right"), ("rel", "right"), ("/bound", "right"),
                       ("ms", "right"), ("vs DDP", "right")):
        t.add_column(name, justify=just)  # type: ignore[arg-type]
    refs = result["reference"]
    if "ddp" in refs:
        d = refs["ddp"]
        t.add_row("", "DDP (gloo, 25 MiB buckets)",
                  "exact" if d["exact"] else f"close ({d['bound_ratio']:.2g})",
                  f"{d['max_abs']:.2g}", "", "", _ms(d["median_ms"]), "x1.00")
        a = refs["all_reduce"]
        t.add_row("", "all_reduce, flat (comm only)", "", "", "", "",
                  _ms(a["median_ms"]), f"x{d['median_ms'] / a['median_ms']:.2f}")
        t.add_section()
    for r in result["configs"]:
        status = r["status"]
        style = {"FAILED": "bold red", "SKIPPED": "yellow"}.get(status, "green")
        t.add_row(str(r["index"] + 1), r["label"], f"[{style}]{status}[/]",
                  "" if r.get("max_abs") is None else f"{r['max_abs']:.2g}",
                  "" if r.get("max_rel") is None else f"{r['max_rel']:.2g}",
                  "" if r.get("bound_ratio") is None else f"{r['bound_ratio']:.2g}",
                  _ms(r.get("median_ms")),
                  "" if r.get("vs_ddp") is None else f"x{r['vs_ddp']:.2f}")
    con.print(t)
    con.print("check: exact = bit for bit torch.equal to all_reduce SUM / n; close = within "
              "the bound of summing in another order; lossy: within the codec's bound on "
              "the first iteration. /bound: worst difference over its bound. rel: max |diff| "
              "/ max |reference|. ms: median of the slowest worker's sync + forward + "
              "backward + wait. vs DDP: DDP's ms / this ms (above 1: faster).")
    if result.get("device_note"):
        con.print(f"note: {result['device_note']}")
    bad = [r for r in result["configs"] if r["status"] in ("FAILED", "SKIPPED")]
    for r in bad:
        con.print(f"[bold red]{r['status']}[/] #{r['index'] + 1} {r['label']}: {r['error']}")
    verdict = ("[green]all configurations passed[/]" if result["passed"] else
               f"[bold red]{len(result['failed'])} configuration(s) failed[/]"
               + (f", {len(result['failed_lossless'])} lossless" if result["failed_lossless"]
                  else ""))
    con.print(f"autotune selftest: {verdict} ({result['seconds']:.1f} s)")


# ============================================================================ command line
def _in_job() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _forward(opts: Mapping[str, Any]) -> list[str]:
    args = ["--size", str(opts["size"]), "--tensors", str(opts["tensors"]),
            "--iterations", str(opts["iterations"]), "--dtypes", ",".join(opts["dtypes"]),
            "--device", opts["device"], "--timeout", str(opts["timeout"]),
            "--seed", str(opts["seed"])]
    if opts["quick"]:
        args.append("--quick")
    if opts["lossy"]:
        args.append("--lossy")
    if opts.get("json"):
        args += ["--json", os.path.abspath(opts["json"])]
    return args


@click.command("selftest")
@click.option("--size", type=float, default=4.0, show_default=True,
              help="MiB of gradients in all.")
@click.option("--tensors", type=int, default=24, show_default=True,
              help="Parameters (tensors) the gradients are split into, of model-like sizes.")
@click.option("--iterations", type=int, default=5, show_default=True,
              help="Timed iterations per configuration (the median is shown).")
@click.option("--quick", is_flag=True, help="A handful of configurations instead of the sweep.")
@click.option("--lossy", is_flag=True,
              help="Check the lossy codecs too (fp16, bf16, topk, randomk, onebit, powersgd).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write every result here (the leader).")
@click.option("--dtypes", default="float32", show_default=True,
              help="Gradient dtypes, comma-separated (float32, float16, bfloat16), in turn.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True, help="Where the gradients live (auto: CUDA if present).")
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds any communication wait may take.")
@click.option("--seed", type=int, default=0, show_default=True, help="Shapes and values.")
@click.option("--workers", "-n", type=int, default=None,
              help="Outside a job: start this many workers on this machine (default 2).")
@click.option("--servers", "-k", type=int, default=None,
              help="Outside a job: and this many servers (default 1).")
@click.option("--machines", "-m", type=int, default=None,
              help="Outside a job: emulate this many machines (see autotune launch).")
def selftest(size: float, tensors: int, iterations: int, quick: bool, lossy: bool,
             json_path: str | None, dtypes: str, device: str, timeout: float, seed: int,
             workers: int | None, servers: int | None, machines: int | None) -> None:
    """Check the runtime's averages against all_reduce and time them against DDP.

    Inside a job (torchrun, autotune launch: RANK and WORLD_SIZE set) this process is one
    rank: servers serve, workers sweep the configurations, the leader prints the table.
    Outside one it starts the job on this machine (--workers, --servers, --machines).
    Exit code 1 if any configuration failed. See docs/gpu.md."""
    if size <= 0:
        raise SelftestError(f"--size must be > 0 MiB, got {size}")
    if iterations < 1:
        raise SelftestError(f"--iterations must be >= 1, got {iterations}")
    if timeout <= 0:
        raise SelftestError(f"--timeout must be > 0, got {timeout}")
    opts = {"size": size, "tensors": tensors, "iterations": iterations, "quick": quick,
            "lossy": lossy, "json": json_path, "dtypes": _parse_dtypes(dtypes),
            "device": device, "timeout": timeout, "seed": seed}
    shapes(int(size * MiB), tensors)  # (checks --tensors)
    if _in_job():
        if workers is not None or servers is not None or machines is not None:
            raise SelftestError("--workers/--servers/--machines start a job; inside one "
                                "(RANK and WORLD_SIZE are set) the job's own shape is used")
        sys.exit(run_rank(opts))
    from autotune.launch import check_world, run_job

    n = 2 if workers is None else workers
    k = 1 if servers is None else servers
    check_world(n, k, machines)
    sys.exit(run_job(["-m", "autotune.selftest", *_forward(opts)], n, k, machines, 30.0))


def main() -> None:
    selftest()


if __name__ == "__main__":
    main()
