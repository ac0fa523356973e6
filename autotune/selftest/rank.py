"""The program each rank of ``autotune selftest`` runs (:func:`run_rank`), under
``torchrun``, ``autotune launch`` or the command itself: servers serve; workers
(:class:`Worker`, all in lockstep) check and time every configuration of the sweep, then
DDP (:func:`autotune.workload.time_ddp`) and ``dist.all_reduce`` on the same gradients;
the leader prints the table and writes the JSON. See :mod:`autotune.selftest`.

What both modes share lives here: :class:`Checker` (a worker's gradients, the
``all_reduce`` reference, the comparison with its bound, one row of the table),
:func:`run_sweep` (every configuration in turn, the rest skipped once something broke)
and :func:`report` (the result, the table, the JSON). ``--ddp`` runs
:mod:`autotune.selftest.rank_ddp` instead, which reuses them."""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from typing import Any, Mapping, Sequence

from autotune.selftest import SelftestError
from autotune.selftest.bounds import UNIT_ROUNDOFF, half_codec_bound, lossless_bound, norm_factor
from autotune.selftest.sweep import MiB, label, shapes, sweep_of
from autotune.selftest.table import print_table

FLUSH = {"compression": "none"}  # an uncompressed round sends and clears every residual
RUNTIME_DEVICE_NOTE = ("the runtime stages CUDA gradients through pinned host buffers on a "
                       "side CUDA stream; all its communication is gloo (no NCCL engine, no "
                       "GPU codecs). Checked on one H100 and one H200 only (docs/gpu.md)")


class Broken(Exception):
    """The runtime (or, under ``--ddp``, DDP) is unusable: the sweep ends."""


