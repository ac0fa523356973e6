"""``autotune selftest --ddp``: the program each rank runs (:func:`run_ddp_rank`) to check
and time autotune inside real ``torch.nn.parallel.DistributedDataParallel``, as DDP's comm
hook (:class:`autotune.runtime.ddp.ddp_hook.CommHookState`), instead of the native runtime.

The job may have Summation Service servers (``--servers K``) and several workers per
machine (``--machines M``): as under ``autotune.session(ddp_model)``, the workers join the
native runtime, DDP's group is the workers', and the hook hands DDP's buckets to the
runtime under push/pull and intra ``root``/``scatter`` (:mod:`autotune.runtime.ddp.ddp_buckets`);
servers serve. Each worker builds two copies of one model, parameters of the selftest's shapes
whose forward is ``sum(p * t)`` (:meth:`~autotune.selftest.rank.Checker.module`), and
wraps both in DDP over the same process group with 25 MiB buckets: one with autotune's
hook installed, one plain (DDP's own default hook). The configurations are
:func:`~autotune.selftest.sweep.sweep_of` the hook's ``limits`` (streams x chunk sizes,
lossless; with ``--lossy`` every codec). For each, on the same gradients as the native
selftest (:class:`~autotune.selftest.rank.Checker`: shapes from ``sweep.shapes``, values
seeded per rank and configuration):

* **check** — what DDP with the hook leaves in ``.grad`` against ``all_reduce`` (SUM, then
  ``/ n``) of the same gradients: ``exact`` when bit for bit equal (always with 2 ranks:
  DDP divides by 2 exactly, and ``a + b == b + a``), else ``close`` within
  :func:`~autotune.selftest.bounds.lossless_bound` for another summation order (DDP's
  all-reduce, which averages buckets the runtime does not run, divides before it sums:
  ``divided_first``; the runtime sums, then divides); lossy: the codec's bound on the
  first iteration, error feedback cleared first (a lossless iteration of zero gradients
  folds every bucket's residual), as the native selftest does. Lossless configurations
  are checked on every timed iteration.
* **time** — ``--iterations`` iterations of DDP with the hook and as many of plain DDP,
  alternately (hook first on even iterations, plain first on odd), each
  :func:`autotune.workload.ddp_step_s` (forward + backward until DDP has averaged, after a
  barrier); the slowest rank's time per iteration, medians; ``vs DDP`` = plain DDP's
  median / the hook's (above 1: the hook is faster). The first iteration of a
  configuration (the switch; DDP rebuilds its buckets after its very first) is not timed.

**The process group of DDP.** gloo on CPU. With ``--device cuda``, NCCL when every rank
has a GPU of its own, gloo when two ranks share one (NCCL refuses two ranks on one
device; gloo takes CUDA tensors, and the hook stages its chunks through pinned host
memory): :func:`ddp_backend` decides from every rank's device UUID (:func:`backend_for`).
``autotune selftest --ddp --device cuda -n 2`` on a one-GPU machine is the GPU check of
the hook (docs/gpu.md). None of the CUDA paths has run on a GPU in this project yet.
"""

from __future__ import annotations

import hashlib
import math
import socket
import statistics
import time
from datetime import timedelta
from typing import Any, Mapping

from autotune.selftest import SelftestError
from autotune.selftest.rank import (FLUSH, Checker, Broken, pick_device, report,
                                    run_sweep, say_to, worker_runtime)
from autotune.selftest.sweep import MiB, label, sweep_of

__all__ = ["DDPWorker", "backend_for", "ddp_backend", "device_key", "run_ddp_rank"]

BUCKET_MB = 25.0  # DDP's default bucket cap, for both models
CUDA_NOTE = ("the hook's host staging of CUDA buckets under gloo ran on one H100 and one "
             "H200; its NCCL path (one GPU per rank) has not run in this project yet "
             "(docs/gpu.md)")


