"""The results store: runs and trials in SQLite or PostgreSQL, job similarity, warm start.

``Store`` (:mod:`autotune.store.db`) records runs and trials and answers look-ups,
through :mod:`~autotune.store.connection` (the database), :mod:`~autotune.store.writer`,
:mod:`~autotune.store.reader` and :mod:`~autotune.store.nearest`;
:mod:`autotune.store.fingerprint` turns a model or cluster into a small labelled graph;
:mod:`autotune.store.similarity` measures graph edit distance between jobs;
:mod:`autotune.store.warmstart` maps the nearest runs' best configs into a new space.
The package is the data layer: the ``autotune db`` and ``autotune report`` commands
that read it live in :mod:`autotune.reports`. Names are loaded lazily so the CLI starts
fast.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Store": "autotune.store.db",
    "StoreError": "autotune.store.db",
    "StoreUnreachable": "autotune.store.db",
    "model_graph": "autotune.store.fingerprint",
    "layers_graph": "autotune.store.fingerprint",
    "fingerprint": "autotune.store.fingerprint",
    "job_distance": "autotune.store.similarity",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'autotune.store' has no attribute {name!r}")
