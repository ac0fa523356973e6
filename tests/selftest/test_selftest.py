"""``autotune selftest``: its sweep and bounds, its usage errors (one line, exit 2), then
real jobs (2 workers + 1 server on loopback, gloo) under ``autotune launch`` and through
``autotune selftest`` itself, one passing and one with injected faults that must be
reported as FAILED, and ``--ddp`` (DDP's comm hook in real DDP, 2 workers)."""

from __future__ import annotations

# own world: the selftest command starts its own job

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from autotune.errors import AutotuneError
from autotune.runtime.config import TRANSPORTS, Limits, RuntimeConfig
from autotune.selftest import SelftestError
from autotune.selftest.bounds import TINY, half_codec_bound, lossless_bound, norm_factor
from autotune.selftest.sweep import CHUNKS, LOSSY_CODECS, STREAMS, label, shapes, sweep, sweep_of
import zygote

ROOT = Path(__file__).resolve().parents[2]
AUTOTUNE = Path(sys.executable).parent / "autotune"  # the console script: a Python file
# --device cpu: the CPU path on every machine (docs/gpu.md and scripts/gpu_check.sh run CUDA)
QUICK = ["--quick", "--size", "0.5", "--iterations", "2", "--tensors", "16", "--device", "cpu"]


# ---------------------------------------------------------------------- no processes
@pytest.mark.parametrize("wpm,servers", [(1, 0), (2, 1), (2, 2), (4, 3)])
@pytest.mark.parametrize("quick", [True, False])
def test_sweep_is_valid_and_covers_the_job(wpm: int, servers: int, quick: bool) -> None:
    configs = sweep(wpm, servers, quick=quick, lossy=True)
    for cfg in configs:
        RuntimeConfig.of(cfg).check(Limits(servers=servers, workers_per_machine=wpm))
    lossless = [c for c in configs if c["compression"] == "none"]
    assert len({label(c) for c in configs}) == len(configs)
    assert {c["transport"] for c in lossless} == {"allreduce", "pushpull"}
    if servers:
        assert any(c["transport"] == "pushpull" and c["servers"] for c in lossless)
    intras = {c["intra"] for c in lossless}
    assert intras == {"flat"} if wpm == 1 else len(intras) >= 2
    assert {c["compression"] for c in configs} - {"none"} == set(LOSSY_CODECS)
    assert len({c["streams"] for c in lossless}) >= 2
    assert len({c["chunk_bytes"] for c in lossless}) >= 2
    if quick:
        assert len(lossless) <= 6
    assert not any(c["compression"] != "none" for c in sweep(wpm, servers, quick=quick))


def test_the_sweep_takes_the_stream_limit_from_the_runtime() -> None:
    assert Limits().max_streams >= 4
    assert sweep(2, 1) == sweep(2, 1, max_streams=Limits().max_streams)
    capped = sweep(2, 1, max_streams=2)
    assert max(c["streams"] for c in capped) == 2
    assert max(c["streams"] for c in sweep(2, 1)) == 4


#: what DDP's comm hook runs (``CommHookState.limits``: all-reduce, flat, no servers)
HOOK_LIMITS = Limits(servers=0, workers_per_machine=1, max_streams=16,
                     transports=("allreduce",))


def test_the_hook_sweep_is_every_stream_and_chunk_and_only_all_reduce() -> None:
    full = sweep_of(HOOK_LIMITS, lossy=True)
    for cfg in full:
        RuntimeConfig.of(cfg).check(HOOK_LIMITS)
        assert cfg["transport"] == "allreduce" and cfg["intra"] == "flat"
    lossless = [(c["streams"], c["chunk_bytes"]) for c in full if c["compression"] == "none"]
    assert sorted(lossless) == sorted((s, c) for s in STREAMS for c in CHUNKS)
    assert {c["compression"] for c in full} - {"none"} == set(LOSSY_CODECS)
    quick = sweep_of(HOOK_LIMITS, quick=True)
    assert 3 <= len(quick) <= 6 and len({c["streams"] for c in quick}) >= 2
    # the native runtime's sweep is the same function of its own limits
    native = Limits(servers=1, workers_per_machine=2)
    assert sweep_of(native, lossy=True) == sweep(2, 1, native.max_streams, lossy=True)


