"""The training-loop glue behind :func:`autotune.session`: tune the gradient communication
of a model while it trains.

A session joins the ``torch.distributed`` world (initialising it from the environment when
the user has not), bootstraps the communication runtime, trains the model under DDP (the
user's, or DDP applied to the module in place) with autotune's comm hook, and on the
leader drives a :class:`~autotune.tuning.tuner.Tuner` through the trial schedule
(:mod:`autotune.schedule.schedule`: warm-up, trials, cut-short, lock, drift, start-over).
Tuning iterations train the model like any other: no step is wasted. DDP's semantics are
DDP's own (``docs/ddp.md``).

- :mod:`~autotune.sessions.session`: :class:`Session`, the one session: each step,
  faults, the close;
- :mod:`~autotune.sessions.in_force`: the configuration in force and the job's space, and
  the apply-and-retry loop that puts one in force on every rank;
- :mod:`~autotune.sessions.hooked`: :class:`~autotune.sessions.hooked.HookedDDP`, how the
  gradients are averaged: DDP with the runtime behind its comm hook;
- :mod:`~autotune.sessions.iteration`: what each iteration measures, in one all-reduce;
- :mod:`~autotune.sessions.ddp`: DDP applied to a plain module in place
  (:class:`~autotune.sessions.ddp.InPlaceDDP`), and the workers' group for DDP;
- :mod:`~autotune.sessions.world`: the ``torch.distributed`` world a session runs in;
- :mod:`~autotune.sessions.efficiency_probe`: the statistical efficiency measured each
  iteration when lossy codecs are scored by goodput.

Its settings are :class:`autotune.options.SessionOptions`; the leader's part (its run in
the store, trial schedule and Tuners, display and results) is :mod:`autotune.leader`,
below this package: nothing there imports it.

The subpackage is ``sessions``, not ``session``: importing a subpackage binds its name on
the parent package, which would shadow the function ``autotune.session``.
"""

from __future__ import annotations

from typing import Any

from autotune.options import SessionOptions
from autotune.sessions.session import DDPSession, Session, TuningSession


def open_session(model: Any, options: SessionOptions) -> Session:
    """The session of ``model``: a plain module or a ``DistributedDataParallel`` model
    alike (:class:`Session`)."""
    return Session(model, options)


__all__ = ["TuningSession", "Session", "DDPSession", "open_session"]
