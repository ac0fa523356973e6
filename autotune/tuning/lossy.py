"""The goodput guards of the trial schedule: scoring lossy configurations (issue 39).

With lossy codecs allowed and scored by goodput, the caller passes each iteration's
statistical efficiency (:mod:`autotune.tuning.efficiency`; 1 for a lossless
configuration). A lossy trial's score is then its throughput times its mean
efficiency (the trial under way keeps them: :class:`~autotune.tuning.trial.Trial`),
and three guards apply:

* no codec judged by goodput runs in the first
  :data:`~autotune.tuning.efficiency.LOSSY_WARMUP` iterations (the schedule's codec wait:
  a lossless search first), and a lossy trial whose efficiency is still unknown fails
  (:data:`UNKNOWN_EFFICIENCY`);
* a lossy trial whose mean efficiency falls below
  :data:`~autotune.tuning.efficiency.COLLAPSED` fails at once (:func:`collapsed`);
* after tuning, a kept codec whose efficiency (the mean of a window) falls below
  :data:`~autotune.tuning.efficiency.DROPPED` of what its trials measured, or below
  ``COLLAPSED``, is dropped (:func:`dropped`; the kept phase keeps the window,
  :class:`~autotune.schedule.kept.KeptPhase`): the schedule re-tunes from the best lossless
  configuration (:meth:`~autotune.schedule.ledger.Ledger.best_lossless`).

Pure functions of values: each piece of state has one owner (the trial under way, the
trial phase, the kept phase). Nothing here imports torch.
"""

from __future__ import annotations

from autotune.tuning.efficiency import COLLAPSED, DROPPED
from autotune.tuning.space import KNOBS, Config, SearchSpace

UNKNOWN_EFFICIENCY = ("its statistical efficiency is unknown: the gradient noise scale is not "
                      "stable yet, so a lossy codec cannot be judged")

#: Iterations of a kept codec's efficiency averaged before it is judged (without a drift
#: watch; with one, its ``window``).
EFFICIENCY_WINDOW = 20


def judged_by_goodput(goodput: bool, config: Config) -> bool:
    """Whether ``config`` is judged by its efficiency (and, to be kept, by the loss test):
    a codec, scored by goodput, but not one :data:`SCORED_AS_LOSSLESS`."""
    return goodput and config.get("compression", "none") not in ("none", *SCORED_AS_LOSSLESS)


#: Codecs scored like a lossless configuration, by throughput: fp16 rounds each element to
#: 11 significant bits (a relative error of at most 2**-11), scaled so that no sum
#: overflows, and error feedback carries the rounding into the next step. Its step is the
#: lossless one to about 5e-4 of each element, far below what an efficiency or a loss can
#: resolve (its measured efficiency is above 0.999, docs/compression.md); on the held-out
#: GPT job (AdamW) it reached a lower loss than lossless in 6 of 6 runs
#: (``benchmarks/loss_test_bench.py``). bf16 (2**-8) is judged like every other codec.
SCORED_AS_LOSSLESS = ("fp16",)


def lossless_seeds(space: SearchSpace) -> list[Config]:
    """The default under each codec :data:`SCORED_AS_LOSSLESS` that ``space`` has: under
    goodput the search tries them first (after the default), so that a codec's loss test
    compares it with them, not only with the default (issue 62: at 15 Mbit/s fp16 ran the
    held-out LM at 1.8x the default's speed, tried only after top-k's test had spent 38
    iterations half on the default)."""
    have = space["compression"].values if "compression" in space.names else ()
    return [space.validate({**space.default(), "compression": c})
            for c in SCORED_AS_LOSSLESS if c in have]


def codec_of(config: Config) -> tuple:
    """What makes ``config``'s codec as lossy as it is: the codec and its own knobs (ratio
    or rank, ``compress_min_bytes``), not the streams or chunks that carry it. A codec
    the loss test kept during the search is admitted by this (the schedule's gate)."""
    codec = config.get("compression", "none")
    own = [k.name for k in KNOBS if k.when and k.when[0][0] == "compression"
           and codec in k.when[0][1]]
    return (codec, *((n, config.get(n)) for n in own))


def scored_efficiency(goodput: bool, config: Config, efficiency: float | None) -> float | None:
    """What a score of ``config``'s iteration is multiplied by: 1 unless it is judged by
    goodput; then its efficiency (None while unknown)."""
    return efficiency if judged_by_goodput(goodput, config) else 1.0


def collapsed(mean: float | None) -> str | None:
    """Why a lossy trial whose mean efficiency so far is ``mean`` fails, or None."""
    if mean is None or mean >= COLLAPSED:
        return None
    return (f"statistical efficiency {mean:.2f} < {COLLAPSED}: the codec's error on the "
            f"averaged gradient would cost more steps to the same loss than its speed "
            f"saves (goodput, docs/compression.md)")


def dropped(measured: float, now: float) -> bool:
    """Whether a kept codec whose trials measured efficiency ``measured`` and whose
    window now averages ``now`` is dropped (module docstring)."""
    return now < max(COLLAPSED, DROPPED * measured)

