"""Bayesian optimisation on the encoded space: scikit-optimize's GP, or Optuna.

:class:`BayesianSearch` models the score with scikit-optimize's Gaussian process (the
GP an ``skopt.Optimizer`` would fit, over one dimension per non-constant parameter: the
index of its value, ``Integer`` for ordinal parameters, one-hot ``Categorical`` for the
others; inactive parameters hold their default index, i.e. configurations are
canonical). The GP is fitted on the log of the *mean* score of each distinct
configuration (noisy repeats are averaged, failures count as the worst score seen) and
refitted only when something new was told. The next configuration maximises expected
improvement over the canonical configurations not seen yet: all of them for spaces of
up to ``max_candidates``, else a seeded random subset plus the unseen neighbours of
the best few. So it never proposes an invalid or an already evaluated configuration
while unseen ones remain. The first ``n_initial_points`` are random. With ``region`` the
candidates are those near the best configuration so far (a trust region, after TuRBO,
Eriksson et al., NeurIPS 2019): expected improvement over few points is largest at the
ends of the ranges, where the GP has seen least (issue 63).

:class:`OptunaSearch` puts Optuna's TPE (or GP) sampler behind the same interface:
parameters are suggested define-by-run, so inactive ones are never sampled; foreign
results enter the study with ``add_trial``; a proposal already seen is discarded
(told as failed, which the samplers ignore) and redrawn.
"""

from __future__ import annotations

import copy
import functools
import math
import warnings
from typing import Any, Mapping

import numpy as np

from autotune.tuning.search.base import Key, Searcher, canonical_table
from autotune.tuning.space import Config, SearchSpace


