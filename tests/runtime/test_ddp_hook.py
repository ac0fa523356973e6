"""autotune inside DDP: :class:`~autotune.runtime.ddp.ddp_hook.CommHookState` as DDP's comm
hook, against plain DDP in the same processes (tests/ddp_hook_worker.py), and the CPU
side of :class:`~autotune.runtime.data.staging.HostStaging`.

The hook hands every bucket to the native runtime, which takes DDP's gradients as they
are ready. In the shared worlds
(tests/worlds.py, gloo, CPU): 2 ranks run every case (parity with plain DDP, the same with
copying host staging, top-k with the runtime's error feedback across switches, the
transport's conservation of gradients, misuse); 3 ranks run parity only.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from runtime_helpers import ROOT
import zygote


# ---------------------------------------------------------------------- processes
@pytest.fixture(scope="module")
def two(world) -> list[dict]:
    return world(2).run("ddp_hook_worker:cases", mode="all")


@pytest.fixture(scope="module")
def three(world) -> list[dict]:
    return world(3).run("ddp_hook_worker:cases", mode="parity")


def _states(run: dict) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, plain DDP's value, the hook's value) of every parameter and buffer, float32
    as they were (JSON carries them as exact doubles)."""
    out = []
    for k, v in run["ddp"].items():
        dtype = torch.int64 if k.endswith("num_batches_tracked") else torch.float32
        out.append((k, torch.tensor(v, dtype=torch.float64).to(dtype),
                    torch.tensor(run["hook"][k], dtype=torch.float64).to(dtype)))
    return out


def _check_run(run: dict) -> None:
    assert run["configs"] >= 8, "the hook should have switched configurations every step"
    buckets = len(run["buckets"])
    assert buckets >= 2 and max(run["buckets"].values()) > 64 * 1024 // 4
    assert set(run["rounds"].values()) == {12}, "one hook call per bucket per synced step"
    # a sync before every step: the runtime averaged every bucket, DDP's all-reduce none
    assert run["averaged_again"] == 0 and run["handed"] == 12 * buckets, run


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["parity", "staged", "views"])
def test_two_ranks_bit_identical_to_ddp(two, phase):
    """Lossless configurations switched every step (streams 1..4, chunks 4 KiB..4 MiB),
    no_sync accumulation, an unused parameter, BatchNorm: every parameter and buffer
    equals plain DDP's bit for bit on every rank; also when chunks go through host
    staging buffers and are copied back (what CUDA buckets under gloo do), and with
    ``gradient_as_bucket_view`` (both models)."""
    for rank in two:
        run = rank[phase]
        _check_run(run)
        for name, ddp, hook in _states(run):
            assert torch.equal(ddp, hook), f"{phase} {name}: {(ddp - hook).abs().max()}"


@pytest.mark.slow
def test_three_ranks_equal_to_ddp_to_rounding(three):
    for rank in three:
        run = rank["parity"]
        _check_run(run)
        for name, ddp, hook in _states(run):
            torch.testing.assert_close(hook, ddp, rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"{name}: {m}")
    a, b, c = (r["parity"]["hook"] for r in three)
    assert a["a.weight"] == b["a.weight"] == c["a.weight"]  # ranks agree bit for bit


@pytest.mark.slow
def test_topk_keeps_its_residual_across_switches_and_trains(two):
    """The runtime's error feedback under DDP: held back by top-k, kept by a switch of
    ratio, folded back by the first lossless step."""
    for rank in two:
        r = rank["lossy"]
        assert r["before"] > 0, "top-k 1% must hold back a residual"
        assert r["after_switch"] == r["before"], "a switch to top-k 10% keeps the residual"
        assert 0 < r["after_one"], "the next top-k 10% step still holds some back"
        assert r["before_none"] > 0
        assert r["after_none"] == 0, "a lossless step folds every residual back"
        losses = r["losses"]
        assert sum(losses[-5:]) < 0.6 * sum(losses[:5]), losses
        assert r["handed"] >= 28, "the runtime averaged the buckets after DDP's rebuild"


@pytest.mark.slow
def test_leaving_a_codec_adds_at_most_one_gradient_of_residual(two):
    """One parameter under DDP: top-k at two ratios and chunk sizes (small chunks below
    compress_min_bytes), then none (issue 62: leaving a codec flushed its whole residual
    into one step). The first lossless step adds some residual, at most each rank's own
    gradient's norm of it, and clears it; the next one is plain all-reduce."""
    for rank in two:
        c = rank["conservation"]
        assert all(n > 0 for n in c["norms"][:6]), c["norms"]
        assert c["norms"][6:] == [0.0, 0.0], c["norms"]
        assert 0 < c["added"] <= c["bound"] * (1 + 1e-4), c
        assert c["plain_err"] < 1e-5 * c["scale"], c


