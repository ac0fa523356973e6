"""Structured search: the few categorical choices, and a compass search on the rest.

The space has two kinds of knob. A few are categorical choices that change what the
runtime does (``transport``, ``intra``, ``reduce_root``, the codec family); each choice
of them is a *subspace*. The others are ordinal "resource" knobs along which the speed
is close to unimodal (``chunk_bytes``, ``streams``, ``servers``, a codec's ratio or rank,
``compress_min_bytes``). AutoCCL (NSDI 2025) searches such a space by coordinate descent
inside each categorical subspace; this technique does the same with a *compass search*
(pattern search with a shrinking step, Kolda, Lewis and Torczon, SIAM Review 2003):

- the centre is the best configuration measured so far (by any technique; the mean of
  its trials);
- each active ordinal knob is moved ``step`` indices up and down from the centre, the
  step starting at a quarter of the knob's range, kept per subspace and knob; the knob
  and direction whose move last became the centre go first, at twice the step (a line
  search along what pays);
- when every move of the centre's subspace at the current steps is measured and none is
  better, the steps halve; at steps of one the subspace is done;
- in turns with those moves, an *opener*: the centre with one categorical knob changed
  (its ordinal knobs kept), into a subspace nothing has measured yet; a ``predict``
  function (the calibrated physics prior, where the Tuner has one: an optimistic log
  score) chooses which, else the space's order. The categorical knobs named in ``flips``
  are changed so into every other value, whether that subspace was measured or not (a
  subspace measured elsewhere says little of the centre's ordinal settings in it).

Once every move from the best configuration is measured and its subspace is done, the
compass goes on from the second best, then the third (:data:`CENTRES`); after that ``ask``
returns ``None`` and the bandit gives the trials to the other techniques. The polish phase
(:mod:`autotune.tuning.polish`) runs the compass without openers (``openers=False``)
but with the collective's structure flipped (``flips``), and ``centres`` that rank the
configurations by the noise model's lower bound rather than by their mean. Nothing here
imports torch.
"""

from __future__ import annotations

from typing import Callable, Mapping

from autotune.tuning.search.base import Key, Searcher
from autotune.tuning.space import Config, SearchSpace

#: ``predict(config) -> (mean, std)`` of the log score (:meth:`Surrogate.predict_config`)
Predict = Callable[[Mapping], tuple[float, float]]
CENTRES = 3  # the best configurations a compass may start from, best first


