"""The one interface every searcher implements, and the bookkeeping they share.

A searcher proposes configurations (``ask``) and learns from scores (``tell``).
Scores are maximised (throughput). ``tell`` may carry a configuration the searcher
did not propose (a warm-start config, another technique's trial) and may repeat a
configuration: measurements are noisy, so every searcher ranks configurations by the
*weighted mean* of all their scores (:class:`Observations`), never by one lucky
sample. A score of ``None`` is a failed trial: that configuration is never proposed
again and never counts as good.

Nothing here imports torch: searchers see configurations only through
:class:`autotune.tuning.space.SearchSpace`.
"""

from __future__ import annotations

import abc
import math
import random
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping

import numpy as np

from autotune.tuning.space import Config, SearchSpace

Key = tuple[int, ...]


@dataclass
class Stat:
    """All scores told for one configuration."""

    config: Config
    total: float = 0.0  # sum of weight * score
    weight: float = 0.0  # sum of weights of successful scores
    count: int = 0  # successful scores
    failures: int = 0

    @property
    def mean(self) -> float | None:
        return self.total / self.weight if self.weight > 0 else None

    def add(self, score: float | None, weight: float) -> None:
        """Count one score (``None``: a failure) of weight ``weight``."""
        if score is None:
            self.failures += 1
            return
        score = float(score)
        if not np.isfinite(score):
            raise ValueError(f"score must be finite or None, got {score}")
        if weight <= 0:
            raise ValueError(f"weight must be > 0, got {weight}")
        self.total += weight * score
        self.weight += weight
        self.count += 1


class _Reading:
    """The questions a searcher asks of what it knows, answered from ``stats`` (every
    configuration told, in the order first told) and ``stat(key)``."""

    stats: dict[Key, Stat]

    def stat(self, key: Key) -> Stat | None:
        return self.stats.get(key)

    def __contains__(self, key: Key) -> bool:
        return self.stat(key) is not None

    def __len__(self) -> int:
        return len(self.stats)

    def mean(self, key: Key) -> float | None:
        st = self.stat(key)
        return None if st is None else st.mean

    def failed(self, key: Key) -> bool:
        """A configuration that failed and never produced a score."""
        st = self.stat(key)
        return st is not None and st.failures > 0 and st.count == 0

    def scored(self) -> list[tuple[Key, Stat]]:
        """Configurations with at least one score, in the order first told."""
        return [(k, s) for k, s in self.stats.items() if s.count > 0]

    def ranked(self) -> list[tuple[Key, Stat]]:
        """Scored configurations, best mean first (ties: first told first)."""
        return sorted(self.scored(), key=lambda ks: -ks[1].mean)  # stable sort

    def best(self) -> tuple[Config, float] | None:
        r = self.ranked()
        return (dict(r[0][1].config), r[0][1].mean) if r else None


