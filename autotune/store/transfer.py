"""Runs from one store into another: what a job recorded locally while its shared store
was out of reach goes back to the shared one (``autotune db import``).

A session whose database server is lost mid-run goes on recording in a local SQLite
store (``./autotune.db``), as a new run that ``continues`` the shared one (its store and
id; :class:`autotune.schedule.ledger.Ledger`). :func:`import_runs` copies every run of
the local store that the shared one lacks (the same run is the same creation time, job,
owner host and pid, so importing twice copies nothing new), with its trials and graphs,
and closes the shared run it continues as ``abandoned``, with the cause: the store was
lost, and where the rest of the run went.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["Imported", "import_runs"]

#: what makes two stored runs the same run
IDENTITY = ("created", "job", "owner_host", "owner_pid")


@dataclass(frozen=True)
class Imported:
    """One run of the source: its id there, its id here (None: it was here already), and
    the run here it continues that was closed ``abandoned`` (None if none)."""

    source_id: int
    run_id: int | None
    closed: int | None = None


def import_runs(source: Any, target: Any) -> list[Imported]:
    """Copy every run of ``source`` (a :class:`~autotune.store.Store`) that ``target``
    lacks, oldest first, with its trials and graphs (module docstring)."""
    have = {tuple(r[k] for k in IDENTITY)
            for r in target.connection.read(f"select {', '.join(IDENTITY)} from runs")}
    out = []
    for run in source.connection.read("select * from runs order by id"):
        if tuple(run[k] for k in IDENTITY) in have:
            out.append(Imported(run["id"], None))
            continue
        trials = source.connection.read("select * from trials where run = ? order by id",
                                        [run["id"]])
        fps = [fp for fp in (run["model_fp"], run["topology_fp"]) if fp]
        graphs = [g for fp in fps
                  for g in source.connection.read("select * from graphs where fingerprint = ?",
                                                  [fp])]
        rid = target.import_run(run, trials, graphs)
        out.append(Imported(run["id"], rid, _close_continued(run, rid, source, target)))
    return out


def _close_continued(run: dict, rid: int, source: Any, target: Any) -> int | None:
    """Close the run of ``target`` that ``run`` continues, if it is there and still open,
    as ``abandoned`` with the cause; its id, or None."""
    continues = json.loads(run["continues"]) if run.get("continues") else None
    if not continues or continues.get("store") != target.name:
        return None
    cause = (f"its store was lost mid-run; the run went on in {source.name} from "
             f"{run['created']} and was imported as run {rid}")
    try:
        status = target.close_run(int(continues["run"]), "abandoned", cause=cause)
    except Exception:  # noqa: BLE001 - that run is gone (pruned): nothing to close
        return None
    return int(continues["run"]) if status == "abandoned" else None
