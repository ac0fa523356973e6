"""The loss test: a codec is kept only where the job's own loss falls sooner (issue 62).

A lossy codec makes an iteration faster and its step worse. Whether the job reaches its
loss sooner depends on the model, the optimiser and the point in training, and a proxy
misjudges it: the gradient noise scale's efficiency credited top-k 0.1% under AdamW with
about a quarter of a lossless step's progress, and the job ended at a worse loss after
3.75x DDP's steps. So before the trial schedule (:mod:`autotune.schedule.schedule`) keeps a
codec, it measures the job itself: :class:`LossTest` runs the codec and the best lossless
configuration (or fp16, which is scored as lossless, where it measured faster) in
alternating blocks of :data:`BLOCK` iterations (:data:`ROUNDS` of each,
the codec first), with the loss the training loop passes to ``session.step(loss=...)``
(averaged over the workers), and fits by least squares

    loss_i = c + a * T_lossless(i) + b * T_codec(i) + q * T(i)^2

where ``T_x(i)`` is the time spent under ``x`` before iteration ``i`` (the loss of an
iteration is computed before its own step) and ``T = T_lossless + T_codec``: ``a`` and
``b`` are how fast the loss falls per second of the job's clock under each, the
quadratic term the loss curve's bend over the test, common to both. Alternation makes
the two rates separable and shares drift in the data between them; a codec's damage
that outlasts its block (error feedback's delay, Adam's moments) lands in the lossless
block after it, against the codec's rival: the test leans toward lossless.

The codec is kept only when its loss falls faster per second with confidence: ``b - a``
below zero by :data:`Z` standard errors (one-sided, about 90%). Where the codec is ahead
but not yet with confidence, the test runs as long again, once. A codec that hurts costs
the job while it is tested (on the held-out GPT at 30 Mbit/s the loss rose from 2.79 to
2.89 over a whole test of top-k), so from the second pair of blocks on, a codec slower by
:data:`Z` standard errors stops the test at once. An inconclusive test, a
loss the loop did not pass (or not finite), keeps the lossless configuration: a lossy
codec must never leave the model worse. What the test found is one line
(:attr:`Verdict.line`). fp16 is scored like a lossless configuration and needs no test
(:data:`~autotune.tuning.lossy.SCORED_AS_LOSSLESS`). Pure values; nothing here imports
torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.tuning.space import Config
from autotune.tuning.trial import FAILED, Trial

__all__ = ["BLOCK", "LENGTH", "ROUNDS", "Z", "Z_WATCH", "CodecWatch", "LossTest", "Verdict",
           "loss_rates"]

#: Iterations a configuration runs before the other takes over.
BLOCK = 8
#: Blocks of each configuration (the codec's first).
ROUNDS = 3
#: Iterations of a whole test (before it is extended, or stopped early).
LENGTH = 2 * BLOCK * ROUNDS
#: Standard errors by which the codec's rate must beat the lossless one (one-sided).
Z = 1.28

#: Standard errors by which the codecs' rate must be worse than the rest's for the watch
#: to end the search (:class:`CodecWatch`). It looks after every codec iteration, so the
#: bound is wide: on synthetic searches (batch noise 2.5x a step's progress, 40 seeds)
#: codecs that raise the loss were stopped in 36, codecs as fast to the loss per second as
#: the rest in 3, codecs twice as fast in none (at 2.0: 38, 11 and 1).
Z_WATCH = 3.0
#: Iterations of each kind the watch needs before it judges.
WATCH_MIN = 8

NO_LOSS = ("the training loop passed no loss to session.step(loss=...), so the session "
           "cannot tell whether the codec's faster iterations reach the loss sooner")


@dataclass(frozen=True)
class Verdict:
    """What the loss test found: ``keep`` the codec or not, the rates per second (loss
    units; negative: falling) under the codec and lossless, the standard error of their
    difference, and ``why`` when no rates could be fitted."""

    keep: bool
    codec_rate: float | None = None
    lossless_rate: float | None = None
    se: float | None = None
    why: str | None = None
    rival: str = "lossless"  # what the codec ran against (fp16 is scored as lossless)

    @property
    def line(self) -> str:
        """One line that says what was kept and why."""
        if self.why is not None:
            return f"codec not kept: {self.why}"
        kept = "codec kept" if self.keep else "codec not kept"
        ratio = ""
        if self.lossless_rate is not None and self.lossless_rate < 0:
            ratio = f" ({self.codec_rate / self.lossless_rate:.2f}x as fast)"
        return (f"{kept}: in the loss test the loss fell {-self.codec_rate:.3g}/s under the "
                f"codec against {-self.lossless_rate:.3g}/s {self.rival}{ratio}, "
                f"± {self.se:.2g}/s"
                + ("" if self.keep else "; slower" if self.codec_rate >= self.lossless_rate
                   else "; not faster with confidence"))


def loss_rates(codec: list[bool], seconds: list[float], losses: list[float]
               ) -> tuple[float, float, float] | None:
    """The fit of the module docstring over iterations that ran the codec (``codec[i]``)
    or not, in ``seconds[i]``, with loss ``losses[i]``: ``(b, a, se(b - a))``, or None
    where it cannot be fitted (too few iterations, one configuration only, no spread)."""
    t_codec = np.cumsum([0.0] + [s if c else 0.0 for c, s in zip(codec, seconds)])[:-1]
    t_lossless = np.cumsum([0.0] + [0.0 if c else s for c, s in zip(codec, seconds)])[:-1]
    total = t_codec + t_lossless
    x = np.column_stack([np.ones(len(losses)), t_lossless, t_codec, total ** 2])
    y = np.asarray(losses, dtype=float)
    n, p = x.shape
    if n <= p + 1 or all(codec) or not any(codec):
        return None
    coef, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    if rank < p:
        return None
    residual = y - x @ coef
    sigma2 = float(residual @ residual) / (n - p)
    cov = sigma2 * np.linalg.inv(x.T @ x)
    var = cov[2, 2] + cov[1, 1] - 2 * cov[1, 2]
    return float(coef[2]), float(coef[1]), math.sqrt(max(var, 0.0))


class LossTest:
    """The loss test of ``codec`` against ``lossless`` (module docstring): :meth:`config`
    says what runs next, :meth:`ran` takes each iteration and returns the
    :class:`Verdict` once the last block has run."""

    def __init__(self, codec: Config, lossless: Config, block: int = BLOCK,
                 rounds: int = ROUNDS) -> None:
        self.codec, self.lossless = dict(codec), dict(lossless)
        self.length = 2 * block * rounds
        self.block = block
        self.count = 0  # iterations the test has run
        self.extended = False  # whether it was doubled (module docstring)
        self.ran_codec: list[bool] = []
        self.seconds: list[float] = []
        self.losses: list[float] = []

    def config(self) -> Config:
        """The configuration of the next iteration: blocks alternate, the codec's first."""
        codec_turn = (self.count // self.block) % 2 == 0
        return dict(self.codec if codec_turn else self.lossless)

    def ran(self, config: Config, seconds: float, loss: float | None,
            failed: str | None = None) -> Verdict | None:
        """An iteration of ``config`` took ``seconds`` and the loop's loss was ``loss``
        (None: not passed), or it ``failed`` (or the runtime refused it) for that reason.
        None while the test runs; its verdict after the last block, or at once where
        the codec cannot be judged (a failure keeps it out too)."""
        if failed is not None:
            return Verdict(False, why=failed)
        if loss is None or not math.isfinite(loss):
            return Verdict(False, why=NO_LOSS if loss is None else
                           f"the loss passed to session.step() is {loss}")
        self.count += 1
        if math.isfinite(seconds) and config in (self.codec, self.lossless):
            self.ran_codec.append(config == self.codec)  # (a failed iteration is left out)
            self.seconds.append(seconds)
            self.losses.append(loss)
        pair = 2 * self.block
        if self.count < self.length and (self.count % pair or self.count < 2 * pair):
            return None
        fit = loss_rates(self.ran_codec, self.seconds, self.losses)
        if fit is None:
            return Verdict(False, why="the loss test's iterations could not be fitted")
        b, a, se = fit
        if self.count < self.length:  # a pair of blocks ended early in the test: the
            if b - a <= Z * se:       # codec stops only once it is slower with confidence
                return None
        elif -Z * se <= b - a < 0 and not self.extended:  # ahead, not yet with confidence
            self.extended, self.length = True, 2 * self.length
            return None
        rival = self.lossless.get("compression", "none")
        return Verdict(b - a < -Z * se, b, a, se, rival="lossless" if rival == "none" else rival)

    def record(self, index: int, verdict: Verdict) -> Trial:
        """The store's record of a codec the test did not keep: a failed trial number
        ``index`` of technique ``loss test``, the verdict's line its error."""
        return Trial(index, dict(self.codec), self.count, "loss test", state=FAILED,
                     error=verdict.line)


class CodecWatch:
    """The search's own codec trials, watched by the job's loss (issue 62). The loss test
    guards what is kept; the trials that lead to it run codecs too, and under AdamW
    top-k's trials alone raised the held-out GPT's loss from 2.76 to 2.905 in 10 s while
    DDP's fell. So every iteration of the search with a loss is kept here, marked by
    whether its configuration is judged by goodput, and once each kind has
    :data:`WATCH_MIN` iterations, an iteration of a judged codec fits :func:`loss_rates`
    over them all (the codecs pooled against the rest, which need no test): a rate worse
    by :data:`Z_WATCH` standard errors ends the search's codec trials
    (:meth:`ran` says why)."""

    def __init__(self) -> None:
        self.judged: list[bool] = []
        self.seconds: list[float] = []
        self.losses: list[float] = []

    def ran(self, judged: bool, seconds: float, loss: float | None) -> str | None:
        """An iteration of the search, of a configuration ``judged`` by goodput or not,
        took ``seconds`` with loss ``loss``: why the codec trials end now, else None."""
        if loss is None or not math.isfinite(loss) or not math.isfinite(seconds):
            return None
        self.judged.append(judged)
        self.seconds.append(seconds)
        self.losses.append(loss)
        codec = sum(self.judged)
        if not judged or codec < WATCH_MIN or len(self.judged) - codec < WATCH_MIN:
            return None
        fit = loss_rates(self.judged, self.seconds, self.losses)
        if fit is None or fit[0] - fit[1] <= Z_WATCH * fit[2]:
            return None
        b, a, se = fit
        return (f"the loss fell {-b:.3g}/s under the codecs tried against {-a:.3g}/s under "
                f"the rest (± {se:.2g}/s): the codec trials end, no codec is kept")
