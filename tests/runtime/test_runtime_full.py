"""The full correctness sweep (slow): every stream count of 1..5 and 8 with every chunk size,
for every transport / k / intra combination, in one 4-worker + 2-server job."""

from __future__ import annotations

# own world: 4 workers on 2 machines and 2 Summation Service servers

import pytest

import runtime_helpers as rh

import os

# The 512-configuration sweep takes minutes on 2 cores; tests/runtime/test_runtime.py runs a
# representative 64-configuration sweep every time. Run this one with AUTOTUNE_FULL_SWEEP=1.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("AUTOTUNE_FULL_SWEEP") != "1",
                       reason="full 512-config sweep: set AUTOTUNE_FULL_SWEEP=1 to run it"),
]
CASES = rh.sweep_cases(full=True)


def test_full_sweep_matches_all_reduce(tmp_path) -> None:
    code, log = rh.launch_group("sweep", tmp_path, 4, 2, 2, args=("--full",), timeout=1800,
                                extra_env={"AUTOTUNE_FAULT": rh.FAULT_ENV})
    assert code == 0, log[-6000:]
    for r, res in enumerate(rh.load_results(tmp_path, 4)):
        assert len(res["cases"]) == len(CASES)
        for (shape_set, cfg), case in zip(CASES, res["cases"]):
            assert case["config"] == cfg
            assert case["ratio"] <= 1.0 and case["none_ok"] and case["ident_ok"], (r, case)
