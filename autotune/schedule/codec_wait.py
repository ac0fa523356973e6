"""Codecs wait out the sensitive phase: a lossless search first, the codecs after it.

Early training is sensitive to inexact gradients (adaptive optimisers, error feedback's
delayed error): PyTorch's PowerSGD hook and DeepSpeed's 1-bit Adam both keep compression
out of the first part of training. Where the space has codecs and the job's sensitive
phase (:meth:`~autotune.schedule.stakes.Stakes.sensitive_until`) lasts past the start of
tuning, the trial schedule (:mod:`autotune.schedule.schedule`) searches the lossless space
first and, once the phase is over, runs a short search over the whole space from the kept
lossless configuration. :class:`CodecWait` owns the whole space while the codecs wait, the
iteration they are let in at and that search's budget. Nothing here imports torch.
"""

from __future__ import annotations

from autotune.schedule.stakes import MIN_SEARCH
from autotune.tuning.space import SearchSpace

__all__ = ["CodecWait"]


class CodecWait:
    """Whether, and until when, the codecs of ``space`` wait (module docstring)."""

    def __init__(self, space: SearchSpace) -> None:
        self.full = space  # the space with its codecs
        self.at: int | None = None  # the iteration the codec search starts at
        self.budget = 0  # ... and its budget

    @property
    def waiting(self) -> bool:
        return self.at is not None

    def hold(self, iteration: int, until: int, budget: int) -> SearchSpace | None:
        """Tuning begins at ``iteration`` with ``budget`` and the sensitive phase lasts
        ``until``: the lossless space to search first where the codecs must wait (the
        codec search then gets half the budget, at least ``MIN_SEARCH``), else None."""
        if not self.full.lossy or until <= iteration:
            return None
        self.at, self.budget = until, max(MIN_SEARCH, budget // 2)
        return self.full.lossless()

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
        return space.lossless() if self.waiting else space