@functools.cache
def _blas() -> Any:
    """One :class:`threadpoolctl.ThreadpoolController` for the process, made at the first
    fit (numpy's and scipy's BLAS are loaded by then). ``threadpool_limits(1)`` made a new
    one at every fit: it scans every shared library the process has loaded, about 10 ms
    a fit beside torch's, on the leader while every rank waits."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


class BayesianSearch(Searcher):
    name = "bayes"

    def __init__(self, space: SearchSpace, seed: int = 0, n_initial_points: int = 5,
                 max_candidates: int = 2000, xi: float = 0.01, gp_restarts: int = 0,
                 refit_every: int = 5, categorical: str = "onehot",
                 region: float | None = None) -> None:
        super().__init__(space, seed)
        if region is not None and not 0 < region <= 1:
            raise ValueError(f"region must be a fraction in (0, 1] or None, got {region}")
        self.region = region
        self.n_initial_points = max(2, n_initial_points)
        self.max_candidates = max_candidates
        self.xi = xi
        self.gp_restarts = gp_restarts
        self._vary = [i for i, p in enumerate(space.params) if len(p.values) > 1]
        if categorical not in ("onehot", "ordinal"):
            raise ValueError(f"categorical must be 'onehot' or 'ordinal', got {categorical!r}")
        self.categorical = categorical
        self._dims_made: list[Any] | None = None  # skopt's dimensions, at the first fit
        self._radix = np.cumprod([1] + [len(p.values) for p in space.params[:-1]]).astype(np.int64)
        self.refit_every = refit_every
        self._gp: tuple[Any, float] | None = None  # the GP fitted on the current data
        self._base_made: tuple[Any, Any] | None = None  # the unfitted GP, its input space
        self._kernel: Any = None  # last optimised kernel, reused between refits
        self._kernel_n = 0
        self._dirty = True
        self._best_ei: float | None = None  # the judge's best EI, until the next tell
        self._xt: dict[int, np.ndarray] = {}  # code -> the GP's input, transformed once

    @property
    def _dims(self) -> list[Any]:
        """skopt's dimensions of the varying parameters, made at the first fit: skopt (and
        scikit-learn under it) is imported only once the GP is needed, so a Tuner that is
        made but never fits (a short search, its first trials) does not pay ~1 s for it
        while every rank waits."""
        if self._dims_made is None:
            from skopt.space import Categorical, Integer

            self._dims_made = [
                Integer(0, len(p.values) - 1, name=p.name)
                if p.ordinal or self.categorical == "ordinal"
                else Categorical(list(range(len(p.values))), name=p.name)
                for p in (self.space.params[i] for i in self._vary)
            ]
        return self._dims_made

    def _told(self, key: Key, config: Mapping, score: float | None) -> None:
        self._dirty = True
        self._best_ei = None

    def _code(self, rows: np.ndarray) -> np.ndarray:
        return rows @ self._radix

    def _data(self) -> tuple[np.ndarray, list[float]]:
        """GP training data: one point per distinct configuration (its encoded row), y =
        -log(mean score) (scores are throughputs: parameters act multiplicatively on
        them), or -mean where some score is not positive."""
        scored = self.obs.scored()
        keys = [k for k, _ in scored]
        means = [st.mean for _, st in scored]
        y = [-math.log(m) for m in means] if self._log_scale() else [-m for m in means]
        if y:
            worst = max(y)
            for k, st in self.obs.stats.items():
                if st.count == 0:
                    keys.append(k)
                    y.append(worst)
        return np.asarray(keys, dtype=np.int64).reshape(len(keys), len(self.space.params)), y

    def _log_scale(self) -> bool:
        """Whether the GP models -log(score) (every mean positive), else -score."""
        return all(st.mean > 0 for _, st in self.obs.scored())

    def _fit(self) -> tuple[Any, float]:
        """scikit-optimize's GP fitted on the current data (cached), and the best
        (least) y it was fitted on.

        The GP's kernel hyperparameters are optimised when the data grew by a quarter
        (at least ``refit_every`` points) since they last were, and reused otherwise,
        which keeps ``ask`` fast at 100 observations. The GP is the one an
        ``skopt.Optimizer`` would fit (``cook_estimator("GP")`` on the normalised
        dimensions), fitted directly: an Optimizer made anew at every fit normalised the
        dimensions again and sampled an acquisition nobody read."""
        if self._gp is not None and not self._dirty:
            return self._gp
        from sklearn.base import clone
        from skopt.learning.gaussian_process.kernels import WhiteKernel

        rows, y = self._data()
        est = clone(self._base()[0])
        reuse = self._kernel is not None and len(rows) < max(
            self._kernel_n + self.refit_every, int(1.25 * self._kernel_n))
        if reuse:
            est.set_params(kernel=copy.deepcopy(self._kernel), optimizer=None)
        with warnings.catch_warnings(), _blas().limit(limits=1):
            warnings.simplefilter("ignore")
            est.fit(self._transformed(rows), y)
        if not reuse:
            # fitted kernel = (constant * matern) + white; skopt zeroes the white part
            # after fitting and keeps the learnt noise level in noise_
            self._kernel = copy.deepcopy(est.kernel_.k1) + WhiteKernel(
                float(est.noise_ or 1e-5), "fixed")
            self._kernel_n = len(rows)
        self._gp, self._dirty = (est, float(np.min(y))), False
        return self._gp

    def _base(self) -> tuple[Any, Any]:
        """The unfitted GP (``cook_estimator("GP")``) and the space of its inputs (the
        normalised dimensions), made once."""
        if self._base_made is None:
            from skopt.space import Space
            from skopt.utils import cook_estimator, normalize_dimensions

            est = cook_estimator("GP", space=self._dims, random_state=self.seed,
                                 n_restarts_optimizer=self.gp_restarts)
            self._base_made = est, Space(normalize_dimensions(self._dims))
        return self._base_made

    def _in_region(self, table: np.ndarray) -> np.ndarray:
        """The rows of ``table`` inside the trust region around the best configuration
        so far: each ordinal parameter that always applies, with more than two values,
        at most ``region`` of its range (at least one step) from the best's value."""
        ranked = self.obs.ranked()
        if self.region is None or not ranked:
            return table
        centre = np.asarray(self.space.encode(ranked[0][1].config))
        keep = np.ones(len(table), dtype=bool)
        for i, p in enumerate(self.space.params):
            if p.ordinal and not p.when and len(p.values) > 2:
                radius = max(1, math.ceil(self.region * (len(p.values) - 1)))
                keep &= np.abs(table[:, i] - centre[i]) <= radius
        return table[keep] if keep.any() else table

    def _candidates(self) -> np.ndarray:
        table = self._in_region(canonical_table(self.space))
        seen_keys = list(self.obs.stats) + list(self.pending)
        seen = self._code(np.asarray(seen_keys, dtype=np.int64)) if seen_keys else np.empty(0, np.int64)
        if len(table) > self.max_candidates:
            gen = np.random.default_rng(self.rng.getrandbits(32))
            sub = table[gen.choice(len(table), self.max_candidates, replace=False)]
            near = [self.space.encode(n) for _, st in self.obs.ranked()[:3]
                    for n in self.space.neighbours(st.config)]
            table = np.concatenate([np.asarray(near, dtype=np.int64).reshape(-1, table.shape[1]), sub])
            _, first = np.unique(self._code(table), return_index=True)
            table = table[np.sort(first)]
        return table[~np.isin(self._code(table), seen)]

    def ask(self) -> Config | None:
        if not self._vary:
            d = self.space.default()
            return None if self.seen(self.space.key(d)) else self._propose(d)
        if len(self.obs.scored()) < self.n_initial_points:
            c = self.random_unseen()
            return None if c is None else self._propose(c)
        cand = self._candidates()
        if len(cand) == 0:
            c = self.random_unseen()  # the subset was all seen; look everywhere
            return None if c is None else self._propose(c)
        ei = self._improvement(cand)
        return self._propose(self.space.decode(cand[int(np.argmax(ei))]))

    # ------------------------------------------------- the Tuner's shared judge
    @property
    def ready(self) -> bool:
        """Whether the GP has enough data to judge (past the random initial points)."""
        return bool(self._vary) and len(self.obs.scored()) >= self.n_initial_points

    def _transformed(self, rows: np.ndarray) -> np.ndarray:
        """The GP's inputs for encoded configurations ``rows`` (the transform of their
        varying parameters). The dimensions never change, so each configuration is
        transformed once: skopt's one-hot transform of the candidates was a fifth of an
        ``ask``."""
        rows = np.asarray(rows)
        codes = [int(c) for c in self._code(rows)]
        new = [i for i, c in enumerate(codes) if c not in self._xt]
        if new:
            xt = self._base()[1].transform(rows[new][:, self._vary].tolist())
            self._xt.update(zip((codes[i] for i in new), xt))
        return np.asarray([self._xt[c] for c in codes])

    def _improvement(self, rows: np.ndarray) -> np.ndarray:
        """Expected improvement of encoded configurations ``rows`` (in -log score)."""
        from skopt.acquisition import gaussian_ei

        gp, y_opt = self._fit()
        Xt = self._transformed(rows)
        with warnings.catch_warnings(), _blas().limit(limits=1):
            warnings.simplefilter("ignore")
            return gaussian_ei(Xt, gp, y_opt=y_opt, xi=self.xi)

    def predicted(self, config: Config) -> float | None:
        """The log score the GP fitted on the trials told so far predicts for ``config``;
        ``None`` when no such fit is at hand. It never fits: reading it changes nothing
        of the search (a benchmark judges the GP's predictions by it)."""
        if self._gp is None or self._dirty or not self._log_scale():
            return None
        row = np.asarray([self.space.encode(self.space.canonical(config))])
        return -float(self._gp[0].predict(self._transformed(row))[0])

    def judge(self, config: Config) -> tuple[float, float, float]:
        """How the GP, fitted on every trial told, rates ``config`` (see the Tuner's
        ``judge``): ``(its expected improvement, the best expected improvement over
        the configurations not seen yet, its predicted score)``. Needs :attr:`ready`."""
        row = np.asarray([self.space.encode(self.space.canonical(config))])
        ei = float(self._improvement(row)[0])
        if self._best_ei is None:  # over the unseen configurations; kept until a tell
            cand = self._candidates()
            self._best_ei = float(np.max(self._improvement(cand))) if len(cand) else 0.0
        best = self._best_ei
        mu = float(self._fit()[0].predict(self._transformed(row))[0])
        return ei, max(best, ei), math.exp(-mu) if self._log_scale() else -mu


