"""What the trial schedule tells a person: the :class:`Listener` interface.

The session's progress display implements it (:mod:`autotune.leader.display`); the
default says nothing. Nothing here imports torch.
"""

from __future__ import annotations

from typing import Callable

from autotune.speedup import Side
from autotune.tuning.space import Config
from autotune.tuning.trial import Trial

#: How many iterations after tuning count as scored iterations of the kept configuration.
SETTLED_SAMPLES = 20


class Listener:
    """What the schedule tells a person; the default says nothing."""

    def tuning(self, budget: int) -> None:
        """Trials start (or start again) with ``budget`` iterations."""

    def trial_started(self, index: int, trial: Trial) -> None:
        """Trial number ``index`` (counted across re-tunes) starts."""

    def overtime(self, contenders: int, iterations: int) -> None:
        """The budget is spent and ``contenders`` near-ties, each faster than the default
        by more than the noise, race on for at most ``iterations`` more
        (:mod:`autotune.tuning.confirm`)."""

    def advanced(self, iterations: int) -> None:
        """``iterations`` of the tuning budget went by."""

    def trial_finished(self, record: Trial) -> None:
        """A trial ended (``record.error`` set when it failed)."""

    def measured_by(self, measured: Callable[[Config | None], Side | None]) -> None:
        """Once, at the start: ``measured(config)`` gives a configuration's figure, the
        ``(mean, spread, scored iterations)`` the store and the session's table show."""

    def locked(self, kept: Config | None, passed_over: str | None = None) -> None:
        """The budget is spent; ``kept`` runs from now on. Its figure grows over its
        first :data:`SETTLED_SAMPLES` training iterations (:meth:`kept_measured`).
        ``passed_over``: why the fastest single trial's configuration is not ``kept``
        (a clause that starts "not the fastest trial's"), where it is not."""

    def kept_measured(self, kept: Config | None) -> None:
        """``kept``'s figure is final: its first :data:`SETTLED_SAMPLES` training
        iterations are scored (or a re-tune starts before they are)."""

    def say(self, text: str) -> None:
        """Something worth a line (rich markup)."""
