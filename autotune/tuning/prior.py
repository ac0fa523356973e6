"""A physics prior, calibrated online: the surrogate every technique is screened by.

The job is known before the first trial (gradient bytes and tensor count, workers and
machines, servers, link rates): a cost model such as :func:`autotune.sim.simulate` can
predict the throughput of every configuration from that. The prediction is never exact,
so :class:`Surrogate` uses it as the *prior mean* of a Gaussian process (scikit-learn)
fitted to the trials' residuals ``log(score) - log(prior)``:

    log score(c) ~ weight * log prior(c) + a + GP(features(c))

With no trial the surrogate is the prior (up to scale, and its differences shrunk by its
weight, below); each trial corrects it near the configurations measured. It answers three
questions for the Tuner:

* **ordering**: the :class:`PriorSearch` technique proposes the untried configuration with
  the best upper confidence bound, so the first trials go where the physics says;
* **guarding**: whatever its weight, its physics keeps a hopeless proposal from running
  (:mod:`autotune.tuning.guard`);
* **screening**: a proposal of any technique whose *optimistic* prediction is far below
  the incumbent is not run (safe exploration, see :meth:`Surrogate.clearly_worse`).
  Data overrules the prior: the predictions widen as their measured errors grow
  (:attr:`Surrogate.inflation`), and the prior weighs in the surrogate only as far as it
  has ranked the trials rightly (:class:`autotune.tuning.trust.Trust`,
  :attr:`Surrogate.weight`): the predicted differences are scaled by that weight, the
  prior screens only once it has earned :data:`~autotune.tuning.trust.SCREEN`, and the
  Tuner asks its ``prior`` technique for nothing once the weight is under
  :data:`~autotune.tuning.trust.PROPOSE`. A prior that ranks the trials backwards so
  leaves a plain Gaussian process within three or four configurations.

A prior is any callable ``prior(configs) -> predicted scores`` (same direction as the
scores: higher is better; the unit does not matter, the calibration absorbs a constant
factor). Nothing here imports torch.
"""

from __future__ import annotations

import math
import random
import warnings
from typing import Callable, Mapping, Sequence

import numpy as np

from autotune.tuning.search.base import Key, Observations, Searcher, canonical_table
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.trust import PROPOSE, SCREEN, Trust, log_score

Prior = Callable[[Sequence[Config]], Sequence[float]]

POOL = 6000          # configurations the surrogate ranks (all of them in smaller spaces)
POOL_WORK = 10000.0  # the prior's work the pool's first prediction may take (see Surrogate)
BATCH = 25           # configurations per call of the prior (the budgets are checked between)
REFIT_AT = (4, 8, 16, 32)  # measured configurations at which a fittable prior is refitted
GP_FIT_AT = 3        # scored configurations from which the residual GP is fitted
REPREDICT = 400      # after a refit, the pool's best this many are predicted anew
NEIGHBOURS_OF = 5    # large spaces: the pool also holds the neighbours of the best few


