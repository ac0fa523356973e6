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
- **The kept configuration is not luck** (:attr:`best`). Scores are noisy, and the best
  of fifty single samples is the luckiest, not the fastest. Every configuration's score
  is modelled in log space (relative noise): its weighted mean over its measurements,
  with a standard error ``sigma / sqrt(measurements)``, where ``sigma`` is the noise of
  one measurement pooled over every configuration measured more than once and shrunk
  towards :data:`NOISE_PRIOR` while few are (:meth:`noise`). ``best`` is the
  configuration with the highest *lower confidence bound* (mean - :data:`Z` standard
  errors), so a configuration measured once must beat a well-measured one by more than
  the noise. Once the confirm phase has begun, only configurations measured at least
  :data:`MIN_CONFIRMED` times are ranked (all, while none is but the ``reference``,
  measured that often from its first trial: see below), so a budget that ends
  while the confirm phase still chases a lucky newcomer keeps a confirmed configuration,
  not the newcomer.
- The last ``confirm`` fraction of the budget (default 15 %; and any budget left once
  every technique has run out of configurations) re-measures (technique ``"confirm"``),
  as LUCB does (Kalyanakrishnan et al., ICML 2012): the leader to :data:`MIN_CONFIRMED`
  measurements and a ``reference`` configuration (the session passes the default) to as
  many as the leader, the less measured first, so a speed-up over it compares like with
  like (with ``reference_iterations``, the reference's first trial is that long, so it
  has :data:`MIN_CONFIRMED` measurements before any confirming: :meth:`enough`); then,
  of the ``confirm_top`` strongest challengers, the one with the highest
  upper bound while it overlaps the leader's lower bound (or the leader, when it is the
  less measured of the two), bounds of :data:`Z_SEPARATED` standard errors. Once no
  challenger overlaps, the leader is *separated* and tuning ends early: the rest of the
  budget is not spent.
- **A shared judge** (``judge``, default :data:`JUDGE_SHARE`): the Bayesian technique's
  GP, fitted on every trial, judges every other technique's nominee; one whose expected
  improvement is under ``judge`` times the best available is replaced by the GP's own
  nominee, and its technique is told the GP's prediction and credited a use without
  success, so the bandit learns from every nominee (:meth:`_overruled`). The GP's
  nominee rests on measurements and is not screened by a ``prior``.
- With a ``prior`` (a physics model of the job, see :mod:`autotune.tuning.prior`) the
  calibrated surrogate is a technique of its own (``"prior"``, tried first) and screens
  every other technique's proposals: one predicted, even optimistically, more than
  ``screen`` below the incumbent is not run (:attr:`screened` counts them), except an
  ``unscreened`` share (a quarter) of the proposals, and nothing once the prior's ranking
  is shown wrong (:meth:`autotune.tuning.prior.Surrogate.trusted`); from then on the
  ``"prior"`` technique is not asked either.
