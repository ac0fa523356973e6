"""How values are stored in the results store's rows and read back: times as UTC ISO 8601
text, dicts as JSON text, scores' units checked against :data:`autotune.units.UNITS`, a
run's statuses. Shared by the write side (:mod:`autotune.store.writer`) and the read
side (:mod:`autotune.store.reader`, :mod:`autotune.store.nearest`).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from autotune.store.connection import StoreError
from autotune.units import UNITS

STATUSES = ("running", "finished", "failed", "aborted")
JSON_COLUMNS = {"runs": ("world", "space_facts", "best_config"), "trials": ("config",)}


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
    """A ``runs`` or ``trials`` row with its JSON columns decoded and ``simulated`` a
    bool (in place; returns ``row``)."""
    for col in JSON_COLUMNS[table]:
        if col in row and isinstance(row[col], str):
            row[col] = json.loads(row[col])
    if "simulated" in row:
        row["simulated"] = bool(row["simulated"])
    return row