class Surrogate:
    """The prior, calibrated on the trials told (see the module docstring).

    What the prior may spend predicting the pool (:data:`POOL_WORK`, at the first
    prediction and at each refit) is counted in its own work units where it keeps a
    count (``prior.work``: :class:`autotune.sim.predict.ModelPrior` counts the simulator's
    machine-independent units, about 10,000 to a CPU-second), else one a configuration.
    Never in seconds: a slow prior ranks fewer configurations, but the same ones on
    every run of a seed, whatever the machine's load."""

    def __init__(self, space: SearchSpace, prior: Prior, seed: int = 0, pool: int = POOL):
        self.space = space
        self.prior = prior
        self.rng = random.Random(seed)
        self._seed = seed
        self.obs = Observations(space)
        self._pool = pool
        self.keys: list[Key] = []
        self._index: dict[Key, int] = {}
        self.log_prior = np.zeros(0)
        self.features = np.zeros((0, 1))
        self._ready = False
        self.failed: str | None = None  # why the prior was dropped
        self._gp = None
        self._offset = 0.0
        self._fitted = 0
        self._z: list[float] = []  # standardised errors of the predictions of told scores
        self.trust = Trust()  # the votes on the prior's ranking of the trials
        self._refitted = 0
        self._tuned_at = 0  # configurations measured when the GP's kernel was last optimised
        self._kernel = None
        self._predicted = 0  # configurations the prior was asked for
        self._floor = 0.0  # the log prediction of a configuration it cannot run (_filled)

    def _spent(self) -> float:
        """The prior's work so far (:class:`Surrogate`)."""
        own = getattr(self.prior, "work", None)
        return float(own) if isinstance(own, (int, float)) else float(self._predicted)

    def _build(self) -> None:
        """Predict the pool with the prior, on first use (so a session can let its prior
        learn from the warm-up iterations before the first prediction): in batches, until
        the pool or :data:`POOL_WORK` of the prior's work is spent."""
        if self._ready:
            return
        self._ready = True
        table = canonical_table(self.space)
        if len(table) > self._pool:
            table = table[np.asarray(self.rng.sample(range(len(table)), self._pool))]
            order = np.arange(len(table))
        else:  # predicted in the seed's random order, so that a budget spent before the
            # end leaves a fair sample of the space, not its first rows (the smallest
            # chunks); kept in the table's order
            order = np.random.default_rng(self._seed).permutation(len(table))
        began = self._spent()
        done, parts = [], []
        for lo in range(0, len(table), BATCH):
            rows = order[lo:lo + BATCH]
            parts.append(self._predict_prior([self.space.decode(table[i]) for i in rows]))
            done.append(rows)
            if self._spent() - began > POOL_WORK:
                break
        taken = np.concatenate(done) if done else np.zeros(0, dtype=int)
        kept = np.argsort(taken, kind="stable")  # back in the table's order
        self.keys = [tuple(int(v) for v in table[i]) for i in taken[kept]]
        self._index = {k: i for i, k in enumerate(self.keys)}
        log_prior = np.concatenate(parts)[kept] if parts else np.zeros(0)
        if np.isfinite(log_prior).any():
            self._floor = float(np.nanmax(log_prior)) + math.log(1e-6)
        self.log_prior = self._filled(log_prior)
        self.features = self._features(np.asarray(self.keys, dtype=float))

    # ------------------------------------------------------------------ inputs
    def _predict_prior(self, configs: Sequence[Config]) -> np.ndarray:
        """log of the prior's predictions, NaN for a configuration it cannot run (no
        positive finite rate; :meth:`_filled`); a prior that fails is dropped (a warning
        that says why, then a flat prior: the GP alone) so that it never stops training."""
        if self.failed is not None:
            return np.zeros(len(configs))
        self._predicted += len(configs)
        try:
            values = np.asarray(self.prior(list(configs)), dtype=float)
            if values.shape != (len(configs),):
                raise ValueError(f"it returned {values.shape} values for {len(configs)} "
                                 "configurations")
        except Exception as e:  # a prior that cannot predict is no prior
            self.failed = f"the prior failed to predict ({e}); going on without it"
            warnings.warn(self.failed, RuntimeWarning, stacklevel=2)
            self.log_prior = np.zeros(len(self.log_prior))
            return np.zeros(len(configs))
        usable = np.isfinite(values) & (values > 0)
        return np.log(np.where(usable, values, np.nan))

    def _filled(self, log_prior: np.ndarray) -> np.ndarray:
        """``log_prior`` with a configuration the prior cannot run predicted a
        million times slower than the pool's best, the same for every such configuration
        (flat where the pool has no usable prediction: e.g. no communication to predict,
        every rate infinite)."""
        return np.where(np.isnan(log_prior), self._floor, log_prior)

    def _features(self, rows: np.ndarray) -> np.ndarray:
        """Each parameter's value index scaled to [0, 1] (ordinal parameters) or one-hot
        columns (the others)."""
        cols = []
        for i, p in enumerate(self.space.params):
            n = len(p.values)
            if n < 2:
                continue
            if p.ordinal:
                cols.append(rows[:, i:i + 1] / (n - 1))
            else:
                cols.append(np.eye(n)[rows[:, i].astype(int)])
        return np.hstack(cols) if cols else np.zeros((len(rows), 1))

    def locate(self, config: Mapping) -> int:
        """The pool index of ``config``, added to the pool if it is not there yet."""
        self._build()
        c = self.space.validate(config)
        k = self.space.key(c)
        i = self._index.get(k)
        if i is None:
            i = len(self.keys)
            self.keys.append(k)
            self._index[k] = i
            self.log_prior = np.append(self.log_prior, self._filled(self._predict_prior([c])))
            self.features = np.vstack([self.features,
                                       self._features(np.asarray([k], dtype=float))])
        return i

    # ------------------------------------------------------------------ learning
    def tell(self, config: Mapping, score: float | None, weight: float = 1.0) -> None:
        """Learn ``score``; first, how far it lies from what was predicted (in predicted
        standard deviations): :attr:`inflation` widens every later prediction when the
        surrogate proves overconfident (a prior far from this job's physics). A prior
        that can learn (one with a ``fit`` method, :class:`autotune.sim.predict.
        ModelPrior`) is refitted to the measurements when :data:`REFIT_AT` of them are in."""
        i = self.locate(config)
        if score is not None and score > 0:
            mean, std = self.predict_config(config)
            self._z.append((math.log(score) - mean) / max(std, 1e-6))
            if self.failed is None and self.obs.mean(self.keys[i]) is None:  # a first score
                self.trust.vote(float(self.log_prior[i]), log_score(score),
                                [(float(self.log_prior[self.locate(st.config)]),
                                  log_score(st.mean)) for _, st in self.obs.scored()
                                 if st.mean > 0])
        self.obs.add(config, score, weight)
        self._gp = None
        scored = self.obs.scored()
        if len(scored) in REFIT_AT and len(scored) != self._refitted:
            self._refitted = len(scored)
            self._refit(scored)

    def _refit(self, scored: list) -> None:
        """Refit the prior's constants to the measured means, then predict anew the
        configurations measured and the pool's best :data:`REPREDICT`, best first, while
        :data:`POOL_WORK` of the prior's work lasts; the rest of the pool moves by the
        median change of those (a refit mostly rescales)."""
        refit = getattr(self.prior, "fit", None)
        if refit is None or self.failed is not None:
            return
        try:
            changed = refit([(st.config, st.mean, st.count) for _, st in scored])
        except Exception as exc:  # a prior that cannot fit keeps its constants
            warnings.warn(f"the prior could not refit its constants ({exc}); keeping them",
                          RuntimeWarning, stacklevel=3)
            return
        if not changed:
            return
        told = [self.locate(st.config) for _, st in scored]
        known = set(told)
        top = [i for i in np.argsort(-self.log_prior, kind="stable")[:REPREDICT]
               if i not in known]
        began, idx, parts = self._spent(), list(told), []
        parts.append(self._predict_prior([self._config(i) for i in told]))
        for lo in range(0, len(top), BATCH):  # the best first, while the budget lasts
            if self._spent() - began > POOL_WORK:
                break
            idx += top[lo:lo + BATCH]
            parts.append(self._predict_prior([self._config(i) for i in top[lo:lo + BATCH]]))
        idx_a, fresh = np.asarray(idx, dtype=int), np.concatenate(parts)
        moved = fresh - self.log_prior[idx_a]
        shift = float(np.median(moved[np.isfinite(moved)])) if np.isfinite(moved).any() else 0.0
        self._floor += shift
        self.log_prior = self.log_prior + shift
        self.log_prior[idx_a] = self._filled(fresh)

    def _config(self, i: int) -> Config:
        return self.space.decode(np.asarray(self.keys[i]))

    @property
    def inflation(self) -> float:
        """Root mean square of the told scores' standardised errors (at least 1, at most
        10; 1 until three scores were told)."""
        z = self._z[3:]  # the first few test the uncalibrated prior, not the surrogate
        if len(z) < 3:
            return 1.0
        return min(10.0, max(1.0, math.sqrt(sum(v * v for v in z) / len(z))))

    def _fit(self) -> None:
        scored = self.obs.scored()
        if self._gp is not None or not scored:
            return
        idx = np.array([self.locate(s.config) for _, s in scored])
        y = (np.log(np.array([max(s.mean, 1e-12) for _, s in scored]))
             - self.weight * self.log_prior[idx])
        self._offset = float(np.median(y))
        self._fitted = len(idx)
        if len(idx) < GP_FIT_AT:
            return
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        # the kernel's hyperparameters are optimised when the data has grown by half
        # since the last time; in between the last ones are kept (a fit is then cheap)
        tune = self._kernel is None or len(idx) >= 1.5 * self._tuned_at
        kernel = self._kernel if not tune else (
            ConstantKernel(0.05, (1e-4, 4.0)) * Matern(length_scale=0.5,
                                                       length_scale_bounds=(0.05, 10.0),
                                                       nu=2.5)
            + WhiteKernel(1e-3, (1e-6, 0.1)))
        gp = GaussianProcessRegressor(kernel, normalize_y=False,
                                      n_restarts_optimizer=1 if tune else 0,
                                      optimizer="fmin_l_bfgs_b" if tune else None,
                                      random_state=self.rng.randrange(2**31))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gp.fit(self.features[idx], y - self._offset)
        if tune:
            self._kernel, self._tuned_at = gp.kernel_, len(idx)
        self._gp = gp

    def predict(self, indices: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, std)`` of log score for pool entries ``indices`` (default all)."""
        self._build()
        self._fit()
        idx = np.arange(len(self.keys)) if indices is None else np.asarray(indices)
        mean = self.weight * self.log_prior[idx] + self._offset
        std = np.full(len(idx), 0.3 if self._fitted else 1.0)
        if self._gp is not None:
            m, s = self._gp.predict(self.features[idx], return_std=True)
            mean, std = mean + m, s
        return mean, std * self.inflation

    def predict_config(self, config: Mapping) -> tuple[float, float]:
        """``(mean, std)`` of the log score of one configuration."""
        i = self.locate(config)
        m, s = self.predict(np.array([i]))
        return float(m[0]), float(s[0])

    @property
    def weight(self) -> float:
        """The prior's weight in the surrogate (:class:`autotune.tuning.trust.Trust`);
        0 once the prior failed (a plain GP)."""
        return 0.0 if self.failed is not None else self.trust.weight

    def may_screen(self) -> bool:
        """Whether the prior has earned the right to keep nominees from running."""
        return self.weight >= SCREEN

    def may_propose(self) -> bool:
        """Whether the prior still proposes trials of its own."""
        return self.weight >= PROPOSE

    def clearly_worse(self, config: Mapping, margin: float) -> bool:
        """Whether even an optimistic prediction (mean + 2 std) of ``config`` is more
        than ``margin`` (a fraction) below the incumbent's measured mean; never while
        the prior has not earned its weight (:meth:`may_screen`)."""
        best = self.obs.best()
        if best is None or self._fitted_after_tell() < 3 or not self.may_screen():
            return False
        m, s = self.predict_config(config)
        return m + 2 * s < math.log(best[1] * (1 - margin))

    def _fitted_after_tell(self) -> int:
        self._fit()
        return self._fitted

    def ranked(self, exclude: Callable[[Key], bool], kappa: float) -> list[Key]:
        """Pool keys by upper confidence bound ``mean + kappa * std``, best first,
        skipping those ``exclude`` rejects (large spaces: the best few configurations'
        one-parameter neighbours join the pool first)."""
        for _, st in self.obs.ranked()[:NEIGHBOURS_OF]:
            for c in self.space.neighbours(st.config):
                self.locate(c)
        mean, std = self.predict()
        ucb = mean + kappa * std
        order = np.argsort(-ucb, kind="stable")
        return [self.keys[i] for i in order if not exclude(self.keys[i])]


class PriorSearch(Searcher):
    """The ``prior`` technique: the untried configuration the calibrated surrogate rates
    best (upper confidence bound with ``kappa``)."""

    name = "prior"

    def __init__(self, space: SearchSpace, seed: int = 0, surrogate: Surrogate | None = None,
                 kappa: float = 1.0):
        super().__init__(space, seed)
        if surrogate is None:
            raise ValueError("the prior technique needs a surrogate (Tuner(prior=...))")
        self.surrogate = surrogate
        self.kappa = float(kappa)

    def ask(self) -> Config | None:
        for key in self.surrogate.ranked(self.seen, self.kappa)[:1]:
            return self._propose(self.space.decode(np.asarray(key)))
        return None
