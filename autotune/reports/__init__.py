"""The commands that read the results store, and their display helpers.

``autotune db ...`` (:mod:`autotune.reports.db_command`: runs, show, trials, best, similar,
export, prune, close, calibrations) and ``autotune report`` (:mod:`autotune.reports.report`:
the terminal summary, the PNG figure, the HTML page) live here, with what they share
(:mod:`autotune.reports.common`: opening the store for a command, its errors as click's,
JSON output, a run's fields) and the tables fitted to the terminal
(:mod:`autotune.reports.tables`).

:mod:`autotune.store` stays the data layer: it imports no click and nothing from this
package (``tests/store/test_store_imports.py`` checks it); this package reads the store
through :class:`autotune.store.db.Store` and the store's pure helpers
(:mod:`autotune.store.summary`, :mod:`autotune.store.origin`,
:mod:`autotune.store.optuna_export`). Nothing is imported here, so ``autotune --help``
stays fast.
"""