def device_key(device: Any) -> int:
    """A 63-bit number naming the physical device a rank computes on (0 on CPU): two ranks
    with the same key share a GPU. The GPU's UUID where torch gives it, else this host and
    the device's index."""
    import torch

    if device.type != "cuda":
        return 0
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    name = f"uuid {uuid}" if uuid else f"host {socket.gethostname()} cuda:{device.index}"
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(),
                          "little") >> 1 or 1


def ddp_backend(device: Any, group: Any) -> tuple[str, str]:
    """The backend of DDP's process group and why (collective over ``group``, gloo, every
    rank): every rank's device type and :func:`device_key` gathered, then
    :func:`backend_for`."""
    import torch
    import torch.distributed as dist

    from autotune.runtime.compat import all_gather

    world = dist.get_world_size(group)
    mine = torch.tensor([int(device.type == "cuda"), device_key(device)], dtype=torch.int64)
    every = torch.zeros(world * 2, dtype=torch.int64)
    all_gather(every, mine, group=group)
    rows = [(bool(c), k) for c, k in every.view(world, 2).tolist()]
    return backend_for(rows, dist.is_nccl_available())


def backend_for(rows: list[tuple[bool, int]], nccl: bool) -> tuple[str, str]:
    """DDP's backend and why, from every rank's (on CUDA, :func:`device_key`) in rank
    order: gloo on CPU; with CUDA, NCCL when every rank has a GPU of its own, gloo when
    two ranks share one (NCCL refuses two ranks on one device) or without NCCL (``nccl``:
    whether this torch has it). Ranks that disagree about the device type are a
    :class:`SelftestError` (on every rank: they all see the same rows)."""
    cuda = [r for r, (is_cuda, _) in enumerate(rows) if is_cuda]
    if not cuda:
        return "gloo", "CPU tensors"
    if len(cuda) != len(rows):
        raise SelftestError(f"--ddp: ranks {cuda} compute on CUDA, the others on the CPU; "
                            "give every rank the same --device")
    if not nccl:
        return "gloo", "this torch has no NCCL"
    seen: dict[int, int] = {}
    for r, (_, key) in enumerate(rows):
        if key in seen:
            return "gloo", (f"ranks {seen[key]} and {r} share a GPU, and NCCL refuses two "
                            "ranks on one device")
        seen[key] = r
    return "nccl", "one GPU per rank"