def test_shapes_hold_the_size_and_spread() -> None:
    specs = shapes(4 << 20, 24, ("float32", "bfloat16"))
    assert len(specs) == 24 and specs == shapes(4 << 20, 24, ("float32", "bfloat16"))
    total = sum(torch.Size(s).numel() * (4 if d == "float32" else 2) for s, d in specs)
    assert 0.9 * (4 << 20) <= total <= 4 << 20
    sizes = sorted(torch.Size(s).numel() for s, _ in specs)
    assert sizes[-1] > 100 * sizes[0]  # biases to large matrices
    assert {len(s) for s, _ in specs} >= {1, 2, 4}
    assert {d for _, d in specs} == {"float32", "bfloat16"}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_lossless_bound_admits_another_order_and_nothing_more(dtype: str) -> None:
    """Sums of 5 workers in two orders differ, within the bound; a relative error of a
    few units of the last place on one element does not fit."""
    g = torch.Generator().manual_seed(3)
    n = 5
    dt = getattr(torch, dtype)
    parts = [(torch.randn(20000, generator=g) * 10 ** (i - 2)).to(dt) for i in range(n)]
    a, b = parts[0].clone(), parts[-1].clone()
    for p in parts[1:]:
        a += p
    for p in reversed(parts[:-1]):
        b += p
    a /= n
    b /= n
    assert not torch.equal(a, b)
    abs_sum = sum(p.double().abs() for p in parts)
    bound = lossless_bound(a.double(), b.double(), abs_sum, n, dtype)
    assert ((a.double() - b.double()).abs() <= bound).all()
    wrong = b.double().clone()
    i = int(abs_sum.argmax())
    wrong[i] += 8 * float(abs_sum[i]) * {"float32": 2 ** -23, "float16": 2 ** -10,
                                         "bfloat16": 2 ** -7}[dtype]
    assert not ((a.double() - wrong).abs() <= lossless_bound(a.double(), wrong, abs_sum, n,
                                                             dtype)).all()


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_the_bound_for_dividing_first(n: int) -> None:
    """DDP divides every gradient by ``n`` before the sum: within ``divided_first``'s
    bound of the sum divided afterwards; nothing is added but the subnormal floor where
    ``n`` is a power of two (the division is exact)."""
    g = torch.Generator().manual_seed(n)
    parts = [torch.randn(50000, generator=g) * 10 ** (i - 2) for i in range(n)]
    parts[-1] = -sum(parts[:-1]) + parts[-1] * 1e-3  # cancellation: |ref| << sum |g_i|
    ref = parts[0].clone()
    for p in parts[1:]:
        ref += p
    ref /= n
    got = parts[-1] / n
    for p in reversed(parts[:-1]):
        got += p / n
    abs_sum = sum(p.double().abs() for p in parts)
    plain = lossless_bound(ref.double(), got.double(), abs_sum, n, "float32")
    first = lossless_bound(ref.double(), got.double(), abs_sum, n, "float32", True)
    assert ((ref.double() - got.double()).abs() <= first).all()
    extra = first - plain
    if n & (n - 1):
        assert (extra >= 2.0 ** -24 * abs_sum / n).all()
    else:
        assert torch.allclose(extra, torch.full_like(extra, n * TINY["float32"]))


def test_codec_bounds() -> None:
    from autotune.runtime.codecs import make_codec

    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(4096, generator=g) for _ in range(2)]
    ref = (xs[0] + xs[1]) / 2
    half = make_codec("fp16", world_size=2)
    got = sum(half.decode(half.encode(x), 4096) for x in xs) / 2
    abs_sum = sum(x.double().abs() for x in xs)
    assert ((got.double() - ref.double()).abs()
            <= half_codec_bound(ref.double(), got.double(), abs_sum, 2, "float32", "fp16")).all()
    assert norm_factor({"compression": "topk", "topk_ratio": 0.25, "transport": "allreduce"}) \
        == pytest.approx(0.75 ** 0.5)
    assert norm_factor({"compression": "onebit", "transport": "pushpull"}) == 3.0
    assert norm_factor({"compression": "randomk", "transport": "pushpull"}) == 1.0
    for name in ("topk", "onebit", "randomk", "powersgd"):
        c = make_codec(name, world_size=2)
        for x in xs:
            y = c.decode(c.encode(x), x.numel())
            assert (x - y).norm() <= norm_factor({"compression": name}) * x.norm() * (1 + 1e-5)


