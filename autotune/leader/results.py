"""What a tuning session reports: its results, read from the leader's schedule and trials.

:class:`SessionResults` is the part of :class:`~autotune.sessions.session.Session` that
answers "what did it settle on, and how fast": the kept configuration (``best``), every
trial (``history``, ``failures``), the kept and default configurations' scores with their
spread, the unit, whether it is still tuning. It only reads: the trials' numbers come from
the leader's :class:`~autotune.schedule.ledger.Ledger` (``ledger``), the kept
configuration and the current Tuner from its
:class:`~autotune.schedule.schedule.TrialSchedule` (``schedule``); on other ranks these are
None and the results fall back to the active configuration or nothing.
"""

from __future__ import annotations

import math

from autotune.options import SessionOptions
from autotune.schedule.ledger import Ledger
from autotune.schedule.schedule import TrialSchedule
from autotune.tuning.lossy import judged_by_goodput
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trial import Trial
from autotune.tuning.tuner import Tuner


class SessionResults:
    """The results of a session (module docstring); the session sets the attributes."""

    options: SessionOptions
    space: SearchSpace | None
    ledger: Ledger | None      # the leader's
    schedule: TrialSchedule | None  # the leader's
    config: Config | None
    _start_s: float | None          # making and entering the session took this long
    _quiet_until: float             # inf once settled

    @property
    def tuner(self) -> Tuner | None:
        """The leader's current Tuner (a new one after a re-tune)."""
        return self.schedule.tuner if self.schedule is not None else None

    @property
    def best(self) -> Config | None:
        """The configuration the session settled on (on rank 0: the best measured so far)."""
        kept = self.schedule.kept if self.schedule is not None else None
        if kept is not None:
            return kept
        return dict(self.config) if self.config is not None else None

    @property
    def tuning_cost(self) -> dict | None:
        """What tuning cost the job so far (leader; None elsewhere): ``iterations`` of
        trials, the ``lost_s`` seconds they lost against the default, what the kept
        configuration saves an iteration (``saved_s``) and the iteration by which that pays
        the loss back (``payback_at``; :mod:`autotune.schedule.stakes`), ``total_steps``,
        and ``start_s``: how long making and entering the session took (``autotune.
        session()``'s imports, its world, DDP's set-up in place or the hook's, the store,
        the space; the job pays it whether or not it tunes, so it is not in ``lost_s``,
        and DDP alone pays only its own set-up)."""
        if self.schedule is None:
            return None
        start = self._start_s
        return {**self.schedule.cost(), "total_steps": self.options.total_steps,
                **({} if start is None else {"start_s": round(start, 4)})}

    @property
    def history(self) -> list[Trial]:
        """Every trial so far (leader)."""
        return self.ledger.history if self.ledger is not None else []

    @property
    def failures(self) -> list[Trial]:
        return self.ledger.failures if self.ledger is not None else []

    def _numbers(self, config: Config | None) -> tuple[float | None, float | None]:
        """``config``'s mean and spread over its scored iterations (leader)."""
        m = self.ledger.measured(config) if self.ledger is not None and config else None
        return (m[0], m[1]) if m else (None, None)

    @property
    def best_score(self) -> float | None:
        """The kept (best) configuration's mean throughput over its scored iterations:
        the one "kept" number of the progress display's closing line, the table, the
        store and the report (a configuration kept untuned, from the store or with budget
        0, is scored over its first training iterations alike)."""
        best = self.schedule.best if self.schedule is not None else None
        mean = self._numbers(self.best)[0]
        if mean is not None or best is None:
            return mean
        return best[1] if self.best == best[0] else None  # (an untested codec is not kept)

    @property
    def best_efficiency(self) -> float | None:
        """The kept configuration's statistical efficiency, when it is a codec scored by
        goodput (its trials' mean; :attr:`best_score` is then its goodput)."""
        sched, best = self.schedule, self.best
        if sched is None or best is None or not judged_by_goodput(sched.goodput, best):
            return None
        return sched.trial_phase.efficiency.get(self.space.key(best))

    @property
    def best_spread(self) -> float | None:
        """Standard deviation of the kept configuration's scored iterations."""
        return self._numbers(self.best)[1]

    @property
    def default_score(self) -> float | None:
        """The default's mean throughput over its scored iterations (the Tuner measures it
        as long as the kept one); ``default_spread``: their standard deviation."""
        return self._numbers(self.space.default() if self.space else None)[0]

    @property
    def default_spread(self) -> float | None:
        return self._numbers(self.space.default() if self.space else None)[1]

    @property
    def unit(self) -> str:
        """What the scores count: ``samples/s`` with ``samples_per_step``, else ``it/s``."""
        return "samples/s" if self.options.samples_per_step else "it/s"

    @property
    def score_unit(self) -> str:
        """The run's unit in the store: :attr:`unit`, as goodput (``goodput samples/s``)
        where lossy codecs are scored by goodput (:data:`autotune.units.UNITS`)."""
        from autotune.units import GOODPUT

        return (GOODPUT if self.options.goodput else "") + self.unit

    @property
    def tuning(self) -> bool:
        """True while trials are running (rank 0 only knows)."""
        return self.schedule.tuning if self.schedule is not None else False

    @property
    def settled(self) -> bool:
        """True once tuning is over for good (every rank knows): the kept configuration's
        figure is final and nothing watches it (no ``retune_on_drift``, no kept codec), so
        :meth:`step` measures nothing more and costs no collective of its own."""
        return math.isinf(self._quiet_until)

    @property
    def tuning_iterations(self) -> int:
        """Iterations spent inside trials (leader)."""
        return self.schedule.trial_phase.iterations if self.schedule is not None else 0