class DDPWorker(Checker):
    """One rank's part of ``autotune selftest --ddp`` (all ranks in lockstep): two copies
    of the model under DDP over ``ddp_group``, one with autotune's comm hook."""


    def __init__(self, rt: Any, opts: Mapping[str, Any], device: Any, ddp_group: Any,
                 backend: str):
        super().__init__(rt.info, opts, device, rt.workers_group)
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        from autotune.runtime.ddp.ddp_hook import CommHookState

        self.backend = backend
        kwargs: dict[str, Any] = {"device_ids": [device.index]} if device.type == "cuda" \
            else {}
        self.hooked_model, self.plain_model = self.module(), self.module()
        self.hooked = DDP(self.hooked_model, process_group=ddp_group, bucket_cap_mb=BUCKET_MB,
                          **kwargs)
        self.plain = DDP(self.plain_model, process_group=ddp_group, bucket_cap_mb=BUCKET_MB,
                         **kwargs)
        self.rt = rt
        self.hook = CommHookState.install(self.hooked, rt)
        self.ddp_group = ddp_group
        self.x = torch.ones(1, device=device)
        self.plain_checks: list[dict[str, float]] = []
        self.plain_times: list[float] = []  # the slowest rank's, every configuration's
        # DDP rebuilds its buckets after its first iteration and allocates them in the
        # second: both models pay for that here, not in a configuration's timing
        self._new_targets(-3)
        for _ in range(2):
            self._sync(None)
            self._step(self.hooked)
            self._step(self.plain)

    def _sync(self, cfg: Mapping[str, Any] | None) -> Any:
        """Put ``cfg`` (the leader's; ``None``: keep) in force on every rank, servers too
        (:meth:`CommHookState.sync`): once before each iteration of the hooked model."""
        return self.hook.sync(cfg if self.leader else None)

    def stop(self) -> None:
        """The leader's last sync: the servers leave their loop."""
        self.rt.sync(stop=True) if self.leader else self.rt.sync()

    @property
    def params(self) -> list[Any]:
        return list(self.hooked_model.ps)

    # ------------------------------------------------------------------ iterations
    def _step(self, ddp: Any, zero: bool = False) -> float:
        """One iteration of ``ddp`` (forward + backward until DDP averaged), this rank's
        seconds; ``zero``: on zero gradients."""
        from autotune.workload import ddp_step_s

        if zero:
            saved, self.targets = self.targets, [self.torch.zeros_like(t) for t in self.targets]
        try:
            return ddp_step_s(ddp, self.x, self.wg, self.device)
        finally:
            if zero:
                self.targets = saved

    def _grads(self, model: Any) -> dict[str, Any]:
        return self._by_dtype([p.grad if p.grad is not None else self.torch.zeros_like(p)
                               for p in model.ps])

    def _flush(self) -> float:
        """Clear the runtime's error feedback: a lossless iteration of zero gradients (the
        last configuration, uncompressed) folds every residual into its average and
        forgets it. What is left (0.0)."""
        left = 0.0
        for _ in range(3):
            self._sync({**(self.hook.config or {}), **FLUSH})
            self._step(self.hooked, zero=True)
            left = max(self.rt.residual_norms.values(), default=0.0)
            left = self._max([left])[0]
            if left == 0.0:
                break
        return left

    # ------------------------------------------------------------------ one configuration
    def run_config(self, index: int, cfg: dict[str, Any]) -> dict[str, Any]:
        """Check and time one configuration of the hook against plain DDP. A configuration
        the hook rejects is ``FAILED`` (every rank alike); any other error ends the sweep
        (:class:`Broken`): DDP's state after a failed backward is not to be trusted."""
        from autotune.runtime import ConfigError

        row = self.new_row(index, cfg)
        lossy = row["lossy"]
        self._new_targets(index)
        refs = self._reference()
        checks: list[dict[str, float]] = []
        times: list[float] = []
        plain: list[float] = []
        try:
            left = self._flush() if lossy else 0.0
            if left:
                row["error"] = (f"error feedback still holds {left:.3g} after 3 lossless "
                                "iterations")
            else:
                for it in range(self.iterations + 1):  # the first switches, untimed
                    for hooked in ((True, False) if it % 2 == 0 else (False, True)):
                        if hooked:
                            active = self._sync(cfg)
                            row["config"], row["label"] = active.as_dict(), label(active)
                            by_ddp = self.hook.buckets.averaged_again
                        sec = self._step(self.hooked if hooked else self.plain)
                        if not hooked:
                            if it:
                                plain.append(sec)
                            else:
                                self.plain_checks.append(
                                    self._compare(refs, self._grads(self.plain_model), None))
                            continue
                        if it:
                            times.append(sec)
                        if it == 0 or not lossy:  # lossy: the bound holds with no residual
                            checks.append(self._compare(
                                refs, self._grads(self.hooked_model), cfg if lossy else None,
                                # DDP's own all-reduce (it divides first) ran a bucket
                                divided_first=(not self.hook.hooked or
                                               self.hook.buckets.averaged_again > by_ddp)))
        except ConfigError as e:  # rejected by the sync, on every rank alike
            row["error"] = f"ConfigError: {e}"
        except Exception as e:
            raise Broken(f"{type(e).__name__}: {e}") from e
        row = self.finish_row(row, checks, times)
        n = len(row["times_ms"])  # the same on every rank
        padded = plain[:n] + [math.inf] * (n - len(plain[:n]))
        per_iteration = self._max(padded) if n else []
        row["ddp_times_ms"] = [round(t * 1000, 4) for t in per_iteration]
        row["ddp_ms"] = None
        if row["passed"] and per_iteration and all(map(math.isfinite, per_iteration)):
            row["ddp_ms"] = round(statistics.median(per_iteration) * 1000, 4)
            row["vs_ddp"] = round(row["ddp_ms"] / row["median_ms"], 4)
            self.plain_times += per_iteration
        return row

    # ------------------------------------------------------------------ references
    def references(self) -> dict[str, Any]:
        """Plain DDP over every configuration (its check on each first iteration, all its
        timed iterations) and ``dist.all_reduce`` of the flat gradients on DDP's group."""
        refs: dict[str, Any] = {}
        worst = {"exact": 1.0, "ratio": 0.0, "max_abs": 0.0}
        for c in self.plain_checks:
            worst = {"exact": min(worst["exact"], c["exact"]),
                     "ratio": max(worst["ratio"], c["ratio"]),
                     "max_abs": max(worst["max_abs"], c["max_abs"])}
        agg = self._max([1.0 - worst["exact"], worst["ratio"], worst["max_abs"]])
        if self.plain_times:  # the slowest rank's: the same list on every rank
            refs["ddp"] = {
                "what": (f"torch.nn.parallel.DistributedDataParallel with its default hook "
                         f"({self.backend}, {BUCKET_MB:g} MiB buckets) on a copy of the "
                         "model: forward + backward, timed alternately with the hook's "
                         "iterations of every configuration"),
                "label": f"DDP, default hook ({self.backend}, {BUCKET_MB:g} MiB buckets)",
                "times_ms": [round(t * 1000, 4) for t in self.plain_times],
                "median_ms": round(statistics.median(self.plain_times) * 1000, 4),
                "exact": not agg[0], "bound_ratio": agg[1], "max_abs": agg[2]}
            refs["all_reduce"] = self.time_all_reduce(self.ddp_group)
        return refs