def test_ddp_takes_gloo_where_two_ranks_share_a_gpu() -> None:
    """``--ddp``'s process group (the GPU cases cannot run here: the decision alone, from
    every rank's (on CUDA, device key))."""
    from autotune.selftest.rank_ddp import backend_for

    assert backend_for([(False, 0), (False, 0)], nccl=True) == ("gloo", "CPU tensors")
    assert backend_for([(True, 7), (True, 9)], nccl=True) == ("nccl", "one GPU per rank")
    backend, why = backend_for([(True, 7), (True, 9), (True, 7)], nccl=True)
    assert backend == "gloo" and "ranks 0 and 2 share a GPU" in why and "NCCL" in why
    assert backend_for([(True, 7), (True, 9)], nccl=False)[0] == "gloo"
    with pytest.raises(SelftestError, match=r"ranks \[1\] compute on CUDA"):
        backend_for([(False, 0), (True, 7)], nccl=True)


# ---------------------------------------------------------------------- usage errors
def test_selftest_error_is_an_autotune_error() -> None:
    assert issubclass(SelftestError, AutotuneError) and issubclass(SelftestError, ValueError)
    with pytest.raises(SelftestError, match="--tensors must be >= 1, got 0"):
        shapes(1 << 20, 0)


@pytest.mark.parametrize("args,message", [
    (["--tensors", "0"], "Error: --tensors must be >= 1, got 0"),
    (["--size", "-1"], "Error: --size must be > 0 MiB, got -1.0"),
    (["--dtypes", "float8"], "Error: --dtypes: float8; choose from float32, float16, "
                             "bfloat16"),
])
def test_a_bad_argument_is_one_line_and_exit_2(args: list[str], message: str,
                                               tmp_path: Path) -> None:
    """The command as users run it (a process, not click's test runner): the cause in
    one line on stderr, no traceback, nothing started."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = zygote.run([sys.executable, "-m", "autotune.cli", "selftest", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [message] and proc.stdout == ""
    assert "Traceback" not in proc.stderr


def test_inside_a_job_the_world_options_are_refused(tmp_path: Path) -> None:
    env = dict(os.environ, RANK="0", WORLD_SIZE="1")
    proc = zygote.run([sys.executable, "-m", "autotune.selftest", "--workers", "2"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "Error: --workers/--servers/--machines start a job; inside one (RANK and WORLD_SIZE "
        "are set) the job's own shape is used"]


# ---------------------------------------------------------------------- real jobs
def _run(cmd: list[str], tmp: Path, env: dict[str, str] | None = None,
         timeout: float = 150) -> tuple[int, str]:
    full = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_FAULT"}
    full.update(env or {})
    proc = zygote.run(cmd, cwd=tmp, env=full, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.slow
def test_quick_selftest_under_autotune_launch(tmp_path: Path) -> None:
    out = tmp_path / "selftest.json"
    code, log = _run([sys.executable, "-m", "autotune.launch", "-n", "2", "-k", "1",
                      str(AUTOTUNE), "selftest", *QUICK, "--json-out", str(out)], tmp_path)
    assert code == 0, log[-6000:]
    res = json.loads(out.read_text())
    assert res["passed"] and not res["failed"] and res["device"] == "cpu"
    assert res["world"]["workers"] == [0, 1] and res["world"]["servers"] == [2]
    rows = res["configs"]
    assert len(rows) >= 5
    for r in rows:
        assert r["passed"] and r["status"] == "exact", r  # 2 workers: a + b == b + a
        assert r["max_abs"] == 0.0 and r["bound_ratio"] == 0.0
        assert len(r["times_ms"]) == 2 and all(t > 0 for t in r["times_ms"])
        assert r["median_ms"] > 0 and r["vs_ddp"] > 0
        assert RuntimeConfig.of(r["config"]).as_dict() == r["config"]
    assert any(r["config"]["transport"] == "pushpull" and r["config"]["servers"] >= 1
               for r in rows)
    assert any(r["config"]["intra"] != "flat" for r in rows)
    ddp = res["reference"]["ddp"]
    assert ddp["median_ms"] > 0 and "DistributedDataParallel" in ddp["what"]
    assert res["reference"]["all_reduce"]["median_ms"] > 0
    assert "vs DDP" in log and "all configurations passed" in log


@pytest.mark.slow
def test_injected_faults_are_reported_failed(tmp_path: Path) -> None:
    """``autotune selftest`` outside a job starts one itself. One rule fails every
    push/pull round with a server (recoverable, in wait()), one makes rank 1 unable to
    apply 4 streams (in sync()): those rows are FAILED with the cause, the others pass,
    and the exit code is 1."""
    out = tmp_path / "selftest.json"
    fault = "transport=pushpull,servers=1@fail;streams=4@configure:1"
    code, log = _run([str(AUTOTUNE), "selftest", "--workers", "2", "--servers", "1", *QUICK,
                      "--json-out", str(out)], tmp_path, env={"AUTOTUNE_FAULT": fault})
    assert code == 1, log[-6000:]
    res = json.loads(out.read_text())
    assert not res["passed"]
    failed = [r for r in res["configs"] if r["status"] == "FAILED"]
    passed = [r for r in res["configs"] if r["passed"]]
    assert passed and all(r["status"] == "exact" for r in passed)
    injected = [r for r in failed if "injected fault" in r["error"]]
    assert injected and all(r["config"]["transport"] == "pushpull"
                            and r["config"]["servers"] == 1 for r in injected)
    assert all(r["median_ms"] is None and not r["passed"] for r in failed)
    configure = [r for r in failed if r["config"]["streams"] == 4]
    assert configure and "rank 1" in configure[0]["error"], configure
    assert sorted(res["failed_lossless"]) == sorted(r["label"] for r in failed)
    assert "FAILED" in log and "configuration(s) failed" in log


@pytest.mark.slow
@pytest.mark.parametrize("servers", [0, 1])
def test_ddp_selftest_checks_the_hook_in_real_ddp(tmp_path: Path, servers: int) -> None:
    """``autotune selftest --ddp``: 2 workers, each with two copies of the model under
    real DDP (gloo, CPU), one with autotune's comm hook: every configuration of the hook's
    quick sweep is bit for bit ``all_reduce``'s average (2 ranks), and each has its time
    against plain DDP's on as many iterations, timed alternately (~15 s). With a server
    (``-k 1``) the sweep has push/pull through it and through the workers' own Summation
    Services, on DDP's buckets. ``--json``: the result alone on stdout, the table and the
    job's lines on stderr."""
    proc = zygote.run([str(AUTOTUNE), "selftest", "--ddp", "--workers", "2", "--servers",
                           str(servers), *QUICK, "--json"], cwd=tmp_path, capture_output=True,
                          text=True,
                          timeout=150, env={k: v for k, v in os.environ.items()
                                            if k != "AUTOTUNE_FAULT"})
    code, log = proc.returncode, proc.stderr
    assert code == 0, (proc.stdout + log)[-6000:]
    res = json.loads(proc.stdout)
    assert res["mode"] == "ddp" and res["passed"] and not res["failed"]
    assert res["world"]["workers"] == [0, 1]
    assert res["world"]["servers"] == ([2] if servers else [])
    assert res["device"] == "cpu" and res["ddp_backend"] == "gloo"
    rows = res["configs"]
    pushpull = {r["config"]["servers"] for r in rows if r["config"]["transport"] == "pushpull"}
    assert pushpull == ({0, 1} if servers else {0})  # the workers' own Summation Services
    assert len(rows) >= 3 and len({r["label"] for r in rows}) == len(rows)
    assert len({(r["config"]["streams"], r["config"]["chunk_bytes"]) for r in rows}) >= 3
    for r in rows:
        assert r["passed"] and r["status"] == "exact", r
        assert r["max_abs"] == 0.0 and r["bound_ratio"] == 0.0
        cfg = r["config"]
        limits = replace(HOOK_LIMITS, servers=servers, workers_per_machine=2,
                         transports=TRANSPORTS)  # the runtime's: 2 workers on 1 machine
        assert RuntimeConfig.of(cfg).check(limits).as_dict() == cfg
        assert len(r["times_ms"]) == len(r["ddp_times_ms"]) == 2
        assert all(t > 0 for t in r["times_ms"] + r["ddp_times_ms"])
        assert r["vs_ddp"] == pytest.approx(r["ddp_ms"] / r["median_ms"], rel=1e-3)
    ddp = res["reference"]["ddp"]
    assert ddp["exact"] and "default hook" in ddp["what"]
    assert len(ddp["times_ms"]) == 2 * len(rows)
    assert "DDP ms" in log and "all configurations passed" in log
