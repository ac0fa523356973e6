"""Hyperband (Li et al., JMLR 2017) with training iterations as the resource.

A trial's score is a throughput measured over some training iterations; a short trial
is a cheap but noisy measurement, a long one is accurate. Hyperband runs brackets of
successive halving: bracket ``s`` starts ``n = ceil((s_max+1)/(s+1) * eta**s)`` new
random configurations at ``r = R * eta**-s`` iterations each, then keeps the best
``1/eta`` of them (by mean score over all their measurements, anyone's) and measures
those again ``eta`` times longer, until one survivor gets ``R`` iterations. Brackets go
``s_max, s_max-1, ..., 0`` and then start over. ``R = max_iterations``;
``s_max = floor(log_eta(R / min_iterations))``.

New configurations are drawn at random (Li et al.), or — with ``sampler="tpe"`` —
from Optuna's TPE fitted on every result told, as in BOHB (Falkner et al., 2018), so
that in a small budget the many short trials are not spent on hopeless corners.
They are drawn one at a time, when asked for, so the model sees the latest results.

:meth:`iterations` tells the caller how long the trial of the config just asked for
must be. A rung whose trials are still pending when the next one is needed is
promoted with what is known (an untold config ranks last), so ``ask`` never blocks.
"""

from __future__ import annotations

import math
from typing import Mapping

from autotune.tuning.search.base import Key, Observations, Searcher
from autotune.tuning.space import Config, SearchSpace


class Hyperband(Searcher):
    name = "hyperband"

    def __init__(self, space: SearchSpace, seed: int = 0, min_iterations: int = 2,
                 max_iterations: int = 8, eta: int = 2, sampler: str = "random") -> None:
        super().__init__(space, seed)
        if sampler not in ("random", "tpe"):
            raise ValueError(f"sampler must be 'random' or 'tpe', got {sampler!r}")
        self.sampler = sampler
        self._model: Searcher | None = None
        if sampler == "tpe":  # BOHB-style: new configs from a model of all results
            from autotune.tuning.search.bayes import OptunaSearch

            self._model = OptunaSearch(space, seed, sampler="tpe")
            self._model.share(self.obs.shared)
        if min_iterations < 1 or max_iterations < min_iterations:
            raise ValueError(
                f"need 1 <= min_iterations <= max_iterations, got {min_iterations}, {max_iterations}"
            )
        if eta < 2:
            raise ValueError(f"eta must be >= 2, got {eta}")
        self.min_iterations = min_iterations
        self.max_iterations = max_iterations
        self.eta = eta
        self.s_max = int(math.floor(math.log(max_iterations / min_iterations) / math.log(eta) + 1e-9))
        self._next_s = self.s_max
        self._s = -1  # current bracket
        self._i = 0  # current rung in the bracket
        self._n = 0  # configs the bracket started with
        self._rung: list[Key] = []  # configs of the current rung
        # of the current rung, not yet asked; None: a new config, drawn when asked
        self._queue: list[Config | None] = []
        self._rung_iterations = min_iterations
        self._last_iterations: int | None = None

    # ------------------------------------------------------------------ schedule
    def bracket_plan(self, s: int) -> list[tuple[int, int]]:
        """``(configs, iterations)`` per rung of bracket ``s`` (Li et al., Alg. 1)."""
        n = math.ceil((self.s_max + 1) / (s + 1) * self.eta ** s)
        r = self.max_iterations / self.eta ** s
        plan = []
        for i in range(s + 1):
            n_i = math.floor(n / self.eta ** i)
            r_i = min(self.max_iterations, max(self.min_iterations, round(r * self.eta ** i)))
            plan.append((n_i, r_i))
        return plan

    def _start_bracket(self) -> bool:
        if self._model is None and self.random_unseen() is None:
            return False  # every configuration seen: nothing new to start with
        s = self._next_s
        self._next_s = self.s_max if s == 0 else s - 1
        n, r = self.bracket_plan(s)[0]
        self._s, self._i, self._n = s, 0, n
        self._rung = []
        self._queue = [None] * n  # drawn one at a time, so a model sees the latest data
        self._rung_iterations = r
        return True

    def _new_config(self) -> Config | None:
        if self._model is not None:
            c = self._model.ask()
            if c is not None and not self.seen(self.space.key(c)):
                return c
        return self.random_unseen()

    def _promote(self) -> bool:
        """Move the survivors of the current rung to the next one; False at the end."""
        if self._s < 0 or self._i >= self._s:
            return False
        plan = self.bracket_plan(self._s)
        keep = max(1, math.floor(plan[self._i][0] / self.eta))
        ranked = sorted(
            self._rung,
            key=lambda k: -self.obs.mean(k) if self.obs.mean(k) is not None else math.inf,
        )
        survivors = [k for k in ranked[:keep] if self.obs.mean(k) is not None]
        if not survivors:
            return False
        self._i += 1
        self._rung = survivors
        self._queue = [self.space.decode(k) for k in survivors]
        self._rung_iterations = plan[self._i][1]
        return True

    # ----------------------------------------------------------------- interface
    def ask(self) -> Config | None:
        for _ in range(2 * (self.s_max + 2)):
            while self._queue:
                c = self._queue.pop(0)
                if c is None:
                    c = self._new_config()
                    if c is None:
                        self._queue.clear()
                        break
                    self._rung.append(self.space.key(self._propose(c)))
                elif self.obs.failed(self.space.key(c)):
                    continue
                self._last_iterations = self._rung_iterations
                return c
            if not self._promote() and not self._start_bracket():
                self._last_iterations = None
                return None
        return None  # pragma: no cover - every pass either returns or advances

    def iterations(self) -> int | None:
        return self._last_iterations

    # the BOHB model reads the same history and hears the same notes
    def share(self, history: Observations) -> None:
        super().share(history)
        if self._model is not None:
            self._model.share(history)

    def told(self, key: Key, config: Mapping, score: float | None) -> None:
        super().told(key, config, score)
        if self._model is not None:
            self._model.told(key, config, score)

    def note(self, config: Mapping, score: float) -> None:
        super().note(config, score)
        if self._model is not None:
            self._model.note(config, score)
