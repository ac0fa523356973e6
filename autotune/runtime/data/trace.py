"""A timeline of this process's communication operations, for diagnosis only.

Off unless :func:`start` is called (the benchmarks' ``--trace``). While it is on, every
:class:`~autotune.runtime.data.engine.Op` is recorded: what it is (``"stream 2 chunk 17: push
to rank 5"``), its peers, its bytes, the thread that waited for it, and three times from
``time.perf_counter`` (CLOCK_MONOTONIC on Linux, so the processes of one machine, and so
the hosts of the emulated cluster, share the clock):

* ``issued``: the operation was posted;
* ``waited``: the stream began to wait for it;
* ``done``: it completed.

A stream waits for its operations late on purpose (a pull only when its window is full),
so its own wait cannot tell when one completed. While tracing, a watcher thread per flow
(operations of one kind, stream and peer, which complete in order) does the real wait as
soon as an operation is posted and notes the time; the stream's wait then waits for the
watcher. gloo does the transfers on its own threads either way. A caller may add marks
(:func:`mark`: an iteration's bounds). Nothing is sent anywhere: :func:`stop` returns the
events and :func:`dump` writes them as JSON.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Sequence

_events: list[tuple] | None = None
_watchers: dict[str, "queue.SimpleQueue"] = {}
_lock = threading.Lock()
_CHUNK = re.compile(r"chunk \d+")
WATCH_TIMEOUT_S = 3600.0  # the stream's own wait keeps its timeout (see Watched.wait)


def start() -> None:
    """Record from now on (clears what an earlier start recorded)."""
    global _events
    _events = []


def on() -> bool:
    return _events is not None


def stop() -> list[dict]:
    """Stop recording; the events so far, in the order their waits returned."""
    global _events
    events, _events = _events or [], None
    keys = ("what", "peers", "nbytes", "thread", "issued", "waited", "done")
    return [dict(zip(keys, e)) for e in events]


def now() -> float:
    return time.perf_counter()


def record(what: str, peers: Sequence[int], nbytes: int, issued: float, waited: float,
           done: float) -> None:
    """One operation (called by ``Op.wait``; list.append is atomic, so no lock)."""
    ev = _events
    if ev is not None:
        ev.append((what, list(peers), nbytes, threading.current_thread().name, issued, waited,
                   done))


class Watched:
    """An operation's completion as a watcher thread saw it."""

    __slots__ = ("work", "event", "error", "issued", "nbytes", "done")

    def __init__(self, work: Any, issued: float, nbytes: int):
        self.work = work
        self.event = threading.Event()
        self.error: BaseException | None = None
        self.issued = issued
        self.nbytes = nbytes
        self.done = 0.0

    def wait(self, timeout: float) -> bool:
        """Like the work's ``wait``: False on timeout; raises what the work raised."""
        if not self.event.wait(timeout):
            return False
        if self.error is not None:
            raise self.error
        return True


def watch(what: str, work: Any, issued: float, nbytes: int) -> Watched:
    """Hand ``work`` to the watcher of its flow (started on first use)."""
    w = Watched(work, issued, nbytes)
    key = _CHUNK.sub("chunk", what)
    with _lock:
        q = _watchers.get(key)
        if q is None:
            q = _watchers[key] = queue.SimpleQueue()
            threading.Thread(target=_watcher, args=(q,), name=f"autotune-trace {key}",
                             daemon=True).start()
    q.put(w)
    return w


def _watcher(q: "queue.SimpleQueue") -> None:
    while True:
        w = q.get()
        try:
            if w.work.wait(timedelta(seconds=WATCH_TIMEOUT_S)) is False:
                w.error = TimeoutError(f"not done after {WATCH_TIMEOUT_S:.0f}s")
        except Exception as e:
            w.error = e
        w.done = now()
        w.event.set()


def mark(what: str, begin: float, end: float) -> None:
    """A span of the caller's (e.g. ``"iteration 3"``), with no peers and no bytes."""
    record(what, (), 0, begin, begin, end)


def nbytes_of(args: Sequence[Any]) -> int:
    """Bytes of an operation's first tensor argument (the buffer sent, received or
    reduced), 0 when there is none."""
    for a in args:
        n = getattr(a, "nbytes", None)
        if isinstance(n, int):
            return n
    return 0


def dump(folder: Path | str, rank: int, role: str) -> Path:
    """Stop and write this rank's events to ``folder/rank<rank>.json`` (with its rank and
    role), the files ``benchmarks/timeline.py`` reads."""
    p = Path(folder) / f"rank{rank}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"rank": rank, "role": role, "events": stop()}))
    return p
