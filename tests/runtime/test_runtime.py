"""The runtime averages gradients exactly like all_reduce, under every kind of configuration.

ONE job for the whole module: 4 workers as 2 emulated machines x 2, plus 2 servers, started
with ``autotune launch``. The per-rank script (``tests/runtime_helpers.py sweep``) runs every
case of :func:`runtime_helpers.sweep_cases` and the error cases in that job, and writes what
each worker saw; the tests below check it, one test per case.
"""

from __future__ import annotations

# own world: 4 workers on 2 machines and 2 Summation Service servers

import pytest

import runtime_helpers as rh

WORKERS, SERVERS, MACHINES = 4, 2, 2
CASES = rh.sweep_cases()


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("runtime_sweep")
    code, log = rh.launch_group("sweep", out, WORKERS, SERVERS, MACHINES,
                                extra_env={"AUTOTUNE_FAULT": rh.FAULT_ENV})
    assert code == 0, log[-6000:]
    return rh.load_results(out, WORKERS)


def test_world_info(results: list[dict]) -> None:
    for r, res in enumerate(results):
        info = res["info"]
        assert info["rank"] == r and info["role"] == "worker"
        assert info["workers"] == [0, 1, 2, 3] and info["servers"] == [4, 5]
        assert info["n_machines"] == 2 and info["workers_per_machine"] == 2
        assert info["local_index"] == r % 2
        assert info["machines"][:4] == ["node0", "node0", "node1", "node1"]


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=rh.case_ids(CASES))
def test_average_matches_all_reduce(results: list[dict], index: int) -> None:
    shape_set, cfg = CASES[index]
    for r, res in enumerate(results):
        case = res["cases"][index]
        assert case["config"] == cfg, f"rank {r} ran another config"
        # ratio: worst |ours - all_reduce| / (|ref| + 1), in units of the dtype's tolerance
        assert case["ratio"] <= 1.0, f"rank {r}: {case}"
        assert case["none_ok"], f"rank {r}: a gradient that nobody produced became non-None"
        assert case["ident_ok"], f"rank {r}: an existing .grad tensor was replaced"


def test_coalesced_cases_ran_and_match_all_reduce(results: list[dict]) -> None:
    """The flat lossless all-reduce cases ran coalesced messages where a gradient has
    several whole chunks (fewer messages than chunks), and matched all_reduce; no other
    case was coalesced."""
    from autotune.runtime.data.plan import coalesces

    coalesced = 0
    for r, res in enumerate(results):
        for case in res["cases"]:
            if coalesces(case["config"]):
                coalesced += case["messages"] < case["chunks"]
                assert case["messages"] <= case["chunks"] and case["ratio"] <= 1.0, (r, case)
            else:
                assert case["messages"] == case["chunks"], (r, case["config"])
    assert coalesced >= 2 * len(results), coalesced  # at least two such cases per worker


def test_pushpull_flat_lossless_cases_pushed_from_grad_and_match_all_reduce(
        results: list[dict]) -> None:
    """The lossless flat push/pull cases pushed every gradient that has a chunk of its own
    and a contiguous CPU ``.grad`` straight from ``.grad`` (no pack copy) and matched
    all_reduce; no other case pushed any."""
    from autotune.runtime.data.plan import pushes_from_grad

    lent = 0
    for r, res in enumerate(results):
        for case in res["cases"]:
            if pushes_from_grad(case["config"]):
                lent += case["lent"] > 0
                assert case["lent"] == case["lendable"], (r, case)
                assert case["ratio"] <= 1.0, (r, case)
            else:
                assert case["lent"] == case["lendable"] == 0, (r, case["config"])
    assert lent >= 2 * len(results), lent  # at least two such cases per worker


def test_chunks_leave_during_backward(results: list[dict]) -> None:
    """On the cases that checked it (shape sets where every rank uses every parameter),
    every chunk was averaged before wait() was called."""
    checked = 0
    for r, res in enumerate(results):
        for case in res["cases"]:
            if case["overlap"] is None:
                continue
            done, total = case["overlap"]
            assert total > 0 and done == total, (r, case["config"], case["overlap"])
            checked += 1
    assert checked >= 8