class OptunaSearch(Searcher):
    """Optuna's TPE (``sampler="tpe"``) or GP (``sampler="gp"``) sampler, ask/tell."""

    name = "tpe"

    def __init__(self, space: SearchSpace, seed: int = 0, sampler: str = "tpe",
                 n_startup_trials: int = 10, redraws: int = 20) -> None:
        super().__init__(space, seed)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if sampler == "tpe":
            smp = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials)
        elif sampler == "gp":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                smp = optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials)
        else:
            raise ValueError(f"sampler must be 'tpe' or 'gp', got {sampler!r}")
        self.name = "tpe" if sampler == "tpe" else "optuna-gp"
        self._optuna = optuna
        self.study = optuna.create_study(direction="maximize", sampler=smp)
        self.redraws = redraws
        self._dists = {
            p.name: (optuna.distributions.IntDistribution(0, len(p.values) - 1) if p.ordinal
                     else optuna.distributions.CategoricalDistribution(p.values))
            for p in space.params if len(p.values) > 1
        }
        self._trials: dict[Key, list[Any]] = {}  # own proposals awaiting their score

    def _suggest(self, trial: Any) -> Config:
        c: Config = {}
        for p in self.space.params:
            if len(p.values) == 1 or not p.active(c):
                c[p.name] = p.default
            elif p.ordinal:
                c[p.name] = p.values[trial.suggest_int(p.name, 0, len(p.values) - 1)]
            else:
                c[p.name] = trial.suggest_categorical(p.name, p.values)
        return self.space.validate(c)

    def _params(self, config: Config) -> tuple[dict, dict]:
        params, dists = {}, {}
        for p in self.space.active_params(config):
            if p.name in self._dists:
                params[p.name] = p.index(config[p.name]) if p.ordinal else config[p.name]
                dists[p.name] = self._dists[p.name]
        return params, dists

    def ask(self) -> Config | None:
        fail = self._optuna.trial.TrialState.FAIL
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(self.redraws):
                trial = self.study.ask()
                c = self._suggest(trial)
                k = self.space.key(c)
                if not self.seen(k):
                    self._trials.setdefault(k, []).append(trial)
                    return self._propose(c)
                self.study.tell(trial, state=fail)  # a repeat: samplers ignore failures
            c = self.random_unseen()
            if c is None:
                return None
            params, _ = self._params(c)
            self.study.enqueue_trial(params)
            trial = self.study.ask()
            c = self._suggest(trial)
            self._trials.setdefault(self.space.key(c), []).append(trial)
            return self._propose(c)

    def _told(self, key: Key, config: Mapping, score: float | None) -> None:
        """The score (or note) goes into the Optuna study too: the sampler learns from it."""
        c = self.space.validate(config)
        k = key
        optuna = self._optuna
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            waiting = self._trials.get(k)
            if waiting:
                trial = waiting.pop(0)
                if score is None:
                    self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                else:
                    self.study.tell(trial, float(score))
                return
            params, dists = self._params(c)
            if score is None:
                frozen = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                                   params=params, distributions=dists)
            else:
                frozen = optuna.trial.create_trial(value=float(score), params=params,
                                                   distributions=dists)
            self.study.add_trial(frozen)
