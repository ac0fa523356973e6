"""Fault injection for tests, and telling which peer died.

**Injection** (``AUTOTUNE_FAULT``, read at bootstrap; must be the same on every rank)::

    AUTOTUNE_FAULT="transport=pushpull,streams=3"          # fail (default mode)
    AUTOTUNE_FAULT="servers=2@configure:1"                 # rank 1 cannot apply it
    AUTOTUNE_FAULT="chunk_bytes=65536@stall:2"             # rank 2 goes silent
    AUTOTUNE_FAULT="transport=pushpull@delay:0.5"          # 0.5 s slower, every rank
    AUTOTUNE_FAULT="streams=3;intra=root@fail"             # several rules, ';'-separated

A rule is a pattern (``name=value`` pairs joined by ``,``; ``*`` matches every
configuration) and a mode:

* ``fail``: every iteration averaged under a matching configuration fails identically on
  all ranks before any byte moves: ``wait()`` raises a *recoverable*
  :class:`~autotune.runtime.errors.RuntimeFault`, servers skip the iteration. The
  gradients stay intact, so the iteration can be averaged again (``sync``, then ``wait`` again).
* ``configure:R``: rank ``R`` fails to apply a matching configuration; the vote in
  ``sync`` makes every rank raise a recoverable ``RuntimeFault`` naming ``R`` and keep the
  previous configuration.
* ``stall:R``: rank ``R`` stops communicating for a matching iteration (its streams sleep
  past the timeout): its peers time out and raise a non-recoverable ``RuntimeFault``.
  This exercises the timeout path without killing a process.
* ``delay:S``: every stream job of every rank waits ``S`` seconds before it starts, in each
  iteration under a matching configuration: a configuration that works, only slowly
  (for testing how the tuner treats a slow trial).

**Liveness.** Each rank bumps a counter in the rendezvous store every ``interval`` seconds.
After a failed collective (whose error does not say which peer failed) the runtime reads
the counters twice; ranks whose counter stood still are named as dead, except those that
said they left (a survivor that raised its own fault and shut down is not to blame).
The same store holds the list of ranks given up as lost (:meth:`Liveness.post_lost`):
every bounded wait reads it, so one rank's verdict reaches the others within a second.
A rank whose own code failed posts its exception there before it leaves
(:meth:`Liveness.fail`), so that the peers whose waits then break name it and that cause
(:meth:`Liveness.failure`), not only the broken connection they saw.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from autotune.runtime.errors import PeerFailed, PeerStopped, RuntimeFault

MODES = ("fail", "configure", "stall", "delay")
ENV = "AUTOTUNE_FAULT"


@dataclass(frozen=True)
class FaultRule:
    pattern: tuple[tuple[str, str], ...]
    mode: str
    rank: int | None = None
    seconds: float = 0.0

    def matches(self, config: Mapping[str, Any] | None) -> bool:
        if config is None:
            return False
        return all(str(config.get(k)) == v for k, v in self.pattern)


def parse_faults(text: str | None) -> list[FaultRule]:
    """Rules from an ``AUTOTUNE_FAULT`` value (see the module docstring)."""
    rules: list[FaultRule] = []
    for part in (text or "").split(";"):
        part = part.strip()
        if not part:
            continue
        pat, _, mode = part.partition("@")
        mode = mode.strip() or "fail"
        name, _, arg = mode.partition(":")
        if name not in MODES:
            raise ValueError(f"{ENV}: unknown mode {name!r} in {part!r}; modes: {', '.join(MODES)}")
        rank, seconds = None, 0.0
        if name in ("configure", "stall"):
            if not arg.strip().isdigit():
                raise ValueError(f"{ENV}: mode {name!r} needs a rank, e.g. {name}:1 (in {part!r})")
            rank = int(arg)
        if name == "delay":
            try:
                seconds = float(arg)
            except ValueError:
                seconds = -1.0
            if not seconds >= 0:
                raise ValueError(f"{ENV}: mode 'delay' needs seconds >= 0, e.g. delay:0.5 "
                                 f"(in {part!r})")
        pairs: list[tuple[str, str]] = []
        pat = pat.strip()
        if pat and pat != "*":
            for kv in pat.split(","):
                k, eq, v = kv.partition("=")
                if not eq or not k.strip():
                    raise ValueError(f"{ENV}: expected name=value, got {kv!r} in {part!r}")
                pairs.append((k.strip(), v.strip()))
        rules.append(FaultRule(tuple(pairs), name, rank, seconds))
    return rules


class FaultInjector:
    """The rules of ``AUTOTUNE_FAULT`` as seen by one rank."""

    def __init__(self, rules: Sequence[FaultRule], rank: int):
        self.rules = list(rules)
        self.rank = rank

    @classmethod
    def from_env(cls, rank: int) -> "FaultInjector":
        return cls(parse_faults(os.environ.get(ENV)), rank)

    def _hit(self, mode: str, config: Mapping[str, Any] | None) -> FaultRule | None:
        for r in self.rules:
            if r.mode == mode and r.matches(config):
                return r
        return None

    def targets(self, config: Mapping[str, Any] | None) -> bool:
        """Whether any rule, of any mode, applies to ``config`` (its rounds must run in
        the runtime, where the faults are injected)."""
        return any(r.matches(config) for r in self.rules)

    def refuses(self, config: Mapping[str, Any] | None) -> bool:
        """Mode ``fail``: the iteration fails on all ranks."""
        return self._hit("fail", config) is not None

    def configure_fails(self, config: Mapping[str, Any] | None) -> bool:
        r = self._hit("configure", config)
        return r is not None and r.rank == self.rank

    def stalls(self, config: Mapping[str, Any] | None) -> bool:
        r = self._hit("stall", config)
        return r is not None and r.rank == self.rank

    def delay(self, config: Mapping[str, Any] | None) -> float:
        """Mode ``delay``: seconds each stream job waits before it starts (0: none)."""
        r = self._hit("delay", config)
        return r.seconds if r is not None else 0.0


class Liveness:
    """Heartbeat counters in the rendezvous store (see the module docstring)."""

    PREFIX = "autotune/alive/"
    LEFT = "autotune/left/"
    LOST = "autotune/lost/"
    FAILED = "autotune/failed/"
    STOPPED = "autotune/stopped/"
    CAUSE_CHARS = 300  # a posted cause is cut to this length (it is shown in one line)

    def __init__(self, store: Any, rank: int, interval: float = 0.5):
        self.store = store
        self.rank = rank
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost: list[int] = []

    def start(self) -> None:
        if self.store is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="autotune-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        key = f"{self.PREFIX}{self.rank}"
        while not self._stop.is_set():
            try:
                self.store.add(key, 1)
            except Exception:  # the store is gone: nothing left to report to
                return
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _read(self, ranks: Sequence[int]) -> list[int]:
        return [int(self.store.add(f"{self.PREFIX}{r}", 0)) for r in ranks]

    def leave(self) -> None:
        """Say this rank is leaving on purpose (before its heartbeat stops)."""
        try:
            if self.store is not None:
                self.store.set(f"{self.LEFT}{self.rank}", "1")
        except Exception:
            pass

    def fail(self, exc: BaseException) -> None:
        """Post why this rank stops, before it leaves: a stop signal (``KeyboardInterrupt``,
        SIGTERM's :class:`~autotune.signals.Terminated`) as the signal's name under
        :attr:`STOPPED`, so that the peers and the launcher know a stopped job from a
        failed one; this rank's own failure (any exception but a :class:`RuntimeFault`:
        communication failed, and one that a peer caused names that peer) under
        :attr:`FAILED`. ``SystemExit`` is neither."""
        if self.store is None:
            return
        if isinstance(exc, KeyboardInterrupt):
            self._post(self.STOPPED, signal.Signals(getattr(exc, "signum", signal.SIGINT)).name)
            return
        if not isinstance(exc, Exception) or isinstance(exc, RuntimeFault):
            return
        cause = " ".join(f"{type(exc).__name__}: {exc}".split())
        if len(cause) > self.CAUSE_CHARS:
            cause = cause[:self.CAUSE_CHARS - 3] + "..."
        self._post(self.FAILED, cause)

    def _post(self, prefix: str, value: str) -> None:
        """``prefix<rank> = value`` in the store, and at its root (torch prefixes the default
        store's keys), where the process that hosts it, e.g. ``autotune launch``, reads it."""
        try:
            self.store.set(f"{prefix}{self.rank}", value)
            root = self.store
            while getattr(root, "underlying_store", None) is not None:
                root = root.underlying_store
            if root is not self.store:
                root.set(f"{prefix}{self.rank}", value)
        except Exception:  # the store is gone: the peers name this rank without a cause
            pass

    def failure(self, ranks: Sequence[int],
                describe: Callable[[int], str]) -> PeerFailed | None:
        """The first of ``ranks`` (not this one) that posted why it stopped (:meth:`fail`):
        a signal, as the :class:`PeerStopped` that names it (``describe(rank)``), else its
        own failure, as the :class:`PeerFailed` with its cause; ``None`` if none did or the
        store cannot be read."""
        if self.store is None:
            return None
        for prefix in (self.STOPPED, self.FAILED):
            for r in ranks:
                key = f"{prefix}{r}"
                try:
                    if r == self.rank or not self.store.check([key]):
                        continue
                    posted = self.store.get(key).decode(errors="replace")
                except Exception:
                    return None
                if prefix == self.STOPPED:
                    return PeerStopped(f"{describe(r)} was stopped by {posted}", rank=r)
                return PeerFailed(f"{describe(r)} failed: {posted}", rank=r)
        return None

    def dead(self, ranks: Sequence[int], wait: float | None = None) -> list[int] | None:
        """Ranks among ``ranks`` whose heartbeat stood still for ``wait`` seconds
        (default 4 intervals) and that did not say they left; ``None`` if the store cannot
        be read."""
        ranks = [r for r in ranks if r != self.rank]
        if self.store is None or not ranks:
            return None if self.store is None else []
        try:
            before = self._read(ranks)
            time.sleep(wait if wait is not None else 4 * self.interval)
            after = self._read(ranks)
            still = [r for r, a, b in zip(ranks, before, after) if a == b]
            return [r for r in still if not self.store.check([f"{self.LEFT}{r}"])]
        except Exception:
            return None

    def post_lost(self, ranks: Sequence[int]) -> None:
        """Tell every rank that ``ranks`` are given up (see :meth:`lost`)."""
        if self.store is None:
            return
        for r in ranks:
            if r not in self.lost():
                n = int(self.store.add(f"{self.LOST}n", 1))
                self.store.set(f"{self.LOST}{n - 1}", str(int(r)))

    def lost(self) -> list[int]:
        """Ranks that any rank gave up as lost so far (one store read when none is new)."""
        if self.store is None:
            return []
        try:
            n = int(self.store.add(f"{self.LOST}n", 0))
            while len(self._lost) < n:
                self._lost.append(int(self.store.get(f"{self.LOST}{len(self._lost)}")))
        except Exception:
            pass
        return list(self._lost)
