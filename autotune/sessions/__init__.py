"""The training-loop glue behind :func:`autotune.session`: tune the gradient communication
of a model while it trains.

A session joins the ``torch.distributed`` world (initialising it from the environment when
the user has not), bootstraps the communication runtime, and on the leader drives a
:class:`~autotune.tuning.tuner.Tuner` through the trial schedule
(:mod:`autotune.tuning.schedule`: warm-up, trials, cut-short, lock, drift, start-over).
Tuning iterations train the model like any other: no step is wasted. It keeps DDP's
semantics (``docs/ddp.md``): the leader's parameters and buffers at the start, the
leader's buffers before each training forward, ``no_sync()`` for gradient accumulation.

- :mod:`~autotune.sessions.options`: :class:`SessionOptions`, the settings, checked;
- :mod:`~autotune.sessions.base`: :class:`TuningSession`, the type ``session()`` returns:
  the iteration, the apply-and-retry loop, the leader's tuning, the results;
- :mod:`~autotune.sessions.native`: :class:`Session`, the native runtime: the world, the
  runtime, each step;
- :mod:`~autotune.sessions.ddp`: :class:`DDPSession`, DDP kept, its buckets averaged by
  autotune's comm hook;
- :mod:`~autotune.sessions.parity`: DDP's semantics for the native runtime;
- :mod:`~autotune.sessions.tuners`: the job's space and physics prior;
- :mod:`~autotune.sessions.record`: the run in the results store;
- :mod:`~autotune.sessions.display`: the progress and the final table.

The subpackage is ``sessions``, not ``session``: importing a subpackage binds its name on
the parent package, which would shadow the function ``autotune.session``.
"""

from __future__ import annotations

from typing import Any

from autotune.sessions.base import DDP, TuningSession
from autotune.sessions.native import Session
from autotune.sessions.ddp import DDPSession
from autotune.sessions.options import SessionOptions
from autotune.tuning.schedule import PROBE_STREAMS, SWITCH_MARGIN, trial_seconds
from autotune.tuning.tuner import TrialRecord


def open_session(model: Any, options: SessionOptions) -> TuningSession:
    """The session of the kind ``model`` asks for: a :class:`DDPSession` for a
    ``DistributedDataParallel`` model (DDP kept, its communication tuned), else a
    :class:`Session` (the native runtime)."""
    kind = DDPSession if isinstance(model, DDP) else Session
    return kind(model, options)


__all__ = ["TuningSession", "Session", "DDPSession", "SessionOptions", "open_session",
           "TrialRecord", "PROBE_STREAMS", "SWITCH_MARGIN", "trial_seconds"]
