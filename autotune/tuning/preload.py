"""Import the libraries a search will need in the background, while the job trains.

A Tuner's Gaussian processes (the prior's residual model: scikit-learn; the Bayesian
searcher: scikit-optimize) are imported at their first fit, a few trials in. Imported
there, they cost about 2 s of CPU, and every rank waits for the leader: that time is on
the job's clock (issue 48). :func:`preload` starts those imports in a daemon thread as
soon as the Tuner exists, so that they overlap training (a GPU job's CPU is mostly idle;
a CPU job's leader shares its core with it). A fit that comes first waits for the import
under Python's own import lock, as it would have done the import itself. A module that
fails to import here fails again where it is used, with its error.

:func:`loading` says while the imports run: the trial schedule scores no trial beside
them. An iteration timed while the import takes the leader's CPU is slower than its
configuration makes it; measured on a CPU job, the first trial (the default's) timed at
twice its real step made every later trial look faster than the default. Nothing here
imports torch.
"""

from __future__ import annotations

import importlib
import sys
import threading

__all__ = ["loading", "preload"]

_started: set[str] = set()
_threads: list[threading.Thread] = []
_lock = threading.Lock()


def preload(*modules: str) -> None:
    """Import ``modules`` in one background thread (each at most once per process; none
    already imported)."""
    with _lock:
        todo = [m for m in modules if m not in _started and m not in sys.modules]
        _started.update(todo)
    if todo:
        thread = threading.Thread(target=_import, args=(todo,), name="autotune-preload",
                                  daemon=True)
        with _lock:
            _threads.append(thread)
        thread.start()


def loading() -> bool:
    """Whether a :func:`preload` import is still running (it shares the leader's CPU: an
    iteration timed beside it is slower than the configuration makes it)."""
    with _lock:
        _threads[:] = [t for t in _threads if t.is_alive()]
        return bool(_threads)


def _import(modules: list[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - raised again, with its cause, where it is used
            pass
