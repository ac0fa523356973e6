"""Codecs wait out the sensitive phase: a lossless search first, the codecs after it.

Early training is sensitive to inexact gradients (adaptive optimisers, error feedback's
delayed error): PyTorch's PowerSGD hook and DeepSpeed's 1-bit Adam both keep compression
out of the first part of training. And a codec scored by goodput cannot be judged before
the gradient noise scale is stable (:data:`~autotune.tuning.efficiency.LOSSY_WARMUP`
lossless iterations). And a codec the loss test judges is tried only in a job long enough
to pay for the test (:meth:`~autotune.schedule.stakes.Stakes.tested_from`; never in one too
short). Where the space has codecs and a wait lasts past the start of tuning, the trial
schedule (:mod:`autotune.schedule.schedule`) searches the lossless space first (with the
codecs ``keep``, those scored like a lossless configuration: fp16 under goodput) and,
once the wait is over, runs a short search over the whole space from the kept
configuration. :class:`CodecWait` owns the whole space while the codecs wait, the
iteration they are let in at and that search's budget. Nothing here imports torch.
"""

from __future__ import annotations

from typing import Sequence

from autotune.schedule.stakes import MIN_SEARCH
from autotune.tuning.space import SearchSpace

__all__ = ["CodecWait"]


class CodecWait:
    """Whether, and until when, the codecs of ``space`` wait (module docstring); the codecs
    ``keep`` do not."""

    def __init__(self, space: SearchSpace, keep: Sequence[str] = ()) -> None:
        self.full = space  # the space with its codecs
        self.keep = tuple(keep)  # codecs that need not wait
        self.at: float | None = None  # the iteration the codec search starts at (inf: never)
        self.budget = 0  # ... and its budget

    @property
    def waiting(self) -> bool:
        return self.at is not None

    def hold(self, iteration: int, until: float, budget: int) -> SearchSpace | None:
        """Tuning begins at ``iteration`` with ``budget`` and the codecs wait ``until``:
        the space to search first where they must (lossless, with the codecs ``keep``;
        the codec search then gets half the budget, at least ``MIN_SEARCH``), else None."""
        first = self.full.lossless(self.keep)
        if until <= iteration or first.params == self.full.params:
            return None
        self.at, self.budget = until, max(MIN_SEARCH, budget // 2)
        return first

    def due(self, iteration: int) -> bool:
        """Whether the codecs are let in at ``iteration``."""
        return self.at is not None and iteration >= self.at

    def let_in(self) -> tuple[SearchSpace, int]:
        """The codecs are let in: the whole space and the codec search's budget."""
        self.at = None
        return self.full, self.budget

    def shrink(self, space: SearchSpace) -> SearchSpace:
        """Servers were lost and ``space`` is the whole space now: what to search."""
        self.full = space
        return space.lossless(self.keep) if self.waiting else space
