"""The Tuner: an ensemble of searchers driven by the AUC bandit, with a budget.

The AIACC-Training paper (ICDCS 2022, §VI): within a budget of training iterations (100 by default) the meta-solver
hands trials to search techniques (grid, PBT, Bayesian optimisation, Hyperband), and
afterwards the best configuration is kept. ``Tuner`` is used by the training session
and by offline callers alike::

    tuner = Tuner(space, budget=100, seed=0)
    while (trial := tuner.ask()) is not None:
        score = measure(trial.config, trial.iterations)   # e.g. samples/s; None = failed
        tuner.tell(trial, score)
    config, score = tuner.best

- The budget counts training iterations: the sum of ``trial.iterations``. A trial lasts
  ``trial_iterations`` by default, or what Hyperband asks for; the last trial is
  shortened to fit, and a trial that would leave a remainder shorter than
  ``min_iterations`` (too short to measure anything) absorbs it.
- Warm-start configurations (e.g. the best of similar stored jobs) are projected into
  the space, de-duplicated and tried first (technique ``"warm"``; one that is the space's
  default is labelled ``"default"``, one of its other ``seeds()`` ``"seed"``).
- Every result is told to every technique, so each learns from all trials. The bandit
  credits a technique when its trial made its configuration the new global best or
  scored in the best ``credit_quantile`` (default a quarter) of all trials so far, a
  credit that carries information long before the rare new best; its sliding window
  counts training iterations (a trial of L iterations is L uses), so a technique asking
  for long trials pays for them.
- **The kept configuration is not luck** (:attr:`best`): the configuration with the
  highest lower confidence bound of the noise model (:mod:`autotune.tuning.noise`);
  once the confirm phase has begun, of the confirmed ones only. Once the ``reference``
  (the default) is measured, nothing replaces it unless its lower bound is above the
  reference's upper bound: proven faster by more than the noise.
- **Polishing** (:mod:`autotune.tuning.polish`): the ``polish`` share of the budget just
  before the confirm phase steps the ordinal knobs of the configuration that would be
  kept (coordinate steps inside its categorical subspace, as AutoCCL, NSDI 2025).
- **Confirming** (:mod:`autotune.tuning.confirm`): the last ``confirm`` fraction of the
  budget (and any budget left once every technique has run out of configurations)
  races the leader, the ``reference`` and the strongest challengers, dropping one worse
  with confidence, and ends tuning early once the leader is separated. With
  ``overtime`` it goes on past the budget while two or more candidates, each proven
  faster than the reference, are left (near-ties that a job then runs for its length).
- **The screen and the judge** (:mod:`autotune.tuning.screen`): a nominee the physics
  ``prior`` rates far below the incumbent, or whose expected improvement under the
  Bayesian technique's GP is under ``judge`` times the best available, does not run.
  With a ``prior`` the calibrated surrogate is also a technique of its own
  (``"prior"``, tried first).
- **One history** (:class:`~autotune.tuning.search.base.Observations`): each result is
  written once; every searcher reads it (plus its own notes of the screened or
  overruled nominees it proposed).
- A configuration's score is the mean of all its trials, weighted by their measurements
  (``tell(measured=...)``: the scored iterations behind the score; default all of the
  trial's iterations). The searchers rank by that mean. A failed trial (``score=None``)
  is never best and its configuration is not proposed again.
- Deterministic for a seed (given the same scores).

Nothing here imports torch.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterable, Mapping, Sequence

from autotune.tuning.bandit import AUCBandit, in_top
from autotune.tuning.confirm import (CONFIRM, MIN_CONFIRMED, OVERTIME_LENGTH, ConfirmPhase,
                                     ConfirmSettings)
from autotune.tuning.noise import NoiseModel
from autotune.tuning.polish import POLISH, PolishPhase, phase_iterations
from autotune.tuning.preload import preload
from autotune.tuning.prior import GP_FIT_AT, Prior, PriorSearch, Surrogate
from autotune.tuning.screen import JUDGE, PRIOR, Screen, ScreenSettings
from autotune.tuning.search import TECHNIQUES, make_searcher
from autotune.tuning.search.base import Key, Observations, Searcher
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trial import Trial

__all__ = ["BanditSettings", "CONFIRM", "ConfirmSettings", "DEFAULT_TECHNIQUES",
           "MIN_CONFIRMED", "PRIOR", "ScreenSettings", "Trial", "LengthSettings",
           "Tuner"]

DEFAULT_TECHNIQUES = ("grid", "pbt", "bayes", "hyperband")
#: The Bayesian technique's trust region among other techniques (:class:`~autotune.
#: tuning.search.bayes.BayesianSearch`'s ``region``): its nominees stay within this share
#: of the streams' and the chunk size's ranges of the best configuration so far, where its
#: GP knows most; the others explore. Alone it searches everywhere.
BAYES_REGION = 0.15
WARM = "warm"  # technique name of warm-start trials
DEFAULT = "default"  # a queued configuration that is the space's default
SEED = "seed"  # a queued configuration that is one of the space's other seeds


@dataclass
class _Pending:
    trial: Trial
    key: Key = field(default=())


@dataclass(frozen=True)
class LengthSettings:
    """How long trials are, in training iterations: ``trial_iterations`` an ordinary one,
    at least ``min_iterations`` any; the ``reference``'s first trial
    ``reference_iterations`` (None: as any trial), so that a speed-up over it has
    :data:`MIN_CONFIRMED` measurements (:meth:`Tuner.enough`)."""

    trial_iterations: int = 2
    min_iterations: int = 2
    reference_iterations: int | None = None

    def __post_init__(self) -> None:
        if self.min_iterations < 1:
            raise ValueError(f"min_iterations must be >= 1, got {self.min_iterations}")
        if self.trial_iterations < self.min_iterations:
            raise ValueError(f"trial_iterations ({self.trial_iterations}) must be >= "
                             f"min_iterations ({self.min_iterations})")
        if self.reference_iterations is not None and self.reference_iterations < self.min_iterations:
            raise ValueError(f"reference_iterations ({self.reference_iterations}) must be >= "
                             f"min_iterations ({self.min_iterations})")


@dataclass(frozen=True)
class BanditSettings:
    """The bandit's sliding ``window`` (training iterations) and exploration ``C``; a
    technique is credited when its trial scores in the best ``credit_quantile`` of all."""

    window: int = 30
    C: float = 0.2
    credit_quantile: float = 0.25

    def __post_init__(self) -> None:
        if not 0 < self.credit_quantile <= 1:
            raise ValueError(f"credit_quantile must be in (0, 1], got {self.credit_quantile}")


SETTINGS = (LengthSettings, BanditSettings, ScreenSettings, ConfirmSettings)


def split_settings(settings: Mapping[str, Any]) -> tuple[Any, ...]:
    """The keyword arguments ``settings`` as one instance of each of :data:`SETTINGS`
    (each field's name is its keyword)."""
    groups = []
    left = dict(settings)
    for kind in SETTINGS:
        names = {f.name for f in fields(kind)}
        groups.append(kind(**{k: left.pop(k) for k in list(left) if k in names}))
    if left:
        raise TypeError(f"Tuner() got unexpected keyword argument(s) {sorted(left)}")
    return tuple(groups)


#: The libraries of the prior's residual GP and of the Bayesian searcher's GP, and all of
#: them (:func:`gp_libraries`).
PRIOR_GP, BAYES_GP = ("sklearn.gaussian_process",), ("skopt", "skopt.learning")
GP_LIBRARIES = PRIOR_GP + BAYES_GP


def gp_libraries(trials: int, prior: bool, bayes_after: int | None) -> list[str]:
    """The libraries of the GPs a search of at most ``trials`` trials can fit, imported in
    the background (:mod:`autotune.tuning.preload`): the ``prior``'s residual GP fits from
    :data:`~autotune.tuning.prior.GP_FIT_AT` scored trials, the Bayesian searcher's after
    its ``bayes_after`` random ones (None: no Bayesian searcher). A shorter search (the few
    trials of a job with little to win) fits none, and would pay the import's CPU for
    nothing."""
    return ((list(PRIOR_GP) if prior and trials > GP_FIT_AT else [])
            + (list(BAYES_GP) if bayes_after is not None and trials > bayes_after else []))


class Tuner:
    """The ensemble under the bandit, with a budget (module docstring).

    ``settings`` are the keyword arguments of the groups of :data:`SETTINGS`:
    :class:`LengthSettings` (``trial_iterations``, ``min_iterations``,
    ``reference_iterations``), :class:`BanditSettings` (``window``, ``C``,
    ``credit_quantile``), :class:`~autotune.tuning.screen.ScreenSettings` (``screen``,
    ``unscreened``, ``judge``) and :class:`~autotune.tuning.confirm.ConfirmSettings`
    (``confirm``, ``confirm_top``, ``overtime``, ``polish``). ``options``: per technique."""

    def __init__(
        self,
        space: SearchSpace,
        budget: int = 100,
        techniques: Sequence[str] = DEFAULT_TECHNIQUES,
        seed: int = 0,
        warm_start: Iterable[Mapping[str, Any]] = (),
        prior: Prior | None = None,
        reference: Mapping[str, Any] | None = None,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        **settings: Any,
    ) -> None:
        if budget < 1:
            raise ValueError(f"budget must be >= 1 iteration, got {budget}")
        lengths, bandit, screen, confirm = split_settings(settings)
        self.techniques = _techniques(techniques, prior, options)
        self.space = space
        self.budget = int(budget)
        self.seed = seed
        self.lengths: LengthSettings = lengths
        self.trial_iterations = int(lengths.trial_iterations)
        self.min_iterations = int(lengths.min_iterations)
        self.credit_quantile = float(bandit.credit_quantile)
        self.surrogate = None if prior is None else Surrogate(space, prior, seed)
        self.reference = None if reference is None else space.validate(reference)
        self._lengthened: set[int] = set()  # trials lengthened for the reference
        self.obs = Observations(space)  # the one history every searcher reads
        self.searchers = self._searchers(dict(options or {}))
        preload(*gp_libraries(self.budget // self.min_iterations, self.surrogate is not None,
                              getattr(self.searchers.get("bayes"), "n_initial_points", None)))
        self.bandit = AUCBandit(self.techniques, window=bandit.window, C=bandit.C)
        self.noise_model = NoiseModel()  # positive scores, for the noise-aware choice
        self.screening = Screen(screen, self.searchers, self.bandit, self.surrogate)
        self.confirming = ConfirmPhase(confirm, self.budget, space, self.obs,
                                       self.noise_model, self.reference)
        self.polishing = PolishPhase(space, seed, self.obs, self.noise_model, phase_iterations(
            confirm.polish, self.budget, self.confirming.budget))
        self.searchers[POLISH] = self.polishing.search  # told every trial, noted if guarded
        self.history: list[Trial] = []
        self.spent = 0
        self._exhausted: set[str] = set()
        self._stalled = False  # nothing left to propose and nothing to re-measure
        self.separated = False  # the confirm phase ended early: the kept one is clearly best
        self._pending: dict[int, _Pending] = {}
        self._next_index = 0
        self._scores: list[float] = []  # every trial's score, for the rank credit
        self._warm: list[tuple[Config, str | None]] = []  # queued, with a label or None
        self.try_first(warm_start)

    def _searchers(self, options: dict[str, Mapping[str, Any]]) -> dict[str, Searcher]:
        """One searcher per technique, each with its own seed, all reading :attr:`obs`."""
        searchers: dict[str, Searcher] = {}
        for name in self.techniques:
            opts = {**_defaults(name, self.techniques, self.surrogate, self.lengths),
                    **options.get(name, {})}
            if name == PRIOR:
                searchers[name] = PriorSearch(self.space, self.seed, self.surrogate, **opts)
            else:
                sub_seed = (self.seed * 1_000_003 + zlib.crc32(name.encode())) % 2**31
                searchers[name] = make_searcher(name, self.space, sub_seed, **opts)
            searchers[name].share(self.obs)
        return searchers

    # ---------------------------------------------------------------- state
    @property
    def remaining(self) -> int:
        """Iterations of the budget not yet handed out."""
        return max(0, self.budget - self.spent)

    @property
    def overtime(self) -> int:
        """Iterations handed out past the budget, to the confirm phase's race (overtime)."""
        return max(0, self.spent - self.budget)

    def _overtime_left(self) -> int:
        """Iterations of the race's overtime not yet handed out (confirm.py)."""
        return max(0, self.budget + self.confirming.overtime - self.spent)

    @property
    def done(self) -> bool:
        """The budget is handed out (or nothing is left to try), the race's overtime
        too, and all trials told."""
        spent = self.remaining <= 0 and not (self._overtime_left()
                                             and self.confirming.contenders())
        return (self._stalled or spent) and not self._pending

    @property
    def screened(self) -> int:
        """Nominees not run: the prior predicted them far slower than the incumbent."""
        return self.screening.screened

    @property
    def overruled(self) -> int:
        """Nominees the judge replaced by its own."""
        return self.screening.overruled

    @property
    def best(self) -> tuple[Config, float] | None:
        """``(config, mean score)`` of the configuration to keep so far (the highest lower
        confidence bound; in the confirm phase, of those confirmed), or ``None`` before
        any score."""
        ranked = self.noise_model.by_bound()
        if not ranked:
            return self.obs.best()  # scores that are not positive: no log model, the mean
        key = self.confirming.kept_from(ranked)[0]
        ref = None if self.reference is None else self.space.key(self.reference)
        if ref is not None and key != ref and self.noise_model.get(ref) is not None:
            # proven faster than the default, or the default stays
            if self.noise_model.bounds(key)[0] <= self.noise_model.bounds(ref)[2]:
                key = ref
        st = self.obs.stats[key]
        return dict(st.config), float(st.mean)

    def bounds(self, config: Mapping[str, Any]) -> tuple[float, float, float] | None:
        """``(lower, mean, upper)`` of ``config``'s score (:meth:`NoiseModel.bounds`)."""
        return self.noise_model.bounds(self.space.key(config))

    def measurements(self, config: Mapping[str, Any]) -> int:
        """How many measurements ``config``'s score rests on (0: none)."""
        return self.noise_model.measurements(self.space.key(config))

    def score_of(self, config: Mapping[str, Any]) -> float | None:
        """Mean score of ``config`` over its trials (``None``: never scored)."""
        return self.obs.mean(self.space.key(config))

    def try_first(self, configs: Iterable[Mapping[str, Any]], technique: str | None = None) -> None:
        """Try ``configs`` next, before any warm-start configuration not yet asked and
        before the techniques: a warm start learnt during the run. ``technique``: their
        label (default: what each is, ``"default"``, ``"seed"`` or ``"warm"``). Each is
        projected into the space; duplicates, and configurations already tried or queued,
        are dropped."""
        seen = {self.space.key(c) for c, _ in self._warm}
        seen |= {p.key for p in self._pending.values()}
        seen |= {self.space.key(r.config) for r in self.history}
        first: list[tuple[Config, str | None]] = []
        for c in configs:
            p = self.space.project(c)
            if p is None:
                continue
            k = self.space.key(p)
            if k not in seen:
                seen.add(k)
                first.append((p, technique))
        self._warm[:0] = first

    # ------------------------------------------------------------- ask/tell
    def _length(self, wanted: int | None) -> int:
        it = max(self.min_iterations, wanted or self.trial_iterations)
        left = self.remaining or self._overtime_left()
        it = min(it, left)
        if 0 < left - it < self.min_iterations:
            it = left
        return it

    def _issue(self, config: Config, technique: str, wanted: int | None) -> Trial:
        key = self.space.key(config)
        longer = self.lengths.reference_iterations
        first_reference = (longer is not None and self.confirming.is_reference(key)
                           and key not in self.obs.stats
                           and all(p.key != key for p in self._pending.values()))
        if first_reference:
            wanted = max(wanted or self.trial_iterations, longer)
        trust = None if self.surrogate is None else round(self.surrogate.weight, 3)
        trial = Trial(self._next_index, dict(config), self._length(wanted), technique, trust)
        if first_reference and trial.iterations > max(self.min_iterations, self.trial_iterations):
            self._lengthened.add(trial.index)
        self._next_index += 1
        self.spent += trial.iterations
        self._pending[trial.index] = _Pending(trial, key)
        return trial

    def enough(self, trial: Trial, measured: int) -> bool:
        """Whether ``trial``, with ``measured`` measurements so far, may end before its
        length: the reference's first trial, lengthened to ``reference_iterations``, once
        it has :data:`MIN_CONFIRMED` measurements. A caller that ends it tells
        ``iterations=`` what ran; the rest goes back to the budget."""
        return trial.index in self._lengthened and measured >= MIN_CONFIRMED

    def ask(self) -> Trial | None:
        """The next trial, or ``None`` once the budget is handed out.

        Order: warm-start configurations; then techniques chosen by the bandit; the
        ``polish`` share of the budget before the last ``confirm`` share steps the kept
        configuration's ordinal knobs; the last (and any budget left when every technique
        has run out of configurations) races the best candidates, with ``overtime`` on
        past the budget."""
        if self._stalled:
            return None
        if self.remaining <= 0:
            config = self.confirming.next_over() if self._overtime_left() else None
            if config is None:
                return None
            return self._issue(config, CONFIRM, OVERTIME_LENGTH * self.trial_iterations)
        if self._warm:
            config, label = self._warm.pop(0)
            return self._issue(config, label or queued_label(self.space, config), None)
        config = self.polishing.ask(self.remaining, self.confirming.budget, self.screening)
        if config is not None:
            return self._issue(config, POLISH, None)
        if self.remaining > self.confirming.budget or not self.obs.scored():
            trial = self._technique_trial()
            if trial is not None:
                return trial
        config = self.confirming.next()
        if config is None:
            self._stalled = True
            self.separated = bool(self.noise_model)
            return None
        self.confirming.started = True
        return self._issue(config, CONFIRM, None)

    def _technique_trial(self) -> Trial | None:
        """A trial of the technique the bandit chooses, through the screen, the judge and
        the guard; ``None`` once every technique has run out of configurations."""
        while True:
            available = [t for t in self.techniques if t not in self._exhausted
                         and (t != PRIOR or self.surrogate.may_propose())]
            if not available:
                return None
            name = self.bandit.select(available)
            config = self.screening.ask(name)
            if config is None:
                self._exhausted.add(name)
                continue
            if self.screening.overrules(name, config, self._exhausted):
                name = JUDGE
                config = self.searchers[JUDGE].ask()
                if config is None:
                    self._exhausted.add(JUDGE)
                    continue
            if self.screening.guards(name, config):
                continue
            return self._issue(config, name, self.searchers[name].iterations())

    def tell(self, trial: Trial, score: float | None, iterations: int | None = None,
             measured: int | None = None) -> Trial:
        """Report the score of ``trial`` (maximised; ``None`` for a failed trial).

        ``iterations``: how many of its iterations the trial ran, when it was cut short
        (e.g. clearly slower than the best so far); the rest go back to the budget.
        Default: all of them. ``measured``: how many measurements the score rests on (a
        session does not score a trial's first iteration, which pays for the switch);
        default ``iterations``. The score weighs that much (at least 1)."""
        used = trial.iterations if iterations is None else int(iterations)
        if not 1 <= used <= trial.iterations:
            raise ValueError(f"trial {trial.index} ran 1..{trial.iterations} iterations, "
                             f"not {iterations}")
        measured = used if measured is None else max(0, min(int(measured), used))
        weight = max(1, measured)
        pending = self._pending.get(trial.index)
        if pending is None or pending.trial is not trial:
            raise ValueError(f"trial {trial.index} was not asked for, or was already told")
        del self._pending[trial.index]
        self.spent -= trial.iterations - used
        before = self.obs.best()
        before_key = None if before is None else self.space.key(before[0])
        key = self.obs.add(trial.config, score, weight=weight)  # the one history
        if score is not None and score > 0:
            self.noise_model.add(pending.key, float(score), weight, measured)
        for searcher in self.searchers.values():
            searcher.told(key, trial.config, score)
        if self.surrogate is not None:
            self.surrogate.tell(trial.config, score, weight=weight)
        after = self.obs.best()
        new_best = (
            score is not None and after is not None
            and self.space.key(after[0]) == pending.key and before_key != pending.key
        )
        if score is not None:
            self._scores.append(float(score))
        if trial.technique in self.bandit.uses:
            success = new_best or in_top(score, self._scores, self.credit_quantile)
            # the window counts training iterations, so a long trial weighs more
            for _ in range(used):
                self.bandit.credit(trial.technique, success)
        trial.end(score, used)
        trial.new_best = new_best
        self.history.append(trial)
        return trial

    def run(self, evaluate: Callable[[Config, int], float | None]) -> tuple[Config, float] | None:
        """Offline loop: ``evaluate(config, iterations) -> score`` until done; the best."""
        while (trial := self.ask()) is not None:
            self.tell(trial, evaluate(trial.config, trial.iterations))
        return self.best


def queued_label(space: SearchSpace, config: Config) -> str:
    """A queued configuration's technique: what it is (the default, a seed), else warm."""
    key = space.key(config)
    if key == space.key(space.default()):
        return DEFAULT
    return SEED if any(key == space.key(c) for c in space.seeds()) else WARM


def _defaults(name: str, techniques: Sequence[str], surrogate: Surrogate | None,
              lengths: LengthSettings) -> dict[str, Any]:
    """The options the Tuner gives technique ``name`` unless its ``options`` say otherwise:
    the structured search the prior's predictions, the Bayesian technique among others its
    trust region (:data:`BAYES_REGION`), Hyperband the trials' lengths."""
    if name == "structured" and surrogate is not None:
        return {"predict": surrogate.predict_config}
    if name == "bayes" and len(techniques) > 1:
        return {"region": BAYES_REGION}
    if name == "hyperband":
        return {"min_iterations": lengths.min_iterations,
                "max_iterations": max(4 * lengths.min_iterations, 2 * lengths.trial_iterations)}
    return {}


def _techniques(techniques: Sequence[str], prior: Prior | None,
                options: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The techniques to run, checked: the prior's first when there is one."""
    techniques = tuple(techniques)
    if prior is not None and PRIOR not in techniques:
        techniques = (PRIOR, *techniques)  # first: the physics' best guess goes first
    if not techniques:
        raise ValueError("at least one technique is needed")
    if PRIOR in techniques and prior is None:
        raise ValueError(f"technique {PRIOR!r} needs a prior (Tuner(prior=...))")
    unknown = [t for t in techniques if t not in TECHNIQUES and t != PRIOR]
    if unknown:
        raise ValueError(f"unknown technique(s) {unknown}; choose from {', '.join(TECHNIQUES)}")
    bad = sorted(set(options or {}) - set(techniques))
    if bad:
        raise ValueError(f"options given for techniques not used: {bad}")
    return techniques
