"""``autotune.session()``: tune the gradient communication of a model while it trains.

It joins the ``torch.distributed`` world (initialising it from the environment when the
user has not), bootstraps the communication runtime, and on the leader drives a
:class:`~autotune.tuning.tuner.Tuner` through the trial schedule
(:mod:`autotune.tuning.schedule`: warm-up, trials, cut-short, lock, drift, start-over).
Tuning iterations train the model like any other: no step is wasted. It keeps DDP's
semantics (``docs/ddp.md``): the leader's parameters and buffers at the start, the
leader's buffers before each training forward, ``no_sync()`` for gradient accumulation.

- :mod:`~autotune.session.base`: :class:`TuningSession`, what both kinds share: the
  arguments, the leader's tuning, the results;
- :mod:`~autotune.session.core`: :class:`Session`, the native runtime: the world, the
  runtime, each step;
- :mod:`~autotune.session.ddp`: :class:`DDPSession`, DDP kept, its buckets averaged by
  autotune's comm hook;
- :mod:`~autotune.session.parity`: DDP's semantics for the native runtime;
- :mod:`~autotune.session.facts`: the job's space and physics prior;
- :mod:`~autotune.session.record`: the run in the results store;
- :mod:`~autotune.session.display`: the progress and the final table.
"""

from __future__ import annotations

from autotune.session.base import TuningSession
from autotune.session.core import Session
from autotune.session.ddp import DDPSession
from autotune.tuning.schedule import PROBE_STREAMS, SWITCH_MARGIN, trial_seconds
from autotune.tuning.tuner import TrialRecord

#: ``autotune.session(model, budget=100, ...)``: a :class:`Session` for a module (the
#: native runtime), a :class:`DDPSession` for a DistributedDataParallel model (DDP kept,
#: its communication tuned); the arguments are :class:`TuningSession`'s.
session = TuningSession

__all__ = ["TuningSession", "Session", "DDPSession", "session", "TrialRecord",
           "PROBE_STREAMS", "SWITCH_MARGIN", "trial_seconds"]