@pytest.mark.slow
def test_misuse_is_a_clear_error(two):
    for r, rank in enumerate(two):
        m = rank["misuse"]
        assert m["not_ddp"].startswith("TypeError") and "Net" in m["not_ddp"]
        for case in ("second_hook", "twice"):
            assert m[case].startswith("UsageError") and "already registered" in m[case]
        assert "remove yours" in m["second_hook"]
        # autotune's own hook, its session still open: one at a time (issue 61: once the
        # first is closed, a second session binds the same hook again)
        assert "still open" in m["twice"] and "remove yours" not in m["twice"], m["twice"]
        for case, says in (("streams", "streams=5"), ("servers", "servers=1")):
            # the leader names the parameter, the others the leader
            assert m[case].startswith("ConfigError: autotune inside DDP"), m[case]
            assert (says if r == 0 else "the leader (rank 0)") in m[case], m[case]
        assert m["config_kept"]["streams"] == 1  # the refused configurations changed nothing
        assert m["limits"] == {"servers": 0, "max_streams": 4}
        # the default configuration is DDP's own built-in all-reduce: the hook was never
        # registered (the refused configurations did not register it either)
        assert m["averaged_again"] == 0 and m["hooked"] is False, m


# ---------------------------------------------------------------------- in process
def test_install_needs_a_ddp_model():
    from autotune.runtime.ddp.ddp_hook import CommHookState

    with pytest.raises(TypeError, match="torch.nn.modules.linear.Linear"):
        CommHookState.install(torch.nn.Linear(2, 2))


def test_transport_needs_torch_distributed():
    import torch.distributed as dist

    from autotune.runtime import UsageError
    from autotune.runtime.ddp.ddp_hook import CommHookState

    if dist.is_initialized():
        pytest.skip("a process group exists in this process")
    with pytest.raises(UsageError, match="init_process_group"):
        CommHookState(None)


def test_the_hook_imports_nothing_from_tuning_or_session():
    code = ("import sys, autotune.runtime.ddp.ddp_hook, autotune.runtime.data.staging; "
            "print(sorted(m for m in sys.modules if m.startswith(('autotune.tuning', "
            "'autotune.sessions', 'autotune.search'))))")
    out = zygote.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_cpu_staging_copies_nothing_by_default():
    from autotune.runtime.data.staging import HostStaging

    st = HostStaging("cpu")
    x = torch.arange(6.0)
    staged = st.to_host(x)
    assert staged.tensor is x and staged.event is None and not st.copies
    assert staged.wait(1.0) is x and staged.order() is x
    back = st.to_device(x, x)
    assert back.tensor is x
    out = torch.empty(6)
    assert st.to_host(x, out).wait(1.0) is out and torch.equal(out, x)
    fut = st.future()
    with st.side():
        fut.set_result(x)
    assert fut.wait() is x


def test_cpu_staging_with_copies_round_trips():
    from autotune.runtime.data.staging import HostStaging

    st = HostStaging("cpu", copy_cpu=True)
    x = torch.arange(8.0).narrow(0, 2, 4)
    staged = st.to_host(x)
    host = staged.wait(1.0)
    assert host.data_ptr() != x.data_ptr() and torch.equal(host, x) and st.copies
    host.mul_(2)
    dst = torch.zeros(4)
    assert st.to_device(host, dst).order() is dst
    assert torch.equal(dst, torch.tensor([4.0, 6.0, 8.0, 10.0]))
    assert torch.equal(x, torch.tensor([2.0, 3.0, 4.0, 5.0]))  # the source is untouched
    assert st.empty(3, torch.float16).dtype == torch.float16


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (not on this machine)")
def test_cuda_staging_round_trip_is_ordered():
    """The copy to the host follows the producer's queued work; the copy back is waited
    for by the current stream; a future completed on the side stream is CUDA-aware."""
    from autotune.runtime.data.staging import HostStaging

    st = HostStaging("cuda")
    x = torch.randn(1 << 22, device="cuda")
    y = x * 2 + 1                               # queued on the current stream
    staged = st.to_host(y)
    host = staged.wait(30.0)
    assert host.is_pinned() and torch.equal(host, y.cpu())
    host.add_(1)
    assert st.to_device(host, y).order() is y
    assert torch.equal(y.cpu(), host)
    fut = st.future()
    with st.side():
        fut.set_result(y)
    assert fut.wait() is y
    with pytest.raises(ValueError, match="serves"):
        HostStaging("cpu", copy_cpu=True)._side_for(y)