class Checker:
    """What every worker of a selftest holds, whichever mode: the gradients of each
    configuration, the ``all_reduce`` reference of them, the comparison with its bound,
    MAX over the workers, and one row of the table from a configuration's checks and
    times. ``info``: the world (:class:`~autotune.runtime.control.world.WorldInfo`); ``group``:
    the workers' gloo group the reference and the MAX use."""

    #: whether the average under test divides every gradient by ``n`` before summing
    #: (DDP and its comm hooks do; the native runtime sums first)
    DIVIDED_FIRST = False

    def __init__(self, info: Any, opts: Mapping[str, Any], device: Any, group: Any):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.info = info
        self.n = len(info.workers)
        self.leader = info.rank == info.leader
        self.opts = opts
        self.device = device
        self.iterations = int(opts["iterations"])
        self.wg = group
        self.specs = shapes(int(opts["size"] * MiB), int(opts["tensors"]), opts["dtypes"],
                            int(opts["seed"]))
        self.targets: list[Any] = []

    # ------------------------------------------------------------------ tensors
    def _make_params(self) -> list[Any]:
        """New zero parameters of the selftest's shapes on this worker's device."""
        torch = self.torch
        out = []
        for shape, dtype in self.specs:
            t = torch.zeros(shape, dtype=getattr(torch, dtype), device=self.device)
            if len(shape) == 4:  # a conv weight as many models keep it
                t = t.contiguous(memory_format=torch.channels_last)
            out.append(torch.nn.Parameter(t))
        return out

    def module(self) -> Any:
        """A model of new parameters of the selftest's shapes (``ps``) whose forward is
        :meth:`_loss`: its backward leaves this worker's current targets in ``.grad``."""
        torch = self.torch
        worker = self

        class Same(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.ps = torch.nn.ParameterList(worker._make_params())

            def forward(self, x: Any = None) -> Any:
                return worker._loss(list(self.ps))

        return Same()

    def _new_targets(self, index: int) -> None:
        """This worker's gradients for configuration ``index``: random, with per-tensor
        scales from 1e-3 to 1e2, different on every worker."""
        torch = self.torch
        g = torch.Generator().manual_seed(int(self.opts["seed"]) * 1_000_003 + index * 1009
                                          + self.info.rank)
        out = []
        for shape, dtype in self.specs:
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
                 cfg: Mapping[str, Any] | None,
                 divided_first: bool | None = None) -> dict[str, float]:
        """``exact`` (1/0), ``ratio`` (worst difference over its bound), ``max_abs``,
        ``max_ref`` for the gradients ``got`` against the reference. ``cfg``: the lossy
        configuration whose bound applies (``None``: lossless). ``divided_first``: whether
        ``got`` divided before summing (default :attr:`DIVIDED_FIRST`)."""
        first = self.DIVIDED_FIRST if divided_first is None else divided_first
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
                bound = half_codec_bound(ref64, mine64, r["abs_sum"], self.n, dtype, codec,
                                         first)
            elif codec != "none":
                u = UNIT_ROUNDOFF[dtype]
                bound = (norm_factor(cfg) * r["norm_sum"] / self.n * (1 + 1e-4)
                         + u * (ref64.norm().item() + mine64.norm().item())
                         + 2 * u * r["abs_sum"].norm().item() + 1e-30)
                ratio = max(ratio, (mine64 - ref64).norm().item() / bound)
                continue
            else:
                bound = lossless_bound(ref64, mine64, r["abs_sum"], self.n, dtype, first)
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

    def _loss(self, params: Sequence[Any]) -> Any:
        return self.torch.stack([(p * t).sum().float()
                                 for p, t in zip(params, self.targets)]).sum()

    # ------------------------------------------------------------------ rows
    @staticmethod
    def new_row(index: int, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """A configuration's row before it ran (``FAILED`` until :meth:`finish_row`)."""
        return {"index": index, "label": label(cfg), "config": dict(cfg),
                "lossy": cfg.get("compression", "none") != "none", "status": "FAILED",
                "passed": False, "exact": False, "error": None, "max_abs": None,
                "max_rel": None, "bound_ratio": None, "times_ms": [], "median_ms": None,
                "vs_ddp": None, "vs_all_reduce": None}

    def finish_row(self, row: dict[str, Any], checks: Sequence[Mapping[str, float]],
                   times: Sequence[float]) -> dict[str, Any]:
        """Combine every worker's ``checks`` (of :meth:`_compare`) and ``times`` (seconds
        per timed iteration) of ``row``'s configuration: status, differences, the slowest
        worker's time per iteration and their median (collective: every worker that did
        not break calls it)."""
        lossy = row["lossy"]
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
        padded = list(times) + [math.inf] * (int(n_times) - len(times))
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
    def time_all_reduce(self, group: Any = None) -> dict[str, Any]:
        """``dist.all_reduce`` of the flat gradients (one call per dtype) on ``group``
        (default: the workers' group): communication alone, the floor of any averaging
        on this group."""
        group = self.wg if group is None else group
        self._new_targets(-2)
        flats = [f.to(self.device) for f in self._by_dtype(self.targets).values()]
        times = []
        for it in range(self.iterations + 1):
            self.dist.barrier(group=self.wg)
            t0 = time.perf_counter()
            for f in flats:
                self.dist.all_reduce(f, group=group)
            self._sync_device()
            sec = time.perf_counter() - t0
            if it:
                times.append(sec)
        per_iteration = self._max(times)
        return {"what": "dist.all_reduce of the flat gradients, one call per dtype "
                        "(communication only)",
                "times_ms": [round(t * 1000, 4) for t in per_iteration],
                "median_ms": round(statistics.median(per_iteration) * 1000, 4)}


class Worker(Checker):
    """One worker's part of the native selftest (all workers run it in lockstep): the
    runtime ``rt`` averages the gradients of parameters registered with it."""

    def __init__(self, rt: Any, opts: Mapping[str, Any], device: Any):
        import torch.distributed as dist

        super().__init__(rt.info, opts, device,
                         dist.new_group(list(rt.info.workers), use_local_synchronization=True))
        self.rt = rt
        self.params = self._make_params()
        rt.register(self.params)

    # ------------------------------------------------------------------ iterations
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
        """Check and time one configuration. Raises :class:`Broken` when the runtime is
        unusable afterwards (every worker alike)."""
        from autotune.runtime import ConfigError, RuntimeFault

        row = self.new_row(index, cfg)
        lossy = row["lossy"]
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
                raise Broken(row["error"]) from e
        except RuntimeError as e:  # a flush that did not clear (all ranks: MAX above)
            row["error"] = str(e)
        # every worker reaches this point unless the runtime broke: combine their views
        return self.finish_row(row, checks, times)

    # ------------------------------------------------------------------ references
    def time_ddp(self) -> dict[str, Any]:
        """DDP (gloo, default 25 MiB buckets) on parameters of the same shapes and the same
        gradients: forward + backward until DDP averaged, median of the slowest worker
        (:func:`autotune.workload.time_ddp`; the first iteration untimed, checked)."""
        from autotune.workload import time_ddp

        model = self.module()
        self._new_targets(-1)
        refs = self._reference()
        checks: list[dict[str, float]] = []

        def after(it: int) -> None:
            if it == 0:  # DDP divides every gradient by n before it sums
                checks.append(self._compare(refs, self._by_dtype([p.grad for p in model.ps]),
                                            None, divided_first=True))

        per_iteration = time_ddp(model, 1, self.iterations, init_sync=True,
                                 process_group=self.wg, device=self.device, after=after)
        (check,) = checks
        agg = self._max([1.0 - check["exact"], check["ratio"], check["max_abs"],
                         check["max_ref"]])
        return {"what": "torch.nn.parallel.DistributedDataParallel (gloo, 25 MiB buckets): "
                        "forward + backward",
                "label": "DDP (gloo, 25 MiB buckets)",
                "times_ms": [round(t * 1000, 4) for t in per_iteration],
                "median_ms": round(statistics.median(per_iteration) * 1000, 4),
                "exact": not agg[0], "bound_ratio": agg[1], "max_abs": agg[2]}


def pick_device(choice: str) -> Any:
    """The device of ``--device`` (``auto``: CUDA if present) on this rank:
    ``cuda:LOCAL_RANK % device_count`` (ranks beyond the GPUs share them), made current."""
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


def run_sweep(w: Any, configs: Sequence[dict[str, Any]],
              say: Any) -> tuple[list[dict[str, Any]], str | None]:
    """Every configuration through ``w.run_config`` in turn, each announced with ``say``;
    once one raised :class:`Broken` the rest are ``SKIPPED``. (rows, what broke or
    ``None``)."""
    rows: list[dict[str, Any]] = []
    broken = None
    for i, cfg in enumerate(configs):
        if broken is not None:
            rows.append({"index": i, "label": label(cfg), "config": cfg,
                         "lossy": cfg.get("compression", "none") != "none",
                         "status": "SKIPPED", "passed": False,
                         "error": f"not run: the sweep ended earlier ({broken})"})
            continue
        try:
            row = w.run_config(i, cfg)
        except Broken as e:
            broken = str(e)
            row = {"index": i, "label": label(cfg), "config": cfg,
                   "lossy": cfg.get("compression", "none") != "none", "status": "FAILED",
                   "passed": False, "error": broken}
        rows.append(row)
        say(f"  [{i + 1}/{len(configs)}] {row['label']}: {row['status']}"
            + (f", {row['median_ms']:.2f} ms" if row.get("median_ms") else "")
            + (f" ({row['error']})" if row.get("error") else ""))
    return rows, broken


def say_to(opts: Mapping[str, Any]) -> Any:
    """Where the leader's lines go: stderr with ``--json`` (stdout is the JSON's)."""
    return sys.stderr if opts.get("json") else sys.stdout


def report(w: Any, opts: Mapping[str, Any], rows: list[dict[str, Any]],
           refs: dict[str, Any], broken: str | None, t_start: float, size: int,
           **fields: Any) -> int:
    """The result of a run (``fields``: what the mode adds or says differently: ``mode``,
    ``timing``, ``device_note``...); the leader prints the table, writes ``--json-out`` and prints ``--json``.
    Each row's ratios to the references are filled in where the mode did not. The exit
    code of this rank: 1 on the leader if any configuration failed, else 0."""
    for row in rows:
        if row.get("median_ms"):
            if row.get("vs_ddp") is None and "ddp" in refs:
                row["vs_ddp"] = round(refs["ddp"]["median_ms"] / row["median_ms"], 4)
            if "all_reduce" in refs:
                row["vs_all_reduce"] = round(refs["all_reduce"]["median_ms"]
                                             / row["median_ms"], 4)
    failed = [r for r in rows if not r["passed"]]
    result = {
        "version": 1, "mode": "native", "world": w.info.as_dict(), "device": str(w.device),
        "device_note": None, "gradient_bytes": size, "tensors": len(w.specs),
        "dtypes": list(opts["dtypes"]), "iterations": w.iterations,
        "quick": bool(opts["quick"]), "lossy": bool(opts["lossy"]),
        "timeout": float(opts["timeout"]), "seconds": round(time.monotonic() - t_start, 3),
        "timing": ("median over the iterations of the slowest worker's sync + forward + "
                   "backward + wait; vs_ddp = DDP's median / this median (>1: faster)"),
        **fields,
        "reference": refs, "configs": rows, "passed": not failed,
        "failed": [r["label"] for r in failed],
        "failed_lossless": [r["label"] for r in failed if not r["lossy"]],
        "broken": broken,
    }
    if w.leader:
        text = sys.stderr if opts.get("json") else sys.stdout  # --json: stdout is the JSON's
        print_table(result, out=text)
        if opts.get("json_out"):
            with open(opts["json_out"], "w") as fh:
                json.dump(result, fh, indent=1)
            print(f"autotune selftest: wrote {opts['json_out']}", file=text, flush=True)
        if opts.get("json"):
            print(json.dumps(result, indent=1), flush=True)
    # the verdict is the leader's (its table names the failures): under a launcher the
    # failing rank whose last lines are repeated is the leader
    return 1 if failed and w.leader else 0


def worker_runtime(opts: Mapping[str, Any], **options: Any) -> Any:
    """This rank's runtime (the world joined, ``options`` for ``Runtime.bootstrap``); on a
    server rank, serve until the leader stops the job, leave, and return ``None``."""
    import torch
    import torch.distributed as dist

    from autotune.runtime import Runtime
    from autotune.server import serve

    torch.set_num_threads(1)
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    rt = Runtime.bootstrap(timeout=float(opts["timeout"]), **options)
    if rt.info.is_worker:
        return rt
    try:
        serve(rt)
    finally:
        rt.shutdown()
    dist.destroy_process_group()
    return None


def run_rank(opts: Mapping[str, Any]) -> int:
    """This rank's part (under ``torchrun`` or ``autotune launch``): servers serve, workers
    sweep; returns the exit code. (DDP's comm hook, ``--ddp``, is
    :func:`autotune.selftest.rank_ddp.run_ddp_rank`.)"""
    import torch.distributed as dist

    from autotune.workload import gradient_bytes

    rt = worker_runtime(opts)
    if rt is None:
        return 0
    device = pick_device(opts["device"])
    w = Worker(rt, opts, device)
    info = rt.info
    configs = sweep_of(rt.limits, quick=bool(opts["quick"]), lossy=bool(opts["lossy"]))
    t_start = time.monotonic()
    say = ((lambda text: print(text, file=say_to(opts), flush=True)) if w.leader
           else (lambda text: None))
    size = gradient_bytes(w.params)
    say(f"autotune selftest: {len(configs)} configurations, {len(info.workers)} workers on "
        f"{info.n_machines} machine(s), {len(info.servers)} server(s), {len(w.specs)} tensors "
        f"({size / MiB:.3g} MiB, {', '.join(opts['dtypes'])}) on {device.type}")
    if device.type == "cuda":
        say(f"autotune selftest: note: {RUNTIME_DEVICE_NOTE}")
    rows, broken = run_sweep(w, configs, say)
    refs: dict[str, Any] = {}
    if broken is None:
        refs["ddp"] = w.time_ddp()
        refs["all_reduce"] = w.time_all_reduce()
        rt.sync(stop=True) if w.leader else rt.sync()
    code = report(w, opts, rows, refs, broken, t_start, size,
                  device_note=RUNTIME_DEVICE_NOTE if device.type == "cuda" else None)
    rt.shutdown()
    if broken is None:
        dist.destroy_process_group()
    return code