def test_cpu_gradients_are_not_staged(results: list[dict]) -> None:
    """Without AUTOTUNE_STAGE_CPU, CPU gradients are copied into the flat buffers and back
    directly: no copy goes through host staging (tests/runtime/test_native_staging.py
    runs the staged path)."""
    for res in results:
        assert res["staged_copies"] == 0
        assert all(case["staged_copies"] == 0 for case in res["cases"])


def test_ready_order_is_learnt(results: list[dict]) -> None:
    # mixed set: registration index 5 is used by nobody, so its hook never fires; after the
    # first iteration the leader's observed order puts it last on every rank
    for res in results:
        mixed = [c for (s, _), c in zip(CASES, res["cases"]) if s == "mixed"]
        first, later = mixed[0]["order"], mixed[2]["order"]
        assert first == list(reversed(range(len(first))))
        assert sorted(later) == sorted(first) and later[-1] == 5 and later != first
        assert later == results[0]["cases"][2]["order"]


def test_reconfiguring_leaks_no_threads_or_groups(results: list[dict]) -> None:
    for res in results:
        # 80 configurations later: only the stream pool's threads were added, and the pool
        # holds at most one Communication and one Summation job per stream (8 streams max)
        start, end, pool = res["threads"]
        assert pool <= 2 * 8 and end - start == pool, res["threads"]
        # groups: created once per (kind, stream, ...) key, never per configuration
        assert 0 < res["groups"] <= 8 * (1 + 1 + 2 + 2)


def test_bad_configs_and_registrations_raise_everywhere(results: list[dict]) -> None:
    for r, res in enumerate(results):
        err = res["errors"]
        assert err["lossy"].startswith("ConfigError")
        assert ("compression='zstd'" if r == 0 else "leader (rank 0)") in err["lossy"]
        assert err["outside"].startswith("ConfigError")
        assert ("streams=99" if r == 0 else "leader (rank 0)") in err["outside"]
        assert err["configure"].startswith("RuntimeFault") and "rank 2" in err["configure"]
        assert err["mismatch"].startswith("ConfigError") and "rank 1" in err["mismatch"]
        assert "register() takes effect at the next sync()" in err["register_no_sync"]
        assert err["flush_warned"]
        assert res["after_errors"]["ratio"] <= 1.0, "the job did not recover after the errors"
        # a pushed-from .grad changed in place before wait(): named, and the job goes on
        assert err["lent_before_change"] > 0
        assert err["changed_lent"].startswith("UsageError"), err["changed_lent"]
        assert "changed in place between backward() and wait()" in err["changed_lent"]
        assert res["after_changed"]["ratio"] <= 1.0


def test_a_background_sync_does_not_wait_and_averages_exactly(results: list[dict]) -> None:
    """Push/pull through 2 servers: a sync that keeps the configuration in the background
    returns on the leader while the last worker is 1.5 s late (the sync that waits waits
    for it), leaves its message for the next sync, and every average stays exact."""
    for r, res in enumerate(results):
        assert res["errors"]["background_stop"].startswith("UsageError"), res["errors"]
        first, waited, *kept = res["background"]
        for rec in (first, waited, *kept):
            assert rec["config"]["transport"] == "pushpull", f"rank {r}: {rec['config']}"
            assert rec["ratio"] <= 1.0 and rec["none_ok"], f"rank {r}: {rec}"
        assert not waited["pending"] and all(rec["pending"] for rec in kept), f"rank {r}"
    leader = results[0]["background"]
    assert leader[1]["sync_ms"] >= 1000, leader[1]  # waited for the late worker
    assert leader[2]["sync_ms"] < 500, leader[2]    # did not


def test_injected_fault_keeps_gradients_and_a_second_wait_averages(results: list[dict]) -> None:
    for res in results:
        err = res["errors"]
        assert err["injected"].startswith("recoverable=True"), err["injected"]
        assert err["intact"], ".grad changed although wait() failed"
        assert err["retry_ratio"] <= 1.0


def test_worker_max_and_stop(results: list[dict]) -> None:
    for res in results:
        assert res["worker_max"] == 4.5  # rank 3 * 1.5
        assert res["stopped"]
