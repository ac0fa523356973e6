"""The calibrations table: the tuner's model of a cluster, one row per cluster key."""

from __future__ import annotations

import json

from autotune.sim.calibration import Calibration
from autotune.store import Store
from autotune.store.calibrations import cluster_key

WORLD = {"machines": 2, "workers_per_machine": 4, "servers": 1}


def test_keys_tell_clusters_apart():
    key = cluster_key(WORLD, "cpu", "gloo")
    assert key == cluster_key(dict(WORLD), "cpu", "gloo")  # stable
    others = {cluster_key({**WORLD, "machines": 3}, "cpu", "gloo"),
              cluster_key({**WORLD, "workers_per_machine": 8}, "cpu", "gloo"),
              cluster_key({**WORLD, "servers": 0}, "cpu", "gloo"),
              cluster_key(WORLD, "NVIDIA H100 80GB HBM3", "gloo"),
              cluster_key(WORLD, "cpu", "nccl")}
    assert key not in others and len(others) == 5


def test_a_calibration_is_stored_found_and_updated(tmp_path):
    db = tmp_path / "runs.db"
    key = cluster_key(WORLD, "cpu", "gloo")
    first = Calibration({"latency_us": 300.0}, sources={"latency_us": "measured"})
    with Store(db) as store:
        assert store.calibrations.find(key) is None and store.calibrations.all() == []
        store.calibrations.save(key, world=WORLD, device="cpu", backend="gloo",
                                calibration=first.to_json(), run=1, fit_error=None)
    later = first.updated({"latency_us": 420.0}, source="fitted")
    with Store(db) as store:  # another process, later
        row = store.calibrations.find(key)
        assert Calibration.from_json(row["calibration"]) == first and row["runs"] == 1
        store.calibrations.save(key, world=WORLD, device="cpu", backend="gloo",
                                calibration=later.to_json(), run=2, fit_error=0.12)
        rows = store.calibrations.all()
    assert len(rows) == 1
    row = rows[0]
    assert (row["run"], row["runs"], row["fit_error"]) == (2, 2, 0.12)
    assert json.loads(row["world"]) == WORLD
    assert Calibration.from_json(row["calibration"]).source("latency_us") == "fitted"
