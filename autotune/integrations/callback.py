"""What the framework callbacks share: one autotune session of the framework's DDP module.

A framework wraps the model in ``DistributedDataParallel`` itself and runs the training
loop; a callback only sees its hooks. :class:`CallbackSession` turns three of them into
the public session API: :meth:`~CallbackSession.start` opens ``autotune.session(ddp,
**options)`` (after the framework has wrapped the model, before the first backward: DDP
takes a comm hook only then), :meth:`~CallbackSession.step` calls ``session.step()`` once per
training step (a gradient-accumulation micro-step, whose backward ran inside DDP's
``no_sync()``, returns at once and is not counted), and :meth:`~CallbackSession.finish`
closes the run exactly once: ``finished``, or with the exception that ended training
(``aborted`` for KeyboardInterrupt and SIGTERM, ``failed`` otherwise).

Framework-free: the framework modules (:mod:`autotune.integrations.lightning`,
:mod:`autotune.integrations.transformers`) say where their DDP module is.
"""

from __future__ import annotations

import inspect
import math
import warnings
import weakref
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import autotune
from autotune.errors import did_you_mean, shown_by_rank_0
from autotune.options import SessionOptions
from autotune.runtime.errors import UsageError
from autotune.sessions.session import Session
from autotune.sessions.world import launcher_hint
from autotune.tuning.space import Config
from autotune.tuning.trial import Trial

__all__ = ["CallbackResults", "CallbackSession", "check_options"]

#: DDP modules a session has tuned: DDP keeps one comm hook for its life, so a module is
#: tuned once (a framework that trains the same DDP module again gets a clear error).
_TUNED: "weakref.WeakSet[DDP]" = weakref.WeakSet()


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options``, keywords of :func:`autotune.session`, checked now (when the callback is
    made, before any training): an unknown name is a ``TypeError`` listing the known ones,
    a bad value an :class:`~autotune.errors.ArgumentError` naming it."""
    known = [name for name in inspect.signature(autotune.session).parameters if name != "model"]
    unknown = sorted(set(options) - set(known))
    if unknown:
        hint = did_you_mean(unknown[0], known)
        raise shown_by_rank_0(TypeError(
            f"unknown autotune.session option(s) {', '.join(map(repr, unknown))}{hint}; "
            f"the options are: {', '.join(known)}"))
    values = {k: v for k, v in options.items() if not (k == "fixed" and v is None)}
    SessionOptions(**values)
    return dict(options)


def known_steps(steps: Any) -> int | None:
    """A framework's count of training steps, as ``total_steps``: a positive whole number
    (``inf``, ``-1`` or anything else: unknown, None)."""
    try:
        value = float(steps)
    except (TypeError, ValueError):
        return None
    return int(value) if math.isfinite(value) and value >= 1 else None


class CallbackSession:
    """One framework run's autotune session, driven from the framework's hooks (module
    docstring). ``framework`` names the framework in messages; ``options`` are
    :func:`autotune.session`'s keywords."""

    def __init__(self, framework: str, options: dict[str, Any]) -> None:
        self.framework = framework
        self.options = check_options(options)
        #: the session (open, or the last one, closed); None before training started or
        #: where there is nothing to tune (:attr:`inactive`)
        self.session: Session | None = None
        #: why no session was opened (one process, no process group), or None
        self.inactive: str | None = None
        self._open = False

    @property
    def is_open(self) -> bool:
        return self._open

    def start(self, model: torch.nn.Module | None, where: str,
              total_steps: Any = None) -> None:
        """Open the session of ``model``, the framework's outermost module (``where``: the
        attribute it was read from, for the messages); ``total_steps``: the training's
        optimizer steps as the framework knows them (the session's ``total_steps`` unless
        the user gave one; not a positive whole number: unknown). Without a process group, or with
        one process and no DDP, there is nothing to tune: a warning, and training goes on
        untouched. A distributed model that is not DDP (FSDP, DeepSpeed) is a
        ``TypeError``."""
        if self._open:
            raise UsageError(f"{self.framework}: training started again while autotune's "
                             "session of the last start is still open")
        distributed = dist.is_available() and dist.is_initialized()
        if not isinstance(model, DDP):
            if not distributed or dist.get_world_size() == 1:
                self.inactive = (f"{where} is not DistributedDataParallel and this is one "
                                 "process: no gradient crosses the wire, nothing to tune"
                                 + launcher_hint())
                warnings.warn(f"autotune ({self.framework}): {self.inactive}; training "
                              "goes on untuned", RuntimeWarning, stacklevel=2)
                return
            raise TypeError(
                f"autotune ({self.framework}): {where} is a {type(model).__name__}, not "
                "DistributedDataParallel: autotune tunes DDP's communication through its "
                "comm hook, so train with DDP (docs/integrations.md)")
        if model in _TUNED:
            raise UsageError(
                f"autotune ({self.framework}): this DDP module ({where}) was tuned by an "
                "earlier session and DDP keeps one comm hook for its life: tune one "
                "training run per DDP module (a new Trainer, or a new DDP wrap, for another)")
        self.inactive = None
        options = dict(self.options)
        if options.get("total_steps") is None:
            options["total_steps"] = known_steps(total_steps)
        session = autotune.session(model, **options)
        session.__enter__()  # registers the comm hook: before the first backward
        _TUNED.add(model)
        self.session, self._open = session, True

    def step(self, loss: Any = None) -> None:
        """``session.step(loss)`` after a training step (nothing where no session is open)."""
        if self._open and self.session is not None:
            self.session.step(loss)

    def finish(self, exc: BaseException | None) -> None:
        """Close the run, once: ``finished`` (``exc`` None), else with ``exc``. A failure
        while closing after an exception (the session names a failed peer rank) is a
        warning: the exception that ended training is the one that goes on."""
        if not self._open or self.session is None:
            return
        self._open = False
        if exc is None:
            self.session.__exit__(None, None, None)
            return
        try:
            self.session.__exit__(type(exc), exc, exc.__traceback__)
        except Exception as closing:  # noqa: BLE001 - the training's exception goes on
            warnings.warn(f"autotune ({self.framework}): closing the run after "
                          f"{type(exc).__name__}: {closing}", RuntimeWarning, stacklevel=2)

    # ------------------------------------------------------------------ results
    @property
    def best(self) -> Config | None:
        """The configuration the session settled on (None before it started)."""
        return self.session.best if self.session is not None else None

    @property
    def history(self) -> list[Trial]:
        """Every trial (on the leader; empty elsewhere)."""
        return self.session.history if self.session is not None else []

    @property
    def is_leader(self) -> bool:
        """Whether this rank leads the session (tunes, records, shows)."""
        return self.session.is_leader if self.session is not None else False


class CallbackResults:
    """The results of a framework callback's session, as a session shows them
    (:class:`autotune.leader.results.SessionResults`, whose name it no longer shares):
    mixed into each framework's callback, whose :class:`CallbackSession` is
    ``self.autotune``."""

    autotune: CallbackSession

    @property
    def session(self) -> Session | None:
        """The session (the last one, once closed); None before training started."""
        return self.autotune.session

    @property
    def best(self) -> Config | None:
        return self.autotune.best

    @property
    def history(self) -> list[Trial]:
        return self.autotune.history

    @property
    def is_leader(self) -> bool:
        return self.autotune.is_leader
