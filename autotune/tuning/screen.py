"""Which technique's nominee runs: the prior's screen and the shared judge.

The bandit picks a technique and the technique nominates a configuration; two filters
then decide whether that nominee is worth a trial.

- **The screen** (with a physics prior, :mod:`autotune.tuning.prior`): a nominee whose
  *optimistic* prediction by the calibrated surrogate is more than ``screen`` below the
  incumbent is not run; its searcher is told the prediction (a note only it hears) and
  asked again, at most ``tries`` times. An ``unscreened`` share of the nominees is never
  screened, and nothing is once the prior's ranking is shown wrong, so data overrules
  the prior.
- **The guard** (with a physics prior, :mod:`autotune.tuning.guard`): whatever the
  screen's share and the prior's weight, a nominee its physics calls hopeless is not run;
  its searcher is noted the prediction; after :data:`GUARD_TRIES` in a row the next runs.
- **The judge** (``judge``): the Bayesian technique's GP, fitted on every trial, rates
  every other technique's nominee; one whose expected improvement is under ``judge``
  times the best available is replaced by the GP's own nominee, and its technique is
  told the GP's prediction and credited a use without success, so the bandit learns
  from every nominee (a dense reward, after GP-Hedge).

Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.tuning.bandit import AUCBandit
from autotune.tuning.guard import hopeless
from autotune.tuning.prior import Surrogate
from autotune.tuning.search.base import Searcher
from autotune.tuning.space import Config

PRIOR = "prior"  # technique name of the calibrated physics prior (with Tuner(prior=...))
JUDGE = "bayes"  # the technique whose model judges every other technique's nominee
JUDGE_SHARE = 0.3  # a nominee runs if its expected improvement is this share of the best's
GUARD_TRIES = 20  # hopeless nominees in a row, after which the next runs whatever it is


@dataclass(frozen=True)
class ScreenSettings:
    """``screen``: how far below the incumbent a nominee may be predicted, even
    optimistically, and still run; ``unscreened``: the share of nominees never screened;
    ``judge``: the share of the best expected improvement a nominee needs (0: no judge)."""

    screen: float = 0.3
    unscreened: float = 0.25
    judge: float = JUDGE_SHARE

    def __post_init__(self) -> None:
        if not 0 <= self.screen < 1:
            raise ValueError(f"screen must be a fraction in [0, 1), got {self.screen}")
        if not 0 <= self.unscreened <= 1:
            raise ValueError(f"unscreened must be a fraction in [0, 1], got {self.unscreened}")
        if not 0 <= self.judge <= 1:
            raise ValueError(f"judge must be a fraction in [0, 1], got {self.judge}")


class Screen:
    """The screen and the judge over the Tuner's ``searchers`` (module docstring)."""

    def __init__(self, settings: ScreenSettings, searchers: dict[str, Searcher],
                 bandit: AUCBandit, surrogate: Surrogate | None) -> None:
        self.screen = float(settings.screen)
        self.unscreened = float(settings.unscreened)
        self.judge = float(settings.judge) if JUDGE in searchers else 0.0
        self.searchers = searchers
        self.bandit = bandit
        self.surrogate = surrogate
        self.screened = 0  # nominees not run: predicted far slower than the incumbent
        self.overruled = 0  # nominees the judge replaced by its own
        self.guarded = 0  # nominees not run: the physics called them hopeless
        self._in_a_row = 0  # guarded since the last nominee that ran
        self._proposals = 0  # nominees screened or not, for the unscreened share

    def ask(self, name: str, tries: int = 20) -> Config | None:
        """Technique ``name``'s next nominee that the surrogate does not rate clearly
        worse than the incumbent (by more than ``screen``, even optimistically). A
        screened nominee is noted to its searcher as the surrogate's prediction, so it
        moves on; after ``tries`` screened nominees the next one runs whatever its
        prediction, and an ``unscreened`` share is never screened: the prior must not
        keep the search from every region where it is wrong."""
        searcher = self.searchers[name]
        for _ in range(tries):
            config = searcher.ask()
            if config is None or self.surrogate is None or name == PRIOR or self.screen == 0:
                return config
            self._proposals += 1
            free = self.unscreened > 0 and (self._proposals * self.unscreened) % 1 < self.unscreened
            if free or not self.surrogate.clearly_worse(config, self.screen):
                return config
            self.screened += 1
            mean, _ = self.surrogate.predict_config(config)
            searcher.note(config, float(math.exp(mean)))
        return searcher.ask()

    def guards(self, name: str, config: Config) -> bool:
        """Whether the guard keeps technique ``name``'s final nominee ``config`` from
        running (module docstring); if so its searcher is noted the prediction."""
        predicted = (hopeless(self.surrogate, config)
                     if self.surrogate is not None and self._in_a_row < GUARD_TRIES else None)
        if predicted is None:
            self._in_a_row = 0
            return False
        self._in_a_row += 1
        self.guarded += 1
        self.searchers[name].note(config, predicted)
        return True

    def overrules(self, name: str, config: Config, exhausted: set[str]) -> bool:
        """Whether the judge replaces ``name``'s nominee ``config`` by its own: when the
        nominee's expected improvement is below ``judge`` times the best available. The
        overruled technique is credited a use without success and noted the GP's
        prediction, so it moves on."""
        if (not self.judge or name in (JUDGE, PRIOR) or JUDGE in exhausted
                or not self.searchers[JUDGE].ready):
            return False
        ei, best, predicted = self.searchers[JUDGE].judge(config)
        if best <= 0 or ei >= self.judge * best:
            return False
        self.overruled += 1
        self.searchers[name].note(config, predicted)
        self.bandit.credit(name, False)
        return True
