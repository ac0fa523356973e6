"""The tuner's model remembered per cluster: a session measures its machines, fits the
simulator's constants to its trials and stores them; the next job on alike machines
starts from them (real processes: two jobs, one after another, in the shared world of 2
workers on 2 emulated machines; one store)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import zygote

pytestmark = pytest.mark.slow


def _job(world, db) -> dict:
    leader, other = world(2, machines=2).run("calibration_worker:job", db=str(db), timeout=300)
    assert leader is not None and other is None
    return leader


def test_a_second_job_on_alike_machines_starts_calibrated(world, tmp_path):
    from autotune.store import Store

    db = tmp_path / "runs.db"
    first = _job(world, db)
    # the first job knew nothing stored: it timed the link and this machine, then fitted
    started = first["started"]["sources"]
    assert "stored" not in started.values()
    assert started["latency_us"] == "measured" and started["cpu_sum_gbps"] == "measured"
    assert first["link"]["link_gbps"] > 0 and first["fits"] >= 1
    assert "fitted" in first["ended"]["sources"].values()
    with Store(db) as store:
        rows = store.calibrations.all()
    assert len(rows) == 1 and rows[0]["runs"] == 1
    stored = json.loads(rows[0]["calibration"])
    assert "compute_s" not in stored["constants"]  # the job's own, not the machines'

    second = _job(world, db)
    s = second["started"]
    # it starts from what the first one ended with: the fitted constants, as stored
    # (the link is timed again: links change; this machine is not: it is stored)
    fitted = [k for k, v in first["ended"]["sources"].items() if v == "fitted" and k != "compute_s"
              and k not in ("latency_us", "nic_gbps", "per_flow_gbps")]
    assert fitted
    for k in fitted:
        assert s["sources"][k] == "stored"
        assert s["constants"][k] == pytest.approx(first["ended"]["constants"][k])
    assert s["sources"]["latency_us"] == "measured"
    with Store(db) as store:
        rows = store.calibrations.all()
    assert len(rows) == 1 and rows[0]["runs"] == 2

    shown = zygote.run([sys.executable, "-m", "autotune.cli", "db", "calibrations",
                            "--db", str(db)], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "2 run(s)" in shown.stdout and "stored" in shown.stdout
