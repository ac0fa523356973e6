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
import random
from dataclasses import dataclass
from typing import Iterable, Mapping

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


class Observations:
    """Per-configuration weighted mean of every score told (own and foreign)."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.stats: dict[Key, Stat] = {}

    def add(self, config: Mapping, score: float | None, weight: float = 1.0) -> Key:
        c = self.space.validate(config)
        k = self.space.key(c)
        st = self.stats.setdefault(k, Stat(c))
        if score is None:
            st.failures += 1
        else:
            score = float(score)
            if not np.isfinite(score):
                raise ValueError(f"score must be finite or None, got {score}")
            if weight <= 0:
                raise ValueError(f"weight must be > 0, got {weight}")
            st.total += weight * score
            st.weight += weight
            st.count += 1
        return k

    def __contains__(self, key: Key) -> bool:
        return key in self.stats

    def __len__(self) -> int:
        return len(self.stats)

    def mean(self, key: Key) -> float | None:
        st = self.stats.get(key)
        return None if st is None else st.mean

    def failed(self, key: Key) -> bool:
        """A configuration that failed and never produced a score."""
        st = self.stats.get(key)
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


class Searcher(abc.ABC):
    """Ask/tell interface of every search technique; scores are maximised."""

    name = "searcher"

    def __init__(self, space: SearchSpace, seed: int = 0) -> None:
        self.space = space
        self.seed = seed
        self.rng = random.Random(seed)
        self.obs = Observations(space)
        self.pending: set[Key] = set()  # proposed, not told yet

    @abc.abstractmethod
    def ask(self) -> Config | None:
        """The next configuration to try (valid, canonical), or ``None`` when this
        searcher has nothing left to propose."""

    def tell(self, config: Mapping, score: float | None, weight: float = 1.0) -> None:
        """Record ``score`` (``None``: failed) for ``config``, proposed by this
        searcher or not. ``weight`` (e.g. the iterations measured) weighs the score
        in the per-configuration mean."""
        k = self.obs.add(config, score, weight)
        self.pending.discard(k)
        self._told(k, score)

    def _told(self, key: Key, score: float | None) -> None:
        """Hook for subclasses, after the observation was recorded."""

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
    than filtering the full product; falls back to ``space.all_configs`` when a
    parameter's condition refers to a later parameter.
    """
    sig = space.signature()
    if sig in _TABLES:
        return _TABLES[sig]
    order = {p.name: i for i, p in enumerate(space.params)}
    ordered = all(order.get(parent, len(order)) < order[p.name]
                  for p in space.params for parent, _ in p.when)
    rows: list[list[int]] = []
    if ordered:
        def walk(i: int, partial: dict, idx: list[int]) -> None:
            if i == len(space.params):
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


__all__ = ["Key", "Observations", "Searcher", "Stat", "canonical_table", "space_size"]