def run_ddp_rank(opts: Mapping[str, Any]) -> int:
    """This rank's part of ``autotune selftest --ddp`` (under ``torchrun``, ``autotune
    launch`` or the command itself); the exit code. Servers serve."""
    import torch.distributed as dist

    from autotune.workload import gradient_bytes

    rt = worker_runtime(opts, grad_views=False)  # the hook writes DDP's buckets
    if rt is None:
        return 0
    info = rt.info
    device = pick_device(opts["device"])
    workers = rt.workers_group
    backend, why = ddp_backend(device, workers)
    ddp_group = workers if backend == "gloo" else dist.new_group(
        list(info.workers), backend=backend, timeout=timedelta(seconds=rt.timeout),
        use_local_synchronization=True)
    w = DDPWorker(rt, opts, device, ddp_group, backend)
    configs = sweep_of(w.hook.limits, quick=bool(opts["quick"]),
                       lossy=bool(opts["lossy"]))
    t_start = time.monotonic()
    say = ((lambda text: print(text, file=say_to(opts), flush=True)) if w.leader
           else (lambda text: None))
    size = gradient_bytes(w.params)
    say(f"autotune selftest --ddp: {len(configs)} configurations of DDP's comm hook, "
        f"{len(info.workers)} workers on {info.n_machines} machine(s), "
        f"{len(info.servers)} server(s), {len(w.specs)} tensors "
        f"({size / MiB:.3g} MiB, {', '.join(opts['dtypes'])}) on {device.type}; DDP's "
        f"process group: {backend} ({why})")
    if device.type == "cuda":
        say(f"autotune selftest --ddp: note: {CUDA_NOTE}")
    rows, broken = run_sweep(w, configs, say)
    refs = w.references() if broken is None else {}
    if broken is None:
        w.stop()
    code = report(w, opts, rows, refs, broken, t_start, size, mode="ddp",
                  ddp_backend=backend, ddp_backend_why=why,
                  device_note=CUDA_NOTE if device.type == "cuda" else None,
                  timing=("median over the iterations of the slowest rank's forward + "
                          "backward of DDP with autotune's hook under the configuration; "
                          "ddp_ms: plain DDP (its default hook) on a copy of the model, as "
                          "many iterations, timed alternately with those; vs_ddp = ddp_ms / "
                          "median_ms (>1: the hook is faster)"))
    rt.shutdown()
    if broken is None:
        dist.destroy_process_group()
    return code

