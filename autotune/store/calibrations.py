"""The tuner's model of a cluster, remembered: one calibration per cluster key.

A job's session fits the simulator's constants to its machines (measured at its start,
fitted to its trials: :mod:`autotune.sim.calibration`). At the end the leader saves them
here under its cluster's key (:func:`cluster_key`); the next job whose key is the same
starts its prior from them instead of from the simulator's defaults, and measures and
fits from there. "Alike" is the same rule as a warm start's machine class, made exact:
the same worker machines, workers per machine, servers, device and backend. Link rates
and codec speeds are properties of the machines, not of the model, so a calibration is
shared by every model that runs there.

``autotune db calibrations`` lists them.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any, Mapping

import sqlalchemy as sa

from autotune.store.connection import Connection
from autotune.store.sqltext import upsert


def cluster_key(world: Mapping[str, Any], device: str, backend: str) -> str:
    """The key alike clusters share: a hash of the world's shape (``machines``,
    ``workers_per_machine``, ``servers``), the ``device`` (``"cpu"`` or the GPU's name)
    and the ``backend``."""
    shape = {k: int(world.get(k, 0)) for k in ("machines", "workers_per_machine", "servers")}
    text = json.dumps({**shape, "device": device, "backend": backend}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Calibrations:
    """Reads and writes the ``calibrations`` table of one store."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def find(self, key: str) -> dict | None:
        """The stored row of ``key`` (``calibration`` as JSON text), or None."""
        rows = self._connection.read("select * from calibrations where key = ?", [key])
        return rows[0] if rows else None

    def all(self) -> list[dict]:
        """Every stored calibration, the most recently updated first."""
        return self._connection.read("select * from calibrations order by updated desc")

    def save(self, key: str, *, world: Mapping[str, Any], device: str, backend: str,
             calibration: str, run: int | None, fit_error: float | None) -> None:
        """Store ``calibration`` (JSON text) as the model of cluster ``key``, written by
        ``run``; the count of runs that wrote it goes up by one."""
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")

        table = self._connection.tables["calibrations"]
        row = {"key": key, "world": json.dumps(dict(world), sort_keys=True), "device": device,
               "backend": backend, "calibration": calibration, "run": run, "updated": now,
               "runs": 1, "fit_error": fit_error}
        changed = {k: v for k, v in row.items() if k not in ("key", "runs")}

        def write(c: sa.Connection) -> None:
            upsert(c, table, "key", row, {**changed, "runs": table.c.runs + 1})
        self._connection.write(write)
