"""``.grad`` as views of the averages (``grad_views``, ``AUTOTUNE_GRAD_VIEWS=1``,
``autotune/runtime/data/copies.py``): no write-back copy, the same averages.

ONE job of 2 workers + 1 server (``autotune launch``) runs the staging job's cases
(``runtime_helpers.staged_cases``: every transport, k and intra mode, several streams and
chunk sizes, three shape sets) with grad views on and no staging: every average must
equal ``torch.distributed.all_reduce``'s bit for bit, and after each round ``.grad`` must
show the runtime's buffers. The gradients are zeroed in place in every third case (the
views are then the next round's gradients: the rotation of buffers must keep the
reduction out of them), and before an injected fault, after which they must be intact
and a second ``wait()`` must give the exact average again.
"""

from __future__ import annotations

# own world: a Summation Service server, and AUTOTUNE_GRAD_VIEWS read at start

import pytest

import runtime_helpers as rh
import zygote

WORKERS, SERVERS, MACHINES = 2, 1, 1
CASES = rh.staged_cases()


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("grad_views")
    code, log = rh.launch_group("views", out, WORKERS, SERVERS, MACHINES,
                                extra_env={"AUTOTUNE_GRAD_VIEWS": "1",
                                           "AUTOTUNE_STAGE_CPU": "0",
                                           "AUTOTUNE_FAULT": rh.FAULT_ENV})
    assert code == 0, log[-6000:]
    return rh.load_results(out, WORKERS)


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=rh.case_ids(CASES))
def test_views_average_is_all_reduce_bit_for_bit(results: list[dict], index: int) -> None:
    shape_set, cfg = CASES[index]
    for r, res in enumerate(results):
        assert not res["copy_cpu"]
        case = res["cases"][index]
        assert case["config"] == cfg, f"rank {r} ran another config"
        assert case["exact"], f"rank {r}: not all_reduce's average bit for bit: {case}"
        assert case["none_ok"], f"rank {r}: {case}"
        # every gradient whose layout allows it is now a view of the averages, not a copy
        # (a channels_last one is copied into: a view would change its strides)
        assert case["viewed"] == case["dense"] > 0, (r, case)
        # ... of the spare buffers: the next round packs and reduces into the others
        assert case["in_working"] == 0, (r, case)
        assert case["staged_copies"] == 0


def test_pushpull_flat_lossless_cases_copied_gradients_neither_way(
        results: list[dict]) -> None:
    """With views, the lossless flat push/pull cases also pushed gradients from ``.grad``
    (no pack copy: :meth:`GradientCopies.lend`), bit for bit all_reduce's average."""
    from autotune.runtime.data.plan import pushes_from_grad

    for r, res in enumerate(results):
        lent = [c["lent"] for c in res["cases"] if pushes_from_grad(c["config"])]
        assert lent and sum(x > 0 for x in lent) >= 2, (r, lent)
        assert all(c["lent"] == 0 for c in res["cases"] if not pushes_from_grad(c["config"]))


def test_views_are_intact_after_a_fault_and_a_second_wait_averages_them(results: list[dict]) -> None:
    for res in results:
        assert res["fault_viewed"] > 0  # the faulty round's gradients were views
        assert res["injected"] == "recoverable=True"
        assert res["intact"] and res["retry_exact"]


def test_views_are_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.runtime.data.copies import GRAD_VIEWS_ENV, grad_views_from_env

    monkeypatch.delenv(GRAD_VIEWS_ENV, raising=False)
    assert not grad_views_from_env()
    monkeypatch.setenv(GRAD_VIEWS_ENV, "1")
    assert grad_views_from_env()
    monkeypatch.setenv(GRAD_VIEWS_ENV, "0")
    assert not grad_views_from_env()


def test_the_cpu_per_gb_benchmark_runs_and_checks_its_averages(tmp_path) -> None:
    """``benchmarks/grad_views_bench.py`` (a smoke run: 4 MiB, 2 iterations per variant):
    both variants measured on every configuration asked for, every average exact."""
    import json
    import subprocess
    import sys

    out = tmp_path / "gv.json"
    proc = zygote.run(
        [sys.executable, "-m", "autotune.launch", "-n", "2", "-k", "1",
         str(rh.ROOT / "benchmarks" / "grad_views_bench.py"), "--mib", "4", "--tensors", "4",
         "--iterations", "2", "--warmup", "1", "--configs",
         "allreduce 64 KiB,pushpull k=1 4 MiB", "--json", str(out)],
        cwd=rh.ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    res = json.loads(out.read_text())
    assert res["exact"] and set(res["rows"]) == {"allreduce 64 KiB", "pushpull k=1 4 MiB"}
    for row in res["rows"].values():
        for variant in ("copies", "views"):
            lo, mid, hi = row[variant]["cpu"]
            assert 0 < lo <= mid <= hi
