"""A session's settings, checked when ``autotune.session()`` is called.

:class:`SessionOptions` holds every keyword of :func:`autotune.session` (its docstring says
what each means), typed, and checks them as it is made: a bad value is an
:class:`~autotune.errors.ArgumentError` that names the argument, what was given and what
to pass instead, before any process group or runtime exists. Import-light: no torch.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from autotune.errors import ArgumentError, AutotuneError, shown_by_rank_0
from autotune.tuning.search import TECHNIQUES
from autotune.tuning.space import check_fixed
from autotune.tuning.tuner import DEFAULT_TECHNIQUES, PRIOR

__all__ = ["LOSSY_SCORES", "SessionOptions"]

LOSSY_SCORES = ("goodput", "throughput")
"""How trials are scored with ``allow_lossy``: ``goodput`` (throughput x statistical
efficiency, docs/compression.md) or ``throughput`` alone (samples/s, blind to what a
codec costs in steps to the same loss)."""


@dataclass(frozen=True)
class SessionOptions:
    """The keywords of :func:`autotune.session`, checked (module docstring)."""

    budget: int = 100
    total_steps: int | None = None
    spend: float | None = 0.05
    db: str | os.PathLike | None = None
    allow_lossy: bool = False
    lossy_score: str = "goodput"
    samples_per_step: int | None = None
    techniques: Sequence[str] = DEFAULT_TECHNIQUES
    seed: int = 0
    verbose: bool = True
    retune_on_drift: float | None = None
    drift_window: int = 50
    timeout: float = 300.0
    trial_iterations: int | None = None
    warmup: int = 3
    cut_short: float | None = 0.5
    job: str | None = None
    store: bool = True
    broadcast_buffers: bool = True
    prior: bool = True
    fixed: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            self._validate()
        except AutotuneError as e:  # alike on every rank: printed by rank 0 alone
            shown_by_rank_0(e)
            raise

    def _validate(self) -> None:
        # the type first, named: "got '2'" beside ">= 1" would hide that a str was given
        for name, optional in INT_OPTIONS:
            value = getattr(self, name)
            _check(_is_int(value) or (optional and value is None),
                   f"{name} must be a whole number (an int{' or None' if optional else ''}), "
                   f"got {type(value).__name__} {value!r}")
        _check(self.budget >= 0,
               f"budget must be a whole number of iterations >= 0 (0: no tuning), "
               f"got {self.budget!r}")
        _check(self.total_steps is None
               or self.total_steps >= 1,
               f"total_steps is the job's length in training iterations (optimizer steps), "
               f">= 1, or None when unknown; got {self.total_steps!r}")
        _check(self.spend is None or _in_open_unit(self.spend),
               f"spend is the share of the job's time the trials may lose, a fraction in "
               f"(0, 1), e.g. 0.05, or None for no limit; got {self.spend!r}")
        _check(self.samples_per_step is None
               or self.samples_per_step > 0,
               f"samples_per_step must be a positive batch size, got {self.samples_per_step!r}")
        _check(self.retune_on_drift is None or _in_open_unit(self.retune_on_drift),
               f"retune_on_drift is a fraction in (0, 1), e.g. 0.2, or None, "
               f"got {self.retune_on_drift!r}")
        _check(self.drift_window >= 1,
               f"drift_window must be >= 1 iterations, got {self.drift_window!r}")
        _check(isinstance(self.timeout, (int, float)) and not isinstance(self.timeout, bool)
               and math.isfinite(self.timeout) and self.timeout > 0,
               f"timeout is the seconds any wait may take and must be > 0 "
               f"(e.g. timeout=300), got {self.timeout!r}")
        _check(self.trial_iterations is None
               or self.trial_iterations >= 1,
               f"trial_iterations must be >= 1 (or None for the default), "
               f"got {self.trial_iterations!r}")
        _check(self.warmup >= 0,
               f"warmup must be >= 0 iterations, got {self.warmup!r}")
        _check(self.cut_short is None or _in_open_unit(self.cut_short),
               f"cut_short is a fraction in (0, 1), or None to never cut, got {self.cut_short!r}")
        _check(isinstance(self.fixed, Mapping),
               f"fixed is a dict of knob: value, got {type(self.fixed).__name__}")
        _check(isinstance(self.techniques, (list, tuple)) and len(self.techniques) > 0,
               f"techniques is a non-empty list of names, e.g. ['grid', 'bayes'], "
               f"got {self.techniques!r}")
        _check(self.lossy_score in LOSSY_SCORES,
               f"lossy_score is one of {', '.join(map(repr, LOSSY_SCORES))}, "
               f"got {self.lossy_score!r}")
        for name in ("allow_lossy", "verbose", "store", "broadcast_buffers", "prior"):
            value = getattr(self, name)
            _check(isinstance(value, bool), f"{name} is True or False, got {value!r}")
        _check(self.db is None or isinstance(self.db, (str, os.PathLike)),
               f"db is a path, a postgresql:// URL or None ($AUTOTUNE_DB, else "
               f"./autotune.db), got {self.db!r}")
        _check(self.job is None or isinstance(self.job, str),
               f"job is a name (a string) or None, got {self.job!r}")
        unknown = [t for t in self.techniques if t not in TECHNIQUES and t != PRIOR]
        _check(not unknown, f"techniques: unknown name(s) {', '.join(map(repr, unknown))}; "
                            f"choose from {', '.join(TECHNIQUES)}")
        object.__setattr__(self, "techniques", tuple(self.techniques))
        object.__setattr__(self, "fixed", dict(self.fixed))
        check_fixed(self.fixed, self.allow_lossy)  # the names now; the values at the start

    @property
    def goodput(self) -> bool:
        """Whether lossy codecs are in the space and scored by goodput."""
        return self.allow_lossy and self.lossy_score == "goodput"


# the options that are whole numbers, and whether None is one of their values
INT_OPTIONS = (("budget", False), ("total_steps", True), ("samples_per_step", True),
               ("drift_window", False), ("trial_iterations", True), ("warmup", False),
               ("seed", False))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _in_open_unit(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ArgumentError(message)
