"""How values are stored in the results store's rows and read back: times as UTC ISO 8601
text, dicts as JSON text, scores' units checked against :data:`autotune.units.UNITS`, a
run's statuses. Shared by the write side (:mod:`autotune.store.writer`) and the read
side (:mod:`autotune.store.reader`, :mod:`autotune.store.nearest`).
"""

from __future__ import annotations

import json
import os
import socket
from datetime import datetime, timezone
from typing import Any

from autotune.store.connection import StoreError
from autotune.units import UNITS

STATUSES = ("running", "finished", "failed", "aborted")
#: what a ``running`` run whose owner process is gone reads as (never stored)
ABANDONED = "abandoned"
SHOWN_STATUSES = STATUSES + (ABANDONED,)
JSON_COLUMNS = {"runs": ("world", "space_facts", "best_config", "kept_from", "tuning_cost",
                         "continues", "ddp"),
                "trials": ("config",)}


def now() -> str:
    """UTC time as ISO 8601 text; all stored times use this format, so they sort."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def check_unit(unit: str, simulated: bool = False) -> str:
    """``unit`` if it is one of :data:`autotune.units.UNITS` (a simulated run's
    ``samples/s``/``it/s`` become ``simulated samples/s``/``simulated it/s``: its scores
    were never measured); StoreError otherwise."""
    if unit not in UNITS:
        raise StoreError(f"unit must be one of {', '.join(repr(u) for u in UNITS)}, got {unit!r}")
    if simulated and not unit.startswith("simulated "):
        unit = f"simulated {unit}"
    return unit


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot store {type(value).__name__} as JSON")


def dumps(value: Any) -> str | None:
    """``value`` as JSON text for a JSON column (keys sorted); None stays NULL."""
    if value is None:
        return None
    return json.dumps(value, sort_keys=True, default=_jsonable)


def decode(table: str, row: dict) -> dict:
    """A ``runs`` or ``trials`` row with its JSON columns decoded, ``simulated`` a
    bool and a run's ``status`` as shown (:func:`shown_status`: ``abandoned`` when its
    owner is gone) (in place; returns ``row``)."""
    for col in JSON_COLUMNS[table]:
        if col in row and isinstance(row[col], str):
            row[col] = json.loads(row[col])
    if "simulated" in row:
        row["simulated"] = bool(row["simulated"])
    if table == "runs" and "status" in row:
        row["status"] = shown_status(row)
    return row


def host() -> str:
    """This machine's name, as recorded in ``runs.owner_host``."""
    return socket.gethostname()


def owner_gone(row: dict) -> bool:
    """Whether a run's owner process is known to be gone: recorded on this host and its
    pid is not alive. An owner on another host (or none recorded) is never judged."""
    pid, where = row.get("owner_pid"), row.get("owner_host")
    if pid is None or where is None or where != host():
        return False
    if int(pid) == os.getpid():
        return False
    from autotune.ranks import pid_alive

    return not pid_alive(int(pid))


def shown_status(row: dict) -> str:
    """A run's status as shown: ``abandoned`` for a ``running`` run whose owner is gone
    (:func:`owner_gone`), else the stored one."""
    status = row.get("status")
    if status == "running" and owner_gone(row):
        return ABANDONED
    return status