class StructuredSearch(Searcher):
    name = "structured"

    def __init__(self, space: SearchSpace, seed: int = 0, predict: Predict | None = None,
                 kappa: float = 1.0, first_step: float = 0.25, openers: bool = True,
                 centres: Callable[[], list[Config]] | None = None,
                 flips: tuple[str, ...] = ()) -> None:
        super().__init__(space, seed)
        if not 0 < first_step <= 1:
            raise ValueError(f"first_step must be in (0, 1], got {first_step}")
        self.predict = predict
        self.kappa = float(kappa)
        self.first_step = float(first_step)
        self.ordinal = [p for p in space.params if p.ordinal and len(p.values) > 1]
        self.categorical = [p for p in space.params if not p.ordinal and len(p.values) > 1]
        self._steps: dict[tuple, dict[str, int]] = {}  # per subspace, per ordinal knob
        self._centre: Config | None = None  # the centre of the last ask
        self._momentum: tuple[str, int] | None = None  # (knob, signed step) that last paid
        self._open_next = True  # openers and compass moves take turns
        self.openers = openers  # whether to open subspaces nothing has measured
        self.centres = centres  # () -> configurations to centre on, best first
        self.flips = tuple(flips)  # categorical knobs changed from the centre, measured or not

    def subspace(self, config: Mapping) -> tuple:
        """The categorical choices of ``config``: the subspace it is in."""
        return tuple(config[p.name] for p in self.categorical)

    def steps(self, config: Mapping) -> dict[str, int]:
        """The compass's current step, in domain indices, per ordinal knob of ``config``'s
        subspace."""
        return self._steps.setdefault(self.subspace(config), {
            p.name: max(1, round(self.first_step * (len(p.values) - 1))) for p in self.ordinal})

    def _moved(self, p, centre: Config, delta: int) -> Config | None:
        i = p.index(centre[p.name])
        j = min(max(i + delta, 0), len(p.values) - 1)
        return None if j == i else self.space.canonical({**centre, p.name: p.values[j]})

    def _compass(self, centre: Config) -> list[Config]:
        """The ordinal moves of ``centre``: the knob and direction that last paid first,
        at twice its step (a line search), then every active knob up and down a step."""
        steps = self.steps(centre)
        active = [p for p in self.space.active_params(centre) if p in self.ordinal]
        out = []
        if self._momentum is not None:
            name, delta = self._momentum
            out += [m for p in active if p.name == name
                    for m in [self._moved(p, centre, 2 * delta), self._moved(p, centre, delta)]
                    if m is not None]
        for p in active:
            out += [m for d in (-steps[p.name], steps[p.name])
                    if (m := self._moved(p, centre, d)) is not None]
        return out

    def _openers(self, centre: Config) -> list[Config]:
        """``centre`` with one categorical knob changed: into subspaces nothing measured
        (with ``openers``), and to every other value of a ``flips`` knob (measured or not)."""
        opened = ({self.subspace(st.config) for _, st in self.obs.stats.items()}
                  if self.openers else set())  # (the polish phase opens nothing)
        moves = [(p.name, self.space.canonical({**centre, p.name: v}))
                 for p in self.space.active_params(centre) if p in self.categorical
                 for v in p.values if v != centre[p.name]]
        return [m for name, m in moves if name in self.flips
                or (self.openers and self.subspace(m) not in opened)]

    def _untried(self, moves: list[Config]) -> list[Config]:
        out, keys = [], set()
        for c in moves:
            k: Key = self.space.key(c)
            if k not in keys and not self.seen(k):
                keys.add(k)
                out.append(c)
        return out

    def _choose(self, moves: list[Config], ranked: bool) -> Config:
        """The move to spend on: the first, or where ``ranked`` and there is a
        ``predict``, the best optimistic prediction."""
        if not ranked or self.predict is None or len(moves) == 1:
            return moves[0]
        bound = [m + self.kappa * s for m, s in map(self.predict, moves)]
        return moves[max(range(len(moves)), key=lambda i: (bound[i], -i))]

    def _follow(self, centre: Config) -> None:
        """Learn the momentum from how the centre moved since the last ask."""
        last, self._centre = self._centre, centre
        if last is None or self.space.key(last) == self.space.key(centre):
            return
        changed = [p for p in self.ordinal if last[p.name] != centre[p.name]]
        if len(changed) == 1 and self.subspace(last) == self.subspace(centre):
            p = changed[0]
            self._momentum = (p.name, p.index(centre[p.name]) - p.index(last[p.name]))
        else:
            self._momentum = None

    def ask(self) -> Config | None:
        ranked = ([self.space.validate(c) for c in self.centres()[:CENTRES]] if self.centres
                  else [self.space.validate(st.config) for _, st in self.obs.ranked()[:CENTRES]])
        if ranked:
            self._follow(ranked[0])
        for centre in ranked or [self.space.default()]:
            move = self._move(centre)
            if move is not None:
                return self._propose(move)
        return None

    def _move(self, centre: Config) -> Config | None:
        """The next untried configuration around ``centre`` (module docstring)."""
        if not self.seen(self.space.key(centre)):
            return centre
        openers = self._untried(self._openers(centre))
        if openers and self._open_next:
            self._open_next = False
            return self._choose(openers, ranked=True)
        steps = self.steps(centre)
        while True:
            moves = self._untried(self._compass(centre))
            if moves:
                self._open_next = True
                return self._choose(moves, ranked=False)
            wide = [n for n in steps if steps[n] > 1]
            if not wide:
                break
            for n in wide:  # every move measured, none better: a finer compass
                steps[n] = max(1, steps[n] // 2)
        return self._choose(openers, ranked=True) if openers else None


__all__ = ["StructuredSearch"]
