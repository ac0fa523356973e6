"""Re-tuning on drift (``retune_on_drift``) on the emulated cluster: the link changes
under a running job (``tc`` on the hosts, :meth:`autotune.emulate.Cluster.reshape`),
slower or faster, and the session re-tunes; the compute step gets longer and it does
not (a re-tune cannot help). The drift rule itself: tests/schedule/test_schedule.py.
Times to notice and to recover: benchmarks/clock_bench.py retune."""

from __future__ import annotations

# own world: the emulated link is changed under a running job

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import retune_worker  # noqa: E402

# serial: drift is read from step times, which other work beside them would move
pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.serial]


def retuned(res: dict) -> list[int]:
    """The iterations, after the change, at which drift started a re-tune."""
    return [i for i in res["retunes"] if i > res["changed_at"]]


RAISED_TOO = os.environ.get("AUTOTUNE_LONG_TESTS") == "1"  # ~35 s more; the faster
# direction is also tested on the schedule (tests/tuning) and measured by clock_bench.py retune


@pytest.mark.parametrize("before,after", [
    ("40mbit", "10mbit"),
    pytest.param("10mbit", "40mbit", marks=pytest.mark.skipif(
        not RAISED_TOO, reason="the raised link on the cluster: set AUTOTUNE_LONG_TESTS=1")),
], ids=["rate cut", "rate raised"])
def test_a_link_change_mid_run_starts_a_retune(before, after, tmp_path):
    from autotune.emulate import Cluster

    with Cluster(hosts=2, rate=before) as c:
        res = retune_worker.run_job(c, tmp_path, lambda: c.reshape(after), end_early=True)
    assert res["retunes"] and res["retunes"] == retuned(res), res["retunes"]
    # a second tuning phase: trials again after the first lock
    phases = [p for _, _, p in res["rows"]]
    first_lock = phases.index("locked")
    assert "trial" in phases[first_lock:], phases


def test_a_longer_compute_step_starts_no_retune(tmp_path):
    from autotune.emulate import Cluster

    with Cluster(hosts=2, rate="40mbit") as c:
        res = retune_worker.run_job(c, tmp_path, lambda: None, slower_compute_s=0.3,
                                     end_early=True)
    secs = [s for _, s, _ in res["rows"]]
    at = res["changed_at"]
    assert at is not None and len(secs) - at >= 3 * retune_worker.SPEC["window"]
    # the iterations did get much slower (the slowdown is real) ...
    assert min(secs[at + 1:]) > 0.25 + min(secs[:at])
    # ... but the communication did not change: no re-tune
    assert res["retunes"] == [], res["retunes"]
