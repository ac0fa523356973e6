"""autotune: auto-tuned gradient communication for data-parallel PyTorch.

The public API::

    with autotune.session(model, budget=100) as session:   # tune while training
        ...
    autotune.Tuner(space, budget=100)                     # the tuner alone (ask/tell)
    autotune.SearchSpace.build(k_max=2)                   # the tunable parameters

Names are loaded lazily, so ``import autotune`` (and the CLI) does not import torch.
:func:`session` is a function defined here, so no import of a subpackage can shadow it
(the training-loop glue lives in :mod:`autotune.sessions`).
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

__version__ = "0.1.0"

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time, loaded on first use
    import torch

    from autotune.errors import ArgumentError, AutotuneError
    from autotune.runtime.config import ConfigError
    from autotune.runtime.errors import UsageError
    from autotune.schedule.schedule import TrialSchedule
    from autotune.sessions import DDPSession, Session, TuningSession
    from autotune.sessions.ddp import workers_group
    from autotune.tuning.space import Config, SearchSpace
    from autotune.tuning.trial import Trial
    from autotune.tuning.tuner import Tuner

_EXPORTS = {
    "TuningSession": "autotune.sessions",
    "Session": "autotune.sessions",
    "DDPSession": "autotune.sessions",
    "Tuner": "autotune.tuning.tuner",
    "Trial": "autotune.tuning.trial",
    "SearchSpace": "autotune.tuning.space",
    "Config": "autotune.tuning.space",
    "ConfigError": "autotune.runtime.config",
    "AutotuneError": "autotune.errors",
    "ArgumentError": "autotune.errors",
    "UsageError": "autotune.runtime.errors",
    "TrialSchedule": "autotune.schedule.schedule",
    "workers_group": "autotune.sessions.ddp",
}

__all__ = sorted([*_EXPORTS, "session", "__version__"])



def _options_checked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` whose unknown keyword arguments are an :class:`~autotune.errors.UnknownOption`
    (a ``TypeError``) with "did you mean" (``total_step=`` names ``total_steps``), not
    Python's bare ``TypeError``; its signature and docstring stay ``fn``'s. Nothing of
    autotune is imported until a call needs it (``import autotune`` stays light)."""
    known = [n for n, p in inspect.signature(fn).parameters.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for name in kwargs:
            if name not in known:
                from autotune.errors import UnknownOption, did_you_mean

                raise UnknownOption(f"autotune.{fn.__name__}() has no option {name!r}"
                                    f"{did_you_mean(name, known)}")
        return fn(*args, **kwargs)

    return checked


@_options_checked
def session(
    model: torch.nn.Module,
    *,
    budget: int = 100,
    total_steps: int | None = None,
    spend: float | None = 0.05,
    db: str | os.PathLike[str] | None = None,
    allow_lossy: bool = False,
    lossy_score: str = "goodput",
    samples_per_step: int | None = None,
    techniques: Sequence[str] = ("grid", "pbt", "bayes", "hyperband"),
    seed: int = 0,
    verbose: bool = True,
    retune_on_drift: float | None = None,
    drift_window: int = 50,
    timeout: float = 300.0,
    trial_iterations: int | None = None,
    warmup: int = 3,
    cut_short: float | None = 0.5,
    job: str | None = None,
    store: bool = True,
    broadcast_buffers: bool = True,
    prior: bool = True,
    fixed: Mapping[str, Any] | None = None,
) -> Session:
    """Tune the gradient communication of ``model`` while it trains.

    Use the result as a context manager around the training loop and call its ``step()``
    after each iteration's backward::

        with autotune.session(model, budget=100) as session:
            for x, y in loader:
                loss_fn(model(x), y).backward()
                session.step()             # .grad now holds the gradient averaged over workers
                optimizer.step(); optimizer.zero_grad()
        print(session.best)

    ``model`` is an ``nn.Module`` (autotune applies DDP to it in place: the module stays
    yours, DDP's semantics are DDP's) or a ``DistributedDataParallel`` model (kept as it
    is); either way DDP averages the gradients through autotune's comm hook, under the
    configuration being tried (a :class:`~autotune.sessions.session.Session`). Every
    argument is checked here: a bad one is an :class:`ArgumentError` naming it.

    Args:
        budget: training iterations spent on trials (0: no tuning; the best stored
            configuration of a similar job, whose run the output and the store name,
            or the default). The most: a job spends only what it can pay back
            (``total_steps``; docs/tuner.md, "What tuning may cost").
        total_steps: the job's length in training iterations (optimizer steps), so that
            the search is sized to it: none where nothing can be won, a short one for a
            short job, codecs kept out of its first 15%. The framework callbacks fill
            it in; None: unknown (the trials may lose ``spend`` of the time the job has
            run so far, and the search pauses between trials until it has run longer).
        spend: the most of the job's time the trials may lose against the default, a
            fraction in (0, 1); None: no limit (the search is the job, as in
            ``autotune tune``).
        db: the results store (default ``./autotune.db``, or ``$AUTOTUNE_DB``).
        allow_lossy: let compression codecs into the space.
        lossy_score: with ``allow_lossy``, how trials are scored: ``"goodput"``
            (throughput x the statistical efficiency measured online, so a codec that
            slows learning more than it speeds steps loses; docs/compression.md) or
            ``"throughput"`` (samples/s alone).
        samples_per_step: the per-worker batch size; the score is then samples/s (else it/s).
        techniques: the Tuner's searchers, from ``grid``, ``pbt``, ``bayes``,
            ``hyperband``, ``random``, ``tpe``, ``optuna-gp`` and ``prior``.
        seed: the Tuner's random seed.
        verbose: rank 0 shows the progress and the final table.
        retune_on_drift: re-tune when the communication time (median over
            ``drift_window`` iterations) moves by more than this fraction of an iteration
            (docs/tuner.md, "Drift"); None: never.
        drift_window: iterations in the drift median.
        timeout: seconds any wait may take (> 0); an expired wait names the rank.
        trial_iterations: iterations per trial (default: the schedule's).
        warmup: iterations before the first trial.
        cut_short: a trial whose first scored iteration is below this fraction of the best
            so far ends early; None: never.
        job: the run's name in the store.
        store: False to record nothing.
        broadcast_buffers: as DDP's (for a plain module; a DDP model has its own).
        prior: let the physics prior screen and propose configurations.
        fixed: knobs to pin, ``{"chunk_bytes": 4 << 20}``, or to narrow,
            ``{"streams": [1, 2, 4]}``; one the runtime cannot run is a
            :class:`ConfigError` at the start.
    """
    import time

    called = time.perf_counter()  # the session's start counts its import (start_s)
    from autotune.options import SessionOptions
    from autotune.sessions import open_session

    options = SessionOptions(
        budget=budget, total_steps=total_steps, spend=spend, db=db, allow_lossy=allow_lossy,
        lossy_score=lossy_score,
        samples_per_step=samples_per_step,
        techniques=techniques, seed=seed, verbose=verbose, retune_on_drift=retune_on_drift,
        drift_window=drift_window, timeout=timeout, trial_iterations=trial_iterations,
        warmup=warmup, cut_short=cut_short, job=job, store=store,
        broadcast_buffers=broadcast_buffers, prior=prior, fixed=fixed or {})
    made = open_session(model, options)
    made._made_s = time.perf_counter() - called
    return made


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
