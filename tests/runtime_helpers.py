"""Shared pieces of the runtime tests, and the per-rank script they launch.

Run under ``autotune launch`` (by the tests, through :func:`launch_group`)::

    python tests/runtime_helpers.py sweep OUTDIR     # correctness sweep + error cases
    python tests/runtime_helpers.py faults OUTDIR    # injected fault + a second wait, killed server
    python tests/runtime_helpers.py stall OUTDIR     # a silent peer -> timeout
    python tests/runtime_helpers.py staged OUTDIR    # the sweep through host staging
    python tests/runtime_helpers.py views OUTDIR     # the same with .grad as views

Each worker writes ``OUTDIR/rank<r>.json`` with what it saw; the tests compare. Gradients
are made by a real backward pass (``loss = sum(p * target)``, so ``p.grad == target``), the
reference is ``torch.distributed.all_reduce`` of the same local gradients over a workers'
group, divided by the number of workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any
import zygote

KiB, MiB = 1024, 1024 * 1024
STREAMS = (1, 2, 3, 4, 5, 8)          # 6 and 7 are reserved for the injected faults
CHUNKS = (64 * KiB, 128 * KiB, 1 * MiB, 8 * MiB, 64 * MiB)  # 8 MiB > the largest tensor (4 MiB)
FAULT_ENV = "streams=7,transport=pushpull@fail;streams=6@configure:2"
ROOT = Path(__file__).resolve().parent.parent


def combos(servers: int = 2) -> list[tuple[str, int, str, int]]:
    """(transport, servers, intra, reduce_root) for 2 workers per machine."""
    intra = [("flat", 0), ("root", 0), ("root", 1), ("scatter", 0)]
    out = [("allreduce", 0, i, r) for i, r in intra]
    out += [("pushpull", k, i, r) for k in range(servers + 1) for i, r in intra]
    return out


def config_of(combo: tuple, streams: int, chunk: int, k_max: int = 2) -> dict:
    """The complete configuration (as ``rt.sync`` returns it: the runtime's space has the
    codec parameters too, at their defaults here)."""
    from autotune.tuning.space import SearchSpace

    t, k, intra, root = combo
    space = SearchSpace.build(k_max=k_max, workers_per_machine=2, allow_lossy=True)
    return space.validate({"streams": streams, "chunk_bytes": chunk, "transport": t,
                           "servers": k if t == "pushpull" else 0, "intra": intra,
                           "reduce_root": root if intra == "root" else 0,
                           "compression": "none"})


def sweep_cases(full: bool = False) -> list[tuple[str, dict]]:
    """(shape set, config) in run order. Every combination of transport, k and intra mode
    meets several stream counts and chunk sizes (all of them with ``full``)."""
    cases: list[tuple[str, dict]] = []
    cs = combos()
    for i, c in enumerate(cs):
        pairs = ([(s, ch) for s in STREAMS for ch in CHUNKS] if full else
                 [(STREAMS[(i + a) % len(STREAMS)], CHUNKS[(i + 2 * a) % len(CHUNKS)])
                  for a in range(2)])
        cases += [("mixed", config_of(c, s, ch)) for s, ch in pairs]
    for i, c in enumerate(cs):
        cases.append(("tiny", config_of(c, STREAMS[i % 6], CHUNKS[i % 5])))
    for i, c in enumerate(cs):
        cases.append(("huge", config_of(c, STREAMS[(i + 3) % 6], CHUNKS[(i + 1) % 5])))
    return cases


def case_ids(cases: list[tuple[str, dict]]) -> list[str]:
    """Test ids for (shape set, config) cases, e.g. ``mixed-pushpull-k1-root0-s2-64K``."""
    return [f"{s}-{c['transport']}-k{c['servers']}-{c['intra']}{c['reduce_root']}"
            f"-s{c['streams']}-{c['chunk_bytes'] // 1024}K" for s, c in cases]


def staged_cases() -> list[tuple[str, dict]]:
    """(shape set, config) of the staging launch: 2 workers on one machine and 1 server;
    every (transport, k, intra) with two (streams, chunk) pairs on the mixed set, then the
    tiny and huge sets."""
    cs = combos(servers=1)
    cases = [("mixed", config_of(c, STREAMS[(i + a) % 6], CHUNKS[(i + 2 * a) % 5], k_max=1))
             for i, c in enumerate(cs) for a in range(2)]
    cases += [("tiny", config_of(c, STREAMS[i % 6], CHUNKS[i % 5], k_max=1))
              for i, c in enumerate(cs)]
    cases += [("huge", config_of(c, STREAMS[(i + 3) % 6], CHUNKS[(i + 1) % 5], k_max=1))
              for i, c in enumerate(cs) if i % 3 == 0]
    return cases


# ---------------------------------------------------------------------- pytest side
def launch_group(mode: str, out: Path, workers: int, servers: int, machines: int | None,
                 extra_env: dict[str, str] | None = None, timeout: float = 240,
                 args: tuple[str, ...] = (), script: Path | None = None) -> tuple[int, str]:
    """Run this script (or ``script``) under ``python -m autotune.launch`` with ``mode
    out *args``; (exit code, combined output)."""
    cmd = [sys.executable, "-m", "autotune.launch", "-n", str(workers), "-k", str(servers),
           "--grace", "60"]
    if machines:
        cmd += ["-m", str(machines)]
    cmd += [str(Path(script or __file__).resolve()), mode, str(out), *args]
    env = dict(os.environ, **(extra_env or {}))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(Path(__file__).resolve().parent),
                                  env.get("PYTHONPATH", "")])
    proc = zygote.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def load_results(out: Path, workers: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(workers)]


# ---------------------------------------------------------------------- rank side
def _shape_set(name: str, rank: int) -> tuple[list[Any], dict[int, str]]:
    """Parameters of a shape set and, per index, how it is used (all/even/none/frozen)."""
    import torch

    torch.manual_seed(1234)
    p = torch.nn.Parameter
    shapes: list[tuple[tuple[int, ...], Any, str]] = []
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
    if name == "mixed":
        shapes += [((64, 3, 7, 7), f32, "all"), ((64,), f32, "all"), ((300, 500), f32, "all"),
                   ((1000,), f32, "all"), ((333, 77), f32, "all"), ((5,), f32, "none"),
                   ((31, 17), f16, "all"), ((4097,), f16, "all"), ((129, 3), bf16, "all"),
                   ((11,), f32, "even"), ((3, 3), f32, "frozen"), ((1,), f32, "all")]
        shapes += [((1 + i % 7,), f32, "all") for i in range(60)]
        shapes += [((70001,), f32, "all"), ((2, 64, 3, 3), f32, "channels_last")]
    elif name == "tiny":
        shapes += [((1 + (i * 7) % 40,), f32 if i % 5 else f16, "all") for i in range(300)]
    elif name == "huge":
        shapes += [((1024, 1024), f32, "all"), ((3,), f32, "all"), ((513,), bf16, "all")]
    else:
        raise ValueError(name)
    params, use = [], {}
    for i, (shape, dtype, how) in enumerate(shapes):
        t = torch.randn(shape).to(dtype)
        if how == "channels_last":
            t = t.contiguous(memory_format=torch.channels_last)
        q = p(t, requires_grad=how != "frozen")
        params.append(q)
        use[i] = how
    return params, use


def _used(how: str, rank: int) -> bool:
    return how in ("all", "channels_last") or (how == "even" and rank % 2 == 0)


def _iteration(rt: Any, wg: Any, params: list, use: dict, it: int, cfg: dict | None,
               zero_grads: bool, check_overlap: bool = False, background: bool = False,
               late_s: float = 0.0) -> dict:
    """One sync + backward + wait; compares with all_reduce. Returns a record.
    ``background``: the sync keeps the configuration without waiting (``cfg`` None);
    ``late_s``: the last worker comes to the sync that much later."""
    import torch

    t_start = time.perf_counter()
    info = rt.info
    rank, n = info.rank, len(info.workers)
    if rank == info.workers[-1]:
        time.sleep(late_s)
    t_sync = time.perf_counter()
    active = rt.sync(cfg if rank == info.leader else None, background=background)
    sync_ms = (time.perf_counter() - t_sync) * 1000
    pending = rt._sync.pending is not None
    copies = rt._averager.copies.staged_copies  # copies through host staging (AUTOTUNE_STAGE_CPU)
    lent = rt._averager.copies.lent  # gradients pushed from .grad itself (no pack copy)
    g = torch.Generator().manual_seed(1000 * it + rank)
    targets = [torch.randn(q.shape, generator=g).to(q.dtype) for q in params]
    for q in params:
        if zero_grads and q.grad is not None:
            q.grad.zero_()  # in-place path: .grad keeps its identity
        else:
            q.grad = None
    terms = [(q * t).sum() for i, (q, t) in enumerate(zip(params, targets))
             if use[i] not in ("frozen", "none") and _used(use[i], rank)]
    torch.stack([x.float() for x in terms]).sum().backward()
    overlap = None
    if check_overlap:  # chunks complete before wait() is called: they left during backward
        deadline = time.monotonic() + 60
        while rt.progress[0] < rt.progress[1] and time.monotonic() < deadline:
            time.sleep(0.01)
        overlap = rt.progress
    ids = [id(q.grad) if q.grad is not None else None for q in params]
    # gradients whose own chunks may be pushed from .grad: a chunk of their own, and a
    # contiguous CPU .grad (GradientCopies.lend; no residual is ever left here)
    lay = rt._averager.layout
    lendable = sum(1 for pos, parts in enumerate(rt.setup.from_grad) if parts is not None
                   and (g := lay.params[lay.order[pos]].grad) is not None and g.is_contiguous())
    t_ref = time.perf_counter()
    refs = _reference(params, use, wg, n)
    t_ref = time.perf_counter() - t_ref
    t0 = time.perf_counter()
    rt.wait()
    ms = (time.perf_counter() - t0) * 1000
    copies = rt._averager.copies.staged_copies - copies
    lent = rt._averager.copies.lent - lent
    worst, none_ok, ident_ok, exact = 0.0, True, True, True
    for i, q in enumerate(params):
        if use[i] in ("frozen", "none"):  # never registered / never used anywhere
            none_ok &= q.grad is None
            continue
        if q.grad is None:
            none_ok = False
            continue
        ref = refs[i]
        tol = 1e-5 if q.dtype == torch.float32 else 2e-2
        err = ((q.grad.float() - ref.float()).abs() / (ref.float().abs() + 1)).max().item()
        worst = max(worst, err / tol)
        exact &= torch.equal(q.grad, ref)
        if zero_grads and ids[i] is not None and id(q.grad) != ids[i]:
            ident_ok = False
    from autotune.runtime.data.plan import cut

    return {"config": active, "ratio": worst, "none_ok": none_ok, "ident_ok": ident_ok,
            "exact": exact, "staged_copies": copies, "lent": lent, "lendable": lendable,
            # messages the plan ran, against the chunks cut() gives (fewer: coalesced)
            "messages": len(rt.setup.plan),
            "chunks": len(cut(list(rt.setup.sizes), int(active["chunk_bytes"]))),
            "overlap": overlap, "order": rt.gradient_order, "ms": round(ms, 2),
            "sync_ms": round(sync_ms, 2), "pending": pending,
            "ref_ms": round(t_ref * 1000, 2),
            "total_ms": round((time.perf_counter() - t_start) * 1000, 2)}


def _reference(params: list, use: dict, wg: Any, n: int) -> list:
    """torch.distributed.all_reduce's average of the local gradients (a missing one counts
    as zeros); one all-reduce per dtype of the gradients laid end to end."""
    import torch
    import torch.distributed as dist

    refs: list = [None] * len(params)
    by_dtype: dict = {}
    for i, q in enumerate(params):
        if use[i] not in ("frozen", "none"):
            by_dtype.setdefault(q.dtype, []).append(i)
    for dtype, idx in by_dtype.items():
        flat = torch.cat([(params[i].grad if params[i].grad is not None
                           else torch.zeros_like(params[i])).detach().reshape(-1) for i in idx])
        dist.all_reduce(flat, group=wg)
        flat /= n
        off = 0
        for i in idx:
            k = params[i].numel()
            refs[i] = flat[off:off + k].view(params[i].shape)
            off += k
    return refs


def _expect_error(fn: Any, kind: type) -> str:
    try:
        fn()
    except kind as e:
        return f"{type(e).__name__}: {e}"
    except Exception as e:  # the wrong error type is a failure the test reports
        return f"WRONG {type(e).__name__}: {e}"
    return "NO ERROR"


def run_sweep(out: Path, full: bool) -> None:
    import torch
    import torch.distributed as dist

    from autotune.runtime import ConfigError, Runtime, RuntimeFault, UsageError

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rt = Runtime.bootstrap(timeout=120)
    info = rt.info
    rec: dict[str, Any] = {"info": info.as_dict(), "cases": [], "errors": {}}
    wg = dist.new_group(list(info.workers), use_local_synchronization=True)
    leader = info.rank == info.leader
    current = None
    params: list = []
    use: dict = {}
    baseline_threads = threading.active_count()
    cases = sweep_cases(full)
    for idx, (shape_set, cfg) in enumerate(cases):
        if shape_set != current:
            params, use = _shape_set(shape_set, info.rank)
            rt.register(params)
            current = shape_set
        rec["cases"].append(_iteration(rt, wg, params, use, idx, cfg, zero_grads=idx % 3 == 0,
                                       check_overlap=shape_set != "mixed" and idx % 2 == 0))
    rec["threads"] = [baseline_threads, threading.active_count(), rt.threads]
    rec["groups"] = rt.process_groups
    rec["staged_copies"] = rt._averager.copies.staged_copies  # CPU gradients: none

    # -------- errors, every rank alike, and the group stays usable after each
    base = dict(sweep_cases()[0][1])
    err = rec["errors"]
    it = len(cases)
    # a codec outside the space is refused on every rank (lossy codecs themselves are
    # wired in: tests/runtime/test_compression_runtime.py)
    err["lossy"] = _expect_error(
        lambda: rt.sync({**base, "compression": "zstd"} if leader else None), ConfigError)
    err["outside"] = _expect_error(
        lambda: rt.sync({**base, "streams": 99} if leader else None), ConfigError)
    err["configure"] = _expect_error(  # AUTOTUNE_FAULT: rank 2 cannot apply streams=6
        lambda: rt.sync({**base, "streams": 6} if leader else None), RuntimeFault)
    # rank 1 registers a different shape -> every rank raises, nobody hangs
    bad = [torch.nn.Parameter(torch.zeros(3 if info.rank == 1 else 4))]
    rt.register(bad)
    err["mismatch"] = _expect_error(lambda: rt.sync(base if leader else None), ConfigError)
    rt.register(params)
    # backward + wait between register() and sync(): a clear error, not silent garbage
    torch.stack([q.float().sum() for q in params if q.requires_grad]).sum().backward()
    err["register_no_sync"] = _expect_error(rt.wait, RuntimeError)
    # two syncs with no iteration between under pushpull: the round is flushed (servers
    # were serving it), with a warning, and the next iteration is right
    pp = {**base, "transport": "pushpull", "servers": 2, "streams": 2}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rt.sync(pp if leader else None)
        rt.sync(pp if leader else None)
    err["flush_warned"] = any("discarded" in str(w.message) for w in caught)
    rec["after_errors"] = _iteration(rt, wg, params, use, it, base, False)
    # a lent .grad (pushed from .grad itself) changed in place before wait(), as gradient
    # clipping too early would: a UsageError naming the parameter, on every rank alike
    rt.sync(pp if leader else None)
    for q in params:
        q.grad = None
    torch.stack([(2 * q).float().sum() for q in params if q.requires_grad]).sum().backward()
    lent = rt._averager.current.lent if rt._averager.current is not None else {}
    err["lent_before_change"] = len(lent)
    for q in params:
        if q.grad is not None:
            q.grad.mul_(0.5)
    err["changed_lent"] = _expect_error(rt.wait, UsageError)
    rec["after_changed"] = _iteration(rt, wg, params, use, it + 1, base, False)
    # a background keep (a settled session's quiet stretch, push/pull): the leader's sync
    # returns at once while the last worker comes 1.5 s late, where a sync that waits
    # waits for it; the averages stay exact; misuse is refused on every worker before
    # anything is sent
    err["background_stop"] = _expect_error(lambda: rt.sync(stop=True, background=True),
                                           UsageError)
    rec["background"] = [_iteration(rt, wg, params, use, it + 2, pp, False),
                         _iteration(rt, wg, params, use, it + 3, None, False, late_s=1.5)]
    rec["background"] += [_iteration(rt, wg, params, use, it + 4 + k, None, False,
                                     background=True, late_s=1.5 if k == 0 else 0.0)
                          for k in range(3)]
    # injected fault (streams=7, pushpull): wait() raises, .grad intact, a second wait() averages
    faulty = {**base, "transport": "pushpull", "servers": 1, "streams": 7}
    rt.sync(faulty if leader else None)
    g = torch.Generator().manual_seed(777 + info.rank)
    for q in params:
        q.grad = None
    targets = [torch.randn(q.shape, generator=g).to(q.dtype) for q in params]
    terms = [(q * t).sum() for i, (q, t) in enumerate(zip(params, targets))
             if use[i] not in ("frozen", "none") and _used(use[i], info.rank)]
    torch.stack([x.float() for x in terms]).sum().backward()
    before = [q.grad.clone() if q.grad is not None else None for q in params]
    try:
        rt.wait()
        err["injected"] = "NO ERROR"
    except RuntimeFault as e:
        err["injected"] = f"recoverable={e.recoverable}: {e}"
    err["intact"] = all((a is None and q.grad is None) or (a is not None and torch.equal(a, q.grad))
                        for a, q in zip(before, params))
    good = {**base, "transport": "pushpull", "servers": 2, "streams": 3, "intra": "scatter"}
    rt.sync(good if leader else None)
    refs = _reference(params, use, wg, len(info.workers))
    rt.wait()
    err["retry_ratio"] = max(
        ((q.grad.float() - r.float()).abs() / (r.float().abs() + 1)).max().item()
        / (1e-5 if q.dtype == torch.float32 else 2e-2)
        for q, r in zip(params, refs) if r is not None)
    rec["worker_max"] = rt.worker_max(float(info.rank) * 1.5)
    rt.sync(stop=True) if leader else rt.sync()
    rt.shutdown()
    rec["stopped"] = rt.stopped
    (out / f"rank{info.rank}.json").write_text(json.dumps(rec))
    dist.destroy_process_group()


def _viewed(rt: Any, params: list, working: bool = False) -> int:
    """How many of ``params``' gradients are views of the runtime's flat buffers (grad
    views, ``AUTOTUNE_GRAD_VIEWS=1``); ``working``: of the buffers the next round packs
    and reduces into (there must be none: the rotation keeps the reduction out of them)."""
    a = rt._active
    buffers = [*a.inp.values(), *a.out.values()]
    if not working:
        buffers += [t for spares in a.spares.values() for t in spares.values()]
    ptrs = {t.untyped_storage().data_ptr() for t in buffers}
    return sum(1 for q in params
               if q.grad is not None and q.grad.untyped_storage().data_ptr() in ptrs)


def run_staged(out: Path) -> None:
    """2 workers + 1 server under :func:`staged_cases`, then an injected fault and
    a second ``wait()``. With ``AUTOTUNE_STAGE_CPU=1`` the CPU gradients go through host staging
    (Staged copies handed to the rounds, waited for by the stream threads, copied back
    through ``HostStaging.to_device``; a second wait repacks through staging); with
    ``AUTOTUNE_GRAD_VIEWS=1`` (mode ``views``) ``.grad`` becomes a view of the averages."""
    import torch
    import torch.distributed as dist

    from autotune.runtime import Runtime, RuntimeFault

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rt = Runtime.bootstrap(timeout=120)
    info = rt.info
    rec: dict[str, Any] = {"info": info.as_dict(), "cases": [],
                           "copy_cpu": rt._averager.copies.copy_cpu}
    wg = dist.new_group(list(info.workers), use_local_synchronization=True)
    leader = info.rank == info.leader
    current, params, use = None, [], {}
    cases = staged_cases()
    for idx, (shape_set, cfg) in enumerate(cases):
        if shape_set != current:
            params, use = _shape_set(shape_set, info.rank)
            rt.register(params)
            current = shape_set
        case = _iteration(rt, wg, params, use, idx, cfg, zero_grads=idx % 3 == 0,
                          check_overlap=shape_set == "tiny" and idx % 2 == 0)
        case["used"] = sum(1 for i in use if _used(use[i], info.rank))
        case["viewed"] = _viewed(rt, params)
        case["in_working"] = _viewed(rt, params, working=True)
        # gradients whose layout allows a view (a channels_last one keeps its own tensor)
        case["dense"] = sum(1 for q in params if q.grad is not None and q.grad.is_contiguous())
        rec["cases"].append(case)
    # an injected fault (streams=7 under pushpull), then a second wait() under another configuration;
    # the gradients zeroed in place (with grad views: views of the runtime's buffers)
    base = dict(cases[0][1])
    rt.sync({**base, "transport": "pushpull", "servers": 1, "streams": 7} if leader else None)
    for q in params:
        if q.grad is not None:
            q.grad.zero_()
    g = torch.Generator().manual_seed(4242 + info.rank)
    targets = [torch.randn(q.shape, generator=g).to(q.dtype) for q in params]
    torch.stack([(q * t).sum().float() for q, t in zip(params, targets)]).sum().backward()
    rec["fault_viewed"] = _viewed(rt, params)
    before = [None if q.grad is None else q.grad.clone() for q in params]
    try:
        rt.wait()
        rec["injected"] = "NO ERROR"
    except RuntimeFault as e:
        rec["injected"] = f"recoverable={e.recoverable}"
    rec["intact"] = all((b is None and q.grad is None) or torch.equal(b, q.grad)
                        for b, q in zip(before, params))
    rt.sync({**base, "transport": "allreduce", "streams": 3, "intra": "scatter"}
            if leader else None)
    refs = _reference(params, use, wg, len(info.workers))
    rt.wait()
    rec["retry_exact"] = all(torch.equal(q.grad, r) for q, r in zip(params, refs))
    rt.sync(stop=True) if leader else rt.sync()
    rt.shutdown()
    (out / f"rank{info.rank}.json").write_text(json.dumps(rec))
    dist.destroy_process_group()


def run_faults(out: Path) -> None:
    """2 workers + 1 server: pushpull runs, then the leader kills the server mid-run; the
    workers drop it and average the same gradients again with all-reduce."""
    import signal

    import torch
    import torch.distributed as dist

    from autotune.runtime import Runtime, RuntimeFault

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    timeout = 20.0
    rt = Runtime.bootstrap(timeout=timeout)
    info = rt.info
    leader = info.rank == info.leader
    params = [torch.nn.Parameter(torch.randn(50_000)), torch.nn.Parameter(torch.randn(7))]
    rt.register(params)
    cfg = {"transport": "pushpull", "servers": 1, "streams": 2, "chunk_bytes": 64 * KiB}
    rec: dict[str, Any] = {"ok_iterations": 0}
    server = info.servers[0]
    for it in range(6):
        rt.sync(cfg if leader else None)
        if it == 3:
            # the server serves this round (its sync ended well within 1 s) and waits for
            # both workers' chunks; rank 1 holds its chunks back until the server is dead
            time.sleep(1.0)
            if leader:
                store = dist.distributed_c10d._get_default_store()
                os.kill(int(store.get(f"autotune/pid/{server}").decode()), signal.SIGKILL)
            else:
                time.sleep(1.0)
        for q in params:  # zeroed in place (with grad views: views of the last averages)
            if q.grad is not None:
                q.grad.zero_()
        sum((q * (info.rank + 1)).sum() for q in params).backward()
        viewed = (_viewed(rt, params), _viewed(rt, params, working=True))
        t0 = time.monotonic()
        try:
            rt.wait()
            rec["ok_iterations"] += 1
        except RuntimeFault as e:
            rec.update(fault=str(e), rank=e.rank, recoverable=e.recoverable,
                       seconds=time.monotonic() - t0, iteration=it, timeout=timeout,
                       server=server, viewed=viewed,
                       lent=rt._averager.copies.lent)  # gradients pushed from .grad
            rec["intact"] = all(torch.equal(q.grad, torch.full_like(q, info.rank + 1))
                                for q in params)
            break
    # the workers go on without the server: the same gradients, averaged again
    try:
        rt.sync(cfg if leader else None)
        rec["after"] = "NO ERROR"
    except Exception as e:
        rec["after"] = f"{type(e).__name__}: {e}"
    rt.sync({"transport": "allreduce", "streams": 2} if leader else None)
    rt.wait()
    rec["retried"] = all(torch.allclose(q.grad, torch.full_like(q, 1.5)) for q in params)
    rt.sync(stop=True) if leader else rt.sync()
    rec["lost_servers"] = list(rt.lost_servers)
    (out / f"rank{info.rank}.json").write_text(json.dumps(rec))
    t0 = time.monotonic()
    rt.shutdown()
    print(f"shutdown took {time.monotonic() - t0:.1f}s", flush=True)
    # (no destroy_process_group: a member died; the process still exits cleanly)


def run_stall(out: Path) -> None:
    """2 workers: rank 1 goes silent under streams=2 (AUTOTUNE_FAULT); rank 0 times out."""
    import torch
    import torch.distributed as dist

    from autotune.runtime import Runtime, RuntimeFault

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    timeout = 4.0
    rt = Runtime.bootstrap(timeout=timeout)
    info = rt.info
    params = [torch.nn.Parameter(torch.randn(1000))]
    rt.register(params)
    rec: dict[str, Any] = {}
    rt.sync({"streams": 1} if info.rank == 0 else None)
    params[0].grad = None
    params[0].sum().backward()
    rt.wait()
    rec["first"] = "ok"
    rt.sync({"streams": 2} if info.rank == 0 else None)
    params[0].grad = None
    params[0].sum().backward()
    t0 = time.monotonic()
    try:
        rt.wait()
        rec["fault"] = None
    except RuntimeFault as e:
        rec.update(fault=str(e), rank=e.rank, recoverable=e.recoverable)
    rec["seconds"] = time.monotonic() - t0
    rec["timeout"] = timeout
    rt.shutdown()
    (out / f"rank{info.rank}.json").write_text(json.dumps(rec))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    mode, outdir = sys.argv[1], Path(sys.argv[2])
    outdir.mkdir(parents=True, exist_ok=True)
    if mode == "sweep":
        run_sweep(outdir, full="--full" in sys.argv[3:])
    elif mode == "faults":
        run_faults(outdir)
    elif mode == "stall":
        run_stall(outdir)
    elif mode in ("staged", "views"):  # the same job; the environment makes the difference
        run_staged(outdir)
    else:
        raise SystemExit(f"unknown mode {mode}")