class Observations(_Reading):
    """Per-configuration weighted mean of every score told: the history of a tuning run.

    The Tuner owns one and writes each trial's result into it once; every searcher
    reads it through its :class:`Known` (as Optuna's samplers read the study's
    storage). A searcher used alone reads one of its own."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.stats: dict[Key, Stat] = {}
        self.first: dict[Key, int] = {}  # the clock when each configuration was first told
        self.clock = 0  # counts first mentions of a configuration, here or in a note
        self._noted: list[Callable[[Key, float | None, float], None]] = []

    def tick(self) -> int:
        """The next mark of the clock that orders first mentions."""
        self.clock += 1
        return self.clock

    def add(self, config: Mapping, score: float | None, weight: float = 1.0) -> Key:
        c = self.space.validate(config)
        k = self.space.key(c)
        if k not in self.stats:
            self.stats[k] = Stat(c)
            self.first[k] = self.tick()
        self.stats[k].add(score, weight)
        for heard in self._noted:  # readers with notes on k fold the score in too
            heard(k, score, weight)
        return k


class Known(_Reading):
    """What one searcher knows: the shared :class:`Observations` (read, not copied) and
    its own *notes*, predicted scores of its proposals that did not run (screened by the
    prior or overruled by the judge), which only it hears, so that it moves on. A
    configuration with a note has its own :class:`Stat`, the shared scores and the notes
    folded in the order told; every other one is read from the shared history."""

    def __init__(self, shared: Observations) -> None:
        self.shared = shared
        self.space = shared.space
        self._own: dict[Key, Stat] = {}  # configurations with a note
        self._first: dict[Key, int] = {}  # the clock when a note first named each
        shared._noted.append(self._heard)

    def note(self, config: Mapping, score: float) -> Key:
        """A predicted ``score`` for ``config``, heard by this searcher only (weight 1)."""
        c = self.space.validate(config)
        k = self.space.key(c)
        if k not in self._own:
            told = self.shared.stats.get(k)
            self._own[k] = Stat(c) if told is None else replace(told)
            self._first[k] = self.shared.tick()
        self._own[k].add(score, 1.0)
        return k

    def _heard(self, key: Key, score: float | None, weight: float) -> None:
        if key in self._own:
            self._own[key].add(score, weight)

    def stat(self, key: Key) -> Stat | None:
        own = self._own.get(key)
        return own if own is not None else self.shared.stats.get(key)

    @property
    def stats(self) -> dict[Key, Stat]:  # type: ignore[override]
        """Every configuration this searcher heard of, in the order it first did."""
        if not self._own:
            return self.shared.stats
        inf = math.inf

        def first(k: Key) -> float:
            return min(self.shared.first.get(k, inf), self._first.get(k, inf))

        keys = sorted(set(self.shared.stats) | set(self._own), key=first)
        return {k: self.stat(k) for k in keys}  # type: ignore[misc]


class Searcher(abc.ABC):
    """Ask/tell interface of every search technique; scores are maximised."""

    name = "searcher"

    def __init__(self, space: SearchSpace, seed: int = 0) -> None:
        self.space = space
        self.seed = seed
        self.rng = random.Random(seed)
        self.obs = Known(Observations(space))  # a history of its own until it shares one
        self.pending: set[Key] = set()  # proposed, not told yet

    @abc.abstractmethod
    def ask(self) -> Config | None:
        """The next configuration to try (valid, canonical), or ``None`` when this
        searcher has nothing left to propose."""

    def share(self, history: Observations) -> None:
        """Read ``history`` (the Tuner's, which it writes once per trial and then calls
        :meth:`told`) instead of a history of its own. Before anything is told."""
        if len(self.obs):
            raise ValueError(f"{self.name}: share a history before anything is told")
        self.obs = Known(history)

    def tell(self, config: Mapping, score: float | None, weight: float = 1.0) -> None:
        """Record ``score`` (``None``: failed) for ``config``, proposed by this
        searcher or not, in its history. ``weight`` (e.g. the iterations measured)
        weighs the score in the per-configuration mean."""
        self.told(self.obs.shared.add(config, score, weight), config, score)

    def told(self, key: Key, config: Mapping, score: float | None) -> None:
        """``config``'s ``score`` is in the history now: learn from it."""
        self.pending.discard(key)
        self._told(key, config, score)

    def note(self, config: Mapping, score: float) -> None:
        """A predicted ``score`` for ``config``, which did not run: only this searcher
        hears it (:class:`Known`), so that it moves on."""
        key = self.obs.note(config, score)
        self.pending.discard(key)
        self._told(key, config, score)

    def _told(self, key: Key, config: Mapping, score: float | None) -> None:
        """Hook for subclasses, after a score or a note was recorded."""

    def iterations(self) -> int | None:
        """Trial length (training iterations) wanted for the configuration the last
        ``ask`` returned; ``None``: the caller's default."""
        return None

    # ------------------------------------------------------------------ helpers
    def seen(self, key: Key) -> bool:
        """Told (scored or failed) or proposed and pending."""
        return key in self.obs or key in self.pending

    def _propose(self, config: Config) -> Config:
        self.pending.add(self.space.key(config))
        return config

    def random_unseen(self, tries: int = 200) -> Config | None:
        """A random configuration not seen yet; ``None`` when every one is seen."""
        for _ in range(tries):
            c = self.space.sample(self.rng)
            if not self.seen(self.space.key(c)):
                return c
        table = canonical_table(self.space)
        free = [i for i in range(len(table)) if not self.seen(tuple(int(v) for v in table[i]))]
        if not free:
            return None
        return self.space.decode(table[self.rng.choice(free)])


_TABLES: dict[int, np.ndarray] = {}


def canonical_table(space: SearchSpace) -> np.ndarray:
    """Every canonical configuration of ``space`` as rows of encoded ints (cached).

    Enumerates with inactive parameters pinned to their default, which is much faster
    than filtering the full product, and leaves out what :meth:`SearchSpace.canonical`
    maps elsewhere (a codec that encodes no chunk is its lossless twin, issue 63); falls
    back to ``space.all_configs`` when a parameter's condition refers to a later
    parameter.
    """
    sig = space.signature()
    if sig in _TABLES:
        return _TABLES[sig]
    order = {p.name: i for i, p in enumerate(space.params)}
    ordered = all(order.get(parent, len(order)) < order[p.name]
                  for p in space.params for parent, _ in p.when)
    rows: list[list[int]] = []
    # the walk pins inactive parameters already; what canonical maps elsewhere besides is a
    # codec that encodes no chunk, where the space has "none" to map it to
    collapses = "compression" in space.names and "none" in space["compression"].values
    if ordered:
        def walk(i: int, partial: dict, idx: list[int]) -> None:
            if i == len(space.params):
                if not (collapses and space.dead_codec(partial)):
                    rows.append(list(idx))
                return
            p = space.params[i]
            choices: Iterable[int] = range(len(p.values)) if p.active(partial) else (p.index(p.default),)
            for j in choices:
                partial[p.name] = p.values[j]
                idx.append(j)
                walk(i + 1, partial, idx)
                idx.pop()
            del partial[p.name]

        walk(0, {}, [])
    else:  # pragma: no cover - no such space is built today
        rows = [space.encode(c) for c in space.all_configs()]
    table = np.asarray(rows, dtype=np.int64).reshape(len(rows), len(space.params))
    table.setflags(write=False)
    _TABLES[sig] = table
    return table


def space_size(space: SearchSpace) -> int:
    return len(canonical_table(space))


__all__ = ["Key", "Known", "Observations", "Searcher", "Stat", "canonical_table", "space_size"]
