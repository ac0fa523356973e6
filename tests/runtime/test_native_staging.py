"""The native runtime's host staging (CUDA gradients into pinned flat buffers and back,
``autotune/runtime/data/copies.py``), exercised on CPU.

There is no GPU here, so ONE job of 2 workers + 1 server (``autotune launch``, one machine
of workers) runs with ``AUTOTUNE_STAGE_CPU=1``: every gradient goes the way a CUDA one
goes (``HostStaging.to_host`` into the flat buffer, its ``Staged`` handed to the round and
waited for by the stream thread before the chunk leaves, the averages copied back through
``HostStaging.to_device``), only the copies are plain CPU copies and there are no events.
With 2 workers every average must equal ``torch.distributed.all_reduce``'s bit for bit.
The CUDA branches themselves have not run (docs/gpu.md).
"""

from __future__ import annotations

# own world: a Summation Service server, and host staging read at start

import time

import pytest
import torch

import runtime_helpers as rh

WORKERS, SERVERS, MACHINES = 2, 1, 1
CASES = rh.staged_cases()


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("native_staging")
    code, log = rh.launch_group("staged", out, WORKERS, SERVERS, MACHINES,
                                extra_env={"AUTOTUNE_STAGE_CPU": "1",
                                           "AUTOTUNE_FAULT": rh.FAULT_ENV})
    assert code == 0, log[-6000:]
    return rh.load_results(out, WORKERS)


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=rh.case_ids(CASES))
def test_staged_average_is_all_reduce_bit_for_bit(results: list[dict], index: int) -> None:
    shape_set, cfg = CASES[index]
    for r, res in enumerate(results):
        assert res["copy_cpu"], "AUTOTUNE_STAGE_CPU=1 did not switch staging on"
        case = res["cases"][index]
        assert case["config"] == cfg, f"rank {r} ran another config"
        assert case["exact"], f"rank {r}: not all_reduce's average bit for bit: {case}"
        assert case["none_ok"] and case["ident_ok"], f"rank {r}: {case}"
        # every used gradient went to the host and came back through the staging
        assert case["staged_copies"] >= 2 * case["used"], (r, case)
        assert case["lent"] == 0  # staged gradients are never pushed from .grad itself


def test_staged_chunks_still_leave_during_backward(results: list[dict]) -> None:
    checked = 0
    for res in results:
        for case in res["cases"]:
            if case["overlap"] is not None:
                done, total = case["overlap"]
                assert total > 0 and done == total, case
                checked += 1
    assert checked >= 4


def test_staged_second_wait_after_an_injected_fault(results: list[dict]) -> None:
    for res in results:
        assert res["injected"] == "recoverable=True"
        assert res["retry_exact"]


class _NeverDone:
    """A CUDA event stand-in whose copy never completes."""

    def query(self) -> bool:
        return False


def test_a_copy_that_never_completes_fails_naming_rank_and_chunk() -> None:
    from autotune.runtime.data.engine import RoundState
    from autotune.runtime.data.plan import Chunk
    from autotune.runtime.data.staging import Staged
    from autotune.runtime.errors import RuntimeFault

    chunk = Chunk(index=0, stream=0, dtype="float32", offset=0, numel=8, tensors=(0, 1),
                  owner=None)
    it = RoundState([chunk], [(0,), (0,)], streams=1)
    it.mark_ready(0)                                     # a CPU gradient: nothing staged
    it.mark_ready(1, Staged(torch.zeros(4), _NeverDone(), "cuda:0"))
    t0 = time.monotonic()
    with pytest.raises(RuntimeFault, match=r"rank 3, stream 0 chunk 0: the copy of gradient 1"):
        it.wait_copies(chunk, timeout=0.2, rank=3)
    assert time.monotonic() - t0 < 5


def test_cpu_gradients_are_not_staged_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.runtime.data.engine import RoundState
    from autotune.runtime.data.staging import STAGE_CPU_ENV, stage_cpu_from_env

    it = RoundState([], [(), ()], streams=1)
    it.mark_ready(0)
    assert it.copies == {}  # the stream threads' wait returns at once
    monkeypatch.delenv(STAGE_CPU_ENV, raising=False)
    assert not stage_cpu_from_env()
    for value, on in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv(STAGE_CPU_ENV, value)
        assert stage_cpu_from_env() is on