- A configuration's score is the mean of all its trials, weighted by their measurements
  (``tell(measured=...)``: the scored iterations behind the score; default all of the
  trial's iterations). The searchers rank by that mean. A failed trial (``score=None``)
  is never best and its configuration is not proposed again.
- Deterministic for a seed (given the same scores).

Nothing here imports torch.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from autotune.speedup import MIN_ITERATIONS
from autotune.tuning.bandit import AUCBandit
from autotune.tuning.search import TECHNIQUES, make_searcher
from autotune.tuning.search.base import Key, Observations, Searcher
from autotune.tuning.prior import Prior, PriorSearch, Surrogate
from autotune.tuning.space import Config, SearchSpace

DEFAULT_TECHNIQUES = ("grid", "pbt", "bayes", "hyperband")
PRIOR = "prior"  # technique name of the calibrated physics prior (with Tuner(prior=...))
WARM = "warm"  # technique name of warm-start trials
DEFAULT = "default"  # a queued configuration that is the space's default
SEED = "seed"  # a queued configuration that is one of the space's other seeds
CONFIRM = "confirm"  # technique name of re-measurements of the best candidates
JUDGE = "bayes"  # the technique whose model judges every other technique's nominee
JUDGE_SHARE = 0.3  # a nominee runs if its expected improvement is this share of the best's
MIN_CONFIRMED = MIN_ITERATIONS  # measurements of the kept one and the reference: a headline's
NOISE_PRIOR = 0.05  # relative noise of one measurement assumed before any is repeated
NOISE_PRIOR_WEIGHT = 2.0  # ... worth this many degrees of freedom of measured noise
Z = 1.0  # standard errors in the lower bound that chooses the kept configuration
Z_SEPARATED = 2.0  # ... in the bounds that must not overlap for confirming to end early


@dataclass(frozen=True)
class Trial:
    """One configuration to run for ``iterations`` training iterations."""

    index: int
    config: Config
    iterations: int
    technique: str


@dataclass
class TrialRecord:
    """What happened to one trial: the one record type of the Tuner's history, the trial
    driver's, the session's and the store's. ``score`` is ``None`` for a failed trial
    (``error`` says why); ``iterations`` is how many of its iterations ran (a trial cut
    short gives the rest back to the budget)."""

    index: int
    technique: str
    config: Config
    iterations: int
    score: float | None
    error: str | None = None
    wall_time: float = 0.0
    switch_s: float | None = None  # the session: its first, unscored iteration's time
    new_best: bool = False         # the Tuner: it made its configuration the best so far
    throughput: float | None = None  # scored by goodput: the speed alone (score = x eff.)
    efficiency: float | None = None  # scored by goodput: its statistical efficiency


@dataclass
class _Pending:
    trial: Trial
    key: Key = field(default=())


@dataclass
class _LogScores:
    """One configuration's measurements in log space: weighted sums for mean and spread."""

    weight: float = 0.0
    total: float = 0.0  # sum of weight * log(score)
    total_sq: float = 0.0  # sum of weight * log(score)^2
    count: int = 0  # trials
    measured: int = 0  # measurements (a trial scored on its switch alone adds none)

    def add(self, score: float, weight: float, measured: int) -> None:
        y = math.log(score)
        self.measured += measured
        self.weight += weight
        self.total += weight * y
        self.total_sq += weight * y * y
        self.count += 1

    @property
    def mean(self) -> float:
        return self.total / self.weight

    @property
    def squares(self) -> float:
        """Weighted sum of squared deviations from the mean: ``(count - 1) sigma^2`` in
        expectation when a trial's variance is ``sigma^2 / weight``."""
        return max(0.0, self.total_sq - self.total * self.total / self.weight)


class Tuner:
    def __init__(
        self,
        space: SearchSpace,
        budget: int = 100,
        techniques: Sequence[str] = DEFAULT_TECHNIQUES,
        seed: int = 0,
        warm_start: Iterable[Mapping[str, Any]] = (),
        trial_iterations: int = 2,
        min_iterations: int = 2,
        window: int = 30,
        C: float = 0.2,
        confirm: float = 0.15,
        confirm_top: int = 3,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        prior: Prior | None = None,
        reference: Mapping[str, Any] | None = None,
        reference_iterations: int | None = None,
        screen: float = 0.3,
        credit_quantile: float = 0.25,
        unscreened: float = 0.25,
        judge: float = JUDGE_SHARE,
    ) -> None:
        if budget < 1:
            raise ValueError(f"budget must be >= 1 iteration, got {budget}")
        if min_iterations < 1:
            raise ValueError(f"min_iterations must be >= 1, got {min_iterations}")
        if not 0 <= confirm < 1:
            raise ValueError(f"confirm must be a fraction in [0, 1), got {confirm}")
        if trial_iterations < min_iterations:
            raise ValueError(
                f"trial_iterations ({trial_iterations}) must be >= min_iterations ({min_iterations})"
            )
        techniques = tuple(techniques)
        if prior is not None and PRIOR not in techniques:
            techniques = (PRIOR, *techniques)  # first: the physics' best guess goes first
        if not techniques:
            raise ValueError("at least one technique is needed")
        if PRIOR in techniques and prior is None:
            raise ValueError(f"technique {PRIOR!r} needs a prior (Tuner(prior=...))")
        if not 0 <= screen < 1:
            raise ValueError(f"screen must be a fraction in [0, 1), got {screen}")
        if not 0 <= unscreened <= 1:
            raise ValueError(f"unscreened must be a fraction in [0, 1], got {unscreened}")
        if not 0 <= judge <= 1:
            raise ValueError(f"judge must be a fraction in [0, 1], got {judge}")
        if not 0 < credit_quantile <= 1:
            raise ValueError(f"credit_quantile must be in (0, 1], got {credit_quantile}")
        if reference_iterations is not None and reference_iterations < min_iterations:
            raise ValueError(f"reference_iterations ({reference_iterations}) must be >= "
                             f"min_iterations ({min_iterations})")
        unknown = [t for t in techniques if t not in TECHNIQUES and t != PRIOR]
        if unknown:
            raise ValueError(f"unknown technique(s) {unknown}; choose from {', '.join(TECHNIQUES)}")
        options = dict(options or {})
        bad = sorted(set(options) - set(techniques))
        if bad:
            raise ValueError(f"options given for techniques not used: {bad}")
        self.space = space
        self.budget = int(budget)
        self.seed = seed
        self.trial_iterations = int(trial_iterations)
        self.min_iterations = int(min_iterations)
        self.confirm_budget = int(round(confirm * self.budget))
        self.confirm_top = max(1, int(confirm_top))
        self.techniques = techniques
        self.screen = float(screen)
        self.credit_quantile = float(credit_quantile)
        self.screened = 0  # proposals not run: predicted far slower than the incumbent
        self.unscreened = float(unscreened)
        self._proposals = 0  # techniques' proposals judged, for the unscreened share
        self.judge = float(judge) if JUDGE in techniques else 0.0
        self.overruled = 0  # nominees the judge replaced by its own
        self._confirming = False  # the confirm phase has begun (best: confirmed ones only)
        self.surrogate = None if prior is None else Surrogate(space, prior, seed)
        self.reference = None if reference is None else space.validate(reference)
        # the reference's first trial lasts this long (None: as any trial), so that a
        # speed-up over it has enough measurements (:meth:`enough`)
        self.reference_iterations = (None if reference_iterations is None
                                     else int(reference_iterations))
        self._lengthened: set[int] = set()  # trials lengthened for the reference
        self.searchers: dict[str, Searcher] = {}
        for name in techniques:
            opts = dict(options.get(name, {}))
            if name == PRIOR:
                self.searchers[name] = PriorSearch(space, seed, self.surrogate, **opts)
                continue
            if name == "hyperband":
                opts.setdefault("min_iterations", self.min_iterations)
                opts.setdefault("max_iterations", max(4 * self.min_iterations, 2 * self.trial_iterations))
            sub_seed = (seed * 1_000_003 + zlib.crc32(name.encode())) % 2**31
            self.searchers[name] = make_searcher(name, space, sub_seed, **opts)
        self.bandit = AUCBandit(techniques, window=window, C=C)
        self.obs = Observations(space)
        self.history: list[TrialRecord] = []
        self.spent = 0
        self._exhausted: set[str] = set()
        self._stalled = False  # nothing left to propose and nothing to re-measure
        self.separated = False  # the confirm phase ended early: the kept one is clearly best
        self._pending: dict[int, _Pending] = {}
        self._next_index = 0
        self._scores: list[float] = []  # every trial's score, for the rank credit
        self._logs: dict[Key, _LogScores] = {}  # positive scores, for the noise-aware choice
        self._warm: list[tuple[Config, str | None]] = []  # queued, with a label or None
        self.try_first(warm_start)

    # ---------------------------------------------------------------- state
    @property
    def remaining(self) -> int:
        """Iterations of the budget not yet handed out."""
        return self.budget - self.spent

    @property
    def done(self) -> bool:
        """The budget is handed out (or nothing is left to try) and all trials told."""
        return (self.remaining <= 0 or self._stalled) and not self._pending

    @property
    def best(self) -> tuple[Config, float] | None:
        """``(config, mean score)`` of the configuration to keep so far (the highest lower
        confidence bound; in the confirm phase, of those confirmed: module docstring), or
        ``None`` before any score."""
        ranked = self._by_bound()
        if not ranked:
            return self.obs.best()  # scores that are not positive: no log model, the mean
        if self._confirming:
            confirmed = [k for k in ranked if self._logs[k].measured >= MIN_CONFIRMED]
            # the reference, measured long from its first trial, is not alone "confirmed"
            if any(self.reference is None or k != self.space.key(self.reference)
                   for k in confirmed):
                ranked = confirmed
        st = self.obs.stats[ranked[0]]
        return dict(st.config), float(st.mean)

    def noise(self) -> float:
        """The relative noise of one measurement (standard deviation of a log score): the
        pooled spread of repeated configurations, shrunk towards :data:`NOISE_PRIOR`."""
        squares = sum(ls.squares for ls in self._logs.values())
        dof = sum(ls.count - 1 for ls in self._logs.values())
        var = (squares + NOISE_PRIOR_WEIGHT * NOISE_PRIOR ** 2) / (dof + NOISE_PRIOR_WEIGHT)
        return math.sqrt(var)

    def bounds(self, config: Mapping[str, Any]) -> tuple[float, float, float] | None:
        """``(lower, mean, upper)`` of ``config``'s score (``Z`` standard errors of the log
        mean), or ``None`` when it has no positive score."""
        ls = self._logs.get(self.space.key(config))
        if ls is None:
            return None
        half = Z * self.noise() / math.sqrt(ls.weight)
        return math.exp(ls.mean - half), math.exp(ls.mean), math.exp(ls.mean + half)

    def measurements(self, config: Mapping[str, Any]) -> int:
        """How many measurements ``config``'s score rests on (0: none)."""
        ls = self._logs.get(self.space.key(config))
        return 0 if ls is None else ls.measured

    def _by_bound(self) -> list[Key]:
        """Configurations with positive scores, highest lower bound first (ties: first
        told first)."""
        half = Z * self.noise()
        return sorted(self._logs, key=lambda k: -(self._logs[k].mean
                                                   - half / math.sqrt(self._logs[k].weight)))

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
        left = self.remaining
        it = min(it, left)
        if 0 < left - it < self.min_iterations:
            it = left
        return it

    def _issue(self, config: Config, technique: str, wanted: int | None) -> Trial:
        key = self.space.key(config)
        first_reference = (self.reference_iterations is not None and self.reference is not None
                           and key == self.space.key(self.reference)
                           and key not in self.obs.stats
                           and all(p.key != key for p in self._pending.values()))
        if first_reference:
            wanted = max(wanted or self.trial_iterations, self.reference_iterations)
        trial = Trial(self._next_index, dict(config), self._length(wanted), technique)
        if first_reference and trial.iterations > max(self.min_iterations, self.trial_iterations):
            self._lengthened.add(trial.index)
        self._next_index += 1
        self.spent += trial.iterations
        self._pending[trial.index] = _Pending(trial, self.space.key(config))
        return trial

    def enough(self, trial: Trial, measured: int) -> bool:
        """Whether ``trial``, with ``measured`` measurements so far, may end before its
        length: the reference's first trial, lengthened to ``reference_iterations`` (one
        more than :data:`MIN_CONFIRMED` where the caller does not score a switch), once it
        has :data:`MIN_CONFIRMED` measurements (the caller did not need its switch
        iteration). A caller that ends it tells ``iterations=`` what ran; the rest goes
        back to the budget."""
        return trial.index in self._lengthened and measured >= MIN_CONFIRMED

    def ask(self) -> Trial | None:
        """The next trial, or ``None`` once the budget is handed out.

        Order: warm-start configurations; then techniques chosen by the bandit; the
        last ``confirm`` fraction of the budget (and any budget left when every
        technique has run out of configurations) re-measures the best candidates."""
        if self.remaining <= 0 or self._stalled:
            return None
        if self._warm:
            config, label = self._warm.pop(0)
            return self._issue(config, label or self._queued_label(config), None)
        if self.remaining > self.confirm_budget or not self.obs.scored():
            while True:
                available = [t for t in self.techniques if t not in self._exhausted
                             and (t != PRIOR or self.surrogate.trusted())]
                if not available:
                    break
                name = self.bandit.select(available)
                searcher = self.searchers[name]
                config = self._screened_ask(name, searcher)
                if config is None:
                    self._exhausted.add(name)
                    continue
                if self._overruled(name, config):
                    name, searcher = JUDGE, self.searchers[JUDGE]
                    config = searcher.ask()
                    if config is None:
                        self._exhausted.add(JUDGE)
                        continue
                return self._issue(config, name, searcher.iterations())
        config = self._confirm_candidate()
        if config is None:
            self._stalled = True
            self.separated = bool(self._logs)
            return None
        self._confirming = True
        return self._issue(config, CONFIRM, None)

    def _queued_label(self, config: Config) -> str:
        """A queued configuration's technique: what it is (the default, a seed), else warm."""
        key = self.space.key(config)
        if key == self.space.key(self.space.default()):
            return DEFAULT
        return SEED if any(key == self.space.key(c) for c in self.space.seeds()) else WARM

    def _screened_ask(self, name: str, searcher: Searcher, tries: int = 20) -> Config | None:
        """``searcher``'s next proposal that the surrogate does not rate clearly worse
        than the incumbent (by more than ``screen``, even optimistically). A screened
        proposal is told to its searcher as the surrogate's prediction, so it moves on;
        after ``tries`` screened proposals the next one runs whatever its prediction, and
        an ``unscreened`` share of proposals is never screened: the prior must not keep
        the search from every region where it is wrong."""
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
            searcher.tell(config, float(math.exp(mean)))
        return searcher.ask()

    def _overruled(self, name: str, config: Config) -> bool:
        """Whether the shared judge (the Bayesian technique's GP, fitted on every trial)
        replaces ``name``'s nominee ``config`` by its own: when the nominee's expected
        improvement is below ``judge`` times the best available. The overruled technique
        is credited a use without success (a dense reward: the bandit learns from every
        nominee, not only from the rare new best) and told the GP's prediction, so it
        moves on."""
        if (not self.judge or name in (JUDGE, PRIOR) or JUDGE in self._exhausted
                or not self.searchers[JUDGE].ready):
            return False
        ei, best, predicted = self.searchers[JUDGE].judge(config)
        if best <= 0 or ei >= self.judge * best:
            return False
        self.overruled += 1
        self.searchers[name].tell(config, predicted)
        self.bandit.credit(name, False)
        return True

    def _confirm_candidate(self) -> Config | None:
        """What the confirm phase measures next (module docstring, LUCB): ``None`` when
        nothing has a score yet, or when the leader is confirmed and separated."""
        ranked = self._by_bound()
        if not ranked:
            ranked_mean = self.obs.ranked()  # no positive score: the least measured best
            return dict(ranked_mean[0][1].config) if ranked_mean else None
        leader = self._logs[ranked[0]]
        lead = dict(self.obs.stats[ranked[0]].config)
        ref: _LogScores | None = None
        if self.reference is not None:
            ref_key = self.space.key(self.reference)
            if ref_key not in self.obs.stats:
                return dict(self.reference)  # never measured (a failed one is not retried)
            if ref_key != ranked[0]:
                ref = self._logs.get(ref_key)
        # the leader and the reference, the less measured first (so a short budget leaves
        # them even): the leader to MIN_CONFIRMED, the reference as long as the leader
        if ref is not None and ref.measured < leader.measured:
            return dict(self.reference)
        if leader.measured < MIN_CONFIRMED:
            return lead
        sigma = self.noise()

        def upper(k: Key) -> float:
            return self._logs[k].mean + Z_SEPARATED * sigma / math.sqrt(self._logs[k].weight)

        lower = leader.mean - Z_SEPARATED * sigma / math.sqrt(leader.weight)
        challengers = sorted(ranked[1:], key=upper, reverse=True)[: self.confirm_top]
        open_ = [k for k in challengers if upper(k) > lower]
        if not open_:
            return None  # separated: the leader is kept
        challenger = open_[0]
        if self._logs[challenger].measured < leader.measured:
            return dict(self.obs.stats[challenger].config)
        return lead

    def tell(self, trial: Trial, score: float | None, iterations: int | None = None,
             measured: int | None = None) -> TrialRecord:
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
        pending = self._pending.pop(trial.index, None)
        if pending is None or pending.trial != trial:
            raise ValueError(f"trial {trial.index} was not asked for, or was already told")
        self.spent -= trial.iterations - used
        before = self.obs.best()
        before_key = None if before is None else self.space.key(before[0])
        self.obs.add(trial.config, score, weight=weight)
        if score is not None and score > 0:
            self._logs.setdefault(pending.key, _LogScores()).add(float(score), weight, measured)
        for searcher in self.searchers.values():
            searcher.tell(trial.config, score, weight=weight)
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
            success = new_best or self._top(score)
            # the window counts training iterations, so a long trial weighs more
            for _ in range(used):
                self.bandit.credit(trial.technique, success)
        record = TrialRecord(trial.index, trial.technique, dict(trial.config), used,
                             None if score is None else float(score), new_best=new_best)
        self.history.append(record)
        return record

    def _top(self, score: float | None) -> bool:
        """Whether ``score`` ranks in the best ``credit_quantile`` of every trial's score so
        far: a credit that carries information long before a technique finds a new best."""
        if score is None or len(self._scores) < 2:
            return False
        better = sum(1 for s in self._scores if s > score)
        return better < self.credit_quantile * len(self._scores)

    def run(self, evaluate: Callable[[Config, int], float | None]) -> tuple[Config, float] | None:
        """Offline loop: ``evaluate(config, iterations) -> score`` until done; the best."""
        while (trial := self.ask()) is not None:
            self.tell(trial, evaluate(trial.config, trial.iterations))
        return self.best
