"""The one interface of the schedule's phases: ``(schedule, ran) -> configuration``.

Each phase of :class:`~autotune.schedule.schedule.TrialSchedule` (the module docstring
there says what each does) is a function that hears what the last iteration measured
(:class:`Ran`) and says what runs next, as a DDP comm hook is a function ``(state,
bucket) -> Future``; :class:`Schedule` is what a phase may read and do. A phase moves
the schedule to another phase with ``enter``; what the phases share (the ledger, the
stakes, the listener, the warm-up, the trials and the kept configuration) are the
schedule's parts, each the one owner of its state. ``TrialSchedule``'s ``PHASES`` maps each phase's name to its
function (:mod:`~autotune.schedule.opening`: from the warm-up to the first trial;
:mod:`~autotune.schedule.trials`: the trials and the pause; :mod:`~autotune.schedule.locked`:
the loss test, the kept configuration and re-tunes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from autotune.schedule.codec_wait import CodecWait
from autotune.schedule.kept import KeptPhase
from autotune.schedule.ledger import Ledger
from autotune.schedule.listener import Listener
from autotune.schedule.loss_test import LossTest
from autotune.schedule.stakes import Stakes
from autotune.schedule.trial_phase import TrialPhase
from autotune.schedule.warmup import Capped, WarmUp
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.tuner import Tuner

WARMUP, WAITING, BASELINE, LOADING, TRIAL, PAUSED, LOSS_TEST, LOCKED = (
    "warmup", "waiting", "baseline", "loading", "trial", "paused", "loss test", "locked")


@dataclass(frozen=True)
class Ran:
    """What one iteration measured (:meth:`TrialSchedule.next`'s arguments): ``config``
    ran in ``seconds`` (``inf``, or ``failed`` with the reason, when it failed);
    ``comm_s`` its communication time, ``efficiency`` its statistical efficiency,
    ``loss`` the loss the loop passed (None: not known); ``switched``: another
    configuration ran before it; ``scored``: the efficiency its score is weighed by."""

    config: Config
    seconds: float
    failed: str | None = None
    comm_s: float | None = None
    efficiency: float | None = None
    loss: float | None = None
    switched: bool = True
    scored: float | None = 1.0

    @property
    def ok(self) -> bool:
        """The iteration did not fail."""
        return self.failed is None and self.seconds != float("inf")


class Schedule(Protocol):
    """What a phase may read and do: :class:`~autotune.schedule.schedule.TrialSchedule`'s
    parts (each the one owner of its state), its settings, and the moves the phases
    share."""

    ledger: Ledger
    stakes: Stakes
    listener: Listener
    codecs: CodecWait
    opening: "Opening"  # noqa: F821 (autotune.schedule.opening, which imports this module)
    warmup_phase: WarmUp
    trial_phase: TrialPhase
    kept_phase: KeptPhase
    loss_test: LossTest | None
    iteration: int
    budget: int
    seed: int
    samples_per_step: int | None
    capped: Capped | None
    goodput: bool
    retunes: list[int]
    ended_at: int | None

    @property
    def space(self) -> SearchSpace: ...
    @property
    def tuner(self) -> Tuner | None: ...
    @property
    def best(self) -> tuple[Config, float] | None: ...
    @property
    def kept(self) -> Config | None: ...
    def enter(self, phase: str) -> None: ...
    def next_trial(self) -> Config: ...
    def stopped(self) -> Config: ...
    def fallback(self) -> Config: ...
    def allowed(self, config: Config) -> bool: ...


Phase = Callable[[Schedule, Ran], Config]

__all__ = ["BASELINE", "LOADING", "LOCKED", "LOSS_TEST", "PAUSED", "Phase", "Ran", "Schedule",
           "TRIAL", "WAITING", "WARMUP"]
