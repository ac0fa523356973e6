"""The machinery the services run on: stream threads, chunk readiness, waits with timeouts.

* :class:`StreamPool`: persistent daemon threads that run one job per stream (and role)
  per iteration. It grows to the largest number of concurrent jobs seen and never
  shrinks below it, so reconfiguring creates no new threads once warm; daemon threads
  cannot keep a failed process alive.
* :class:`RoundState`: the state of one averaging round (one iteration's gradients, on a
  worker; one round of sums, on a server): which gradients are in, which chunks are ready
  (per-stream condition variables), progress, the first error. The
  :class:`~autotune.runtime.data.averager.Averager` makes one per round.
* :class:`Op`: a ``torch.distributed`` work handle with a description and its peers, so a
  failure can name them. :class:`LocalWork` is the same for a hand-off inside a process.
* :class:`Mailbox`: the hand-off between a worker's Communication Service and the
  Summation Service colocated in the same process (no self-send in gloo).
"""

from __future__ import annotations

import queue
import threading
import time
from datetime import timedelta
from typing import Any, Callable, Sequence

from autotune.runtime.data import trace
from autotune.runtime.errors import RuntimeFault


class Aborted(Exception):
    """The iteration was abandoned (shutdown or another job failed)."""


class OpError(Exception):
    """A communication operation failed; ``peers`` are the ranks it involved."""

    def __init__(self, what: str, peers: Sequence[int], cause: BaseException | str):
        self.what = what
        self.peers = tuple(peers)
        self.cause = cause
        super().__init__(f"{what}: {cause}")


class Op:
    """A pending ``torch.distributed`` operation."""

    __slots__ = ("work", "what", "peers")

    def __init__(self, work: Any, what: str, peers: Sequence[int]):
        self.work = work  # a trace.Watched while :mod:`.trace` records
        self.what = what
        self.peers = peers

    def wait(self, timeout: float) -> None:
        watched = self.work if isinstance(self.work, trace.Watched) else None
        waited = trace.now() if watched else 0.0
        try:
            ok = (watched.wait(timeout) if watched
                  else self.work.wait(timedelta(seconds=timeout)))
        except Exception as e:  # gloo raises on timeout, closed connections, ...
            raise OpError(self.what, self.peers, e) from e
        if ok is False:
            raise OpError(self.what, self.peers, f"timed out after {timeout:.0f}s")
        if watched:
            trace.record(self.what, self.peers, watched.nbytes, watched.issued, waited,
                         watched.done)


def issue(what: str, peers: Sequence[int], fn: Callable[..., Any], *args: Any,
          **kwargs: Any) -> Op:
    """Start ``fn(*args, **kwargs)`` (an async ``torch.distributed`` call) as an :class:`Op`;
    an error while issuing (gloo may fail at once on a closed connection) is an OpError."""
    issued = trace.now() if trace.on() else 0.0
    try:
        work = fn(*args, **kwargs)
    except Exception as e:
        raise OpError(what, peers, e) from e
    if issued:
        work = trace.watch(what, work, issued, trace.nbytes_of(args))
    return Op(work, what, peers)


class LocalWork:
    """Completion of a hand-off between threads of one process."""

    __slots__ = ("event", "error", "what", "peers")

    def __init__(self, what: str, peers: Sequence[int] = ()):
        self.event = threading.Event()
        self.error: BaseException | None = None
        self.what = what
        self.peers = peers

    def set(self, error: BaseException | None = None) -> None:
        self.error = error
        self.event.set()

    def wait(self, timeout: float) -> None:
        if not self.event.wait(timeout):
            raise OpError(self.what, self.peers, f"timed out after {timeout:.0f}s")
        if self.error is not None:
            raise OpError(self.what, self.peers, self.error)


class Mailbox:
    """Unit id -> (source view, destination view, completion) between two local threads."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: dict[int, tuple[Any, Any, LocalWork]] = {}
        self._aborted = False

    def put(self, unit: int, src: Any, dst: Any, what: str) -> LocalWork:
        work = LocalWork(what)
        with self._cond:
            self._items[unit] = (src, dst, work)
            self._cond.notify_all()
        return work

    def take(self, unit: int, timeout: float) -> tuple[Any, Any, LocalWork]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while unit not in self._items:
                if self._aborted:
                    raise Aborted()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OpError("local hand-off", (), f"timed out after {timeout:.0f}s")
                self._cond.wait(min(left, 0.5))
            return self._items.pop(unit)

    def abort(self) -> None:
        with self._cond:
            self._aborted = True
            for _, _, work in self._items.values():
                work.set(Aborted())
            self._items.clear()
            self._cond.notify_all()


class StreamPool:
    """Daemon threads running submitted jobs; one thread per concurrently running job."""

    def __init__(self, name: str = "autotune-stream"):
        self.name = name
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._unclaimed = 0
        self._closed = False

    @property
    def size(self) -> int:
        return len(self._threads)

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the runtime was shut down")
            self._unclaimed += 1
            spawn = self._idle < self._unclaimed
            if spawn:
                t = threading.Thread(target=self._run, name=f"{self.name}-{len(self._threads)}",
                                     daemon=True)
                self._threads.append(t)
        self._q.put(fn)
        if spawn:
            t.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            fn = self._q.get()
            with self._lock:
                self._idle -= 1
                self._unclaimed -= 1
            if fn is None:
                return
            fn()

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._q.put(None)
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))


class RoundState:
    """The state of one averaging round (see the module docstring).

    ``pending[c]``: gradients chunk ``c`` still waits for. Jobs report through
    :meth:`job_done`; :attr:`done` is set when all finished or one failed.
    """

    def __init__(self, plan: Sequence[Any], tensor_chunks: Sequence[Sequence[int]],
                 streams: int, refused: bool = False):
        self.plan = plan
        self.tensor_chunks = tensor_chunks
        self.refused = refused
        self.fired = [False] * len(tensor_chunks)
        self.order: list[int] = []  # layout positions in the order they became ready
        self.pending = [len(set(c.tensors)) for c in plan]
        self._lock = threading.Lock()
        self._conds = [threading.Condition(self._lock) for _ in range(max(1, streams))]
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.jobs_left = 0
        self.started = False
        self.progress = 0  # completed chunks/units, to tell a slow round from a stuck one
        self.chunks_done = 0
        self.aborted = False
        self.mailbox = Mailbox()
        self.twice: list[int] = []
        self.round = 0        # Context.iteration of the codecs (the same on every worker)
        self.stored = False   # this rank kept an error-feedback residual this round
        self.copies: dict[int, Any] = {}  # position -> Staged copy into the flat buffer
        self.lend = False     # chunks may be pushed from the gradients (GradientCopies.lend)
        self.lent: dict[int, Any] = {}    # position -> the flat gradient its chunks push
        self._lent_versions: dict[int, int] = {}  # position -> its version when lent

    # ------------------------------------------------------------------ readiness
    def mark_ready(self, pos: int, staged: Any = None, lent: Any = None) -> None:
        """Gradient ``pos`` is in the flat buffer, or, with ``staged`` (a
        :class:`~autotune.runtime.data.staging.Staged` copy to the host), on its way there:
        :meth:`wait_copies` waits for it before its chunks leave; with ``lent`` (the
        flat gradient itself), the chunks that hold it alone are pushed from there."""
        with self._lock:
            if self.fired[pos]:
                self.twice.append(pos)
                return
            self.fired[pos] = True
            if staged is not None:
                self.copies[pos] = staged
            if lent is not None:
                self.lent[pos] = lent
                base = lent._base
                if base is None or base.numel() == lent.numel():
                    # a version counter of its own (not a view into a larger buffer, as
                    # with grad_views, whose every gradient shares it)
                    self._lent_versions[pos] = lent._version
            self.order.append(pos)
            for c in self.tensor_chunks[pos]:
                self.pending[c] -= 1
                if self.pending[c] == 0:
                    self._conds[self.plan[c].stream].notify_all()

    def changed_lent(self) -> list[int]:
        """Positions of lent gradients that something changed in place after they were
        lent (their version counter moved: gradient clipping or unscaling before
        ``wait()``, a second backward pass), while their chunks were being pushed. Not
        known of a ``.grad`` that is a view into a larger buffer (``grad_views``)."""
        with self._lock:
            return [pos for pos, v in self._lent_versions.items()
                    if self.lent[pos]._version != v]

    def wait_ready(self, chunk: Any) -> None:
        cond = self._conds[chunk.stream]
        with self._lock:
            while self.pending[chunk.index] > 0:
                if self.aborted:
                    raise Aborted()
                cond.wait(0.5)
            if self.aborted:
                raise Aborted()

    def wait_copies(self, chunk: Any, timeout: float, rank: int) -> None:
        """Block until the staged copies of ``chunk``'s gradients are in the host buffer
        (each at most ``timeout``); nothing to do when none was staged (CPU gradients)."""
        if not self.copies:
            return
        for pos in dict.fromkeys(chunk.tensors):
            staged = self.copies.get(pos)
            if staged is None:
                continue
            try:
                staged.wait(timeout)
            except Exception as e:
                raise RuntimeFault(
                    f"rank {rank}, stream {chunk.stream} chunk {chunk.index}: the copy of "
                    f"gradient {pos} from the GPU to the host buffer failed: {e}",
                    rank=rank) from e

    # ------------------------------------------------------------------ jobs
    def add_jobs(self, n: int) -> None:
        with self._lock:
            self.jobs_left += n
            self.started = True
        if n == 0 and self.jobs_left == 0:
            self.done.set()

    def tick(self, chunk: bool = False) -> None:
        """A unit of work finished (``chunk``: one of this worker's chunks is averaged)."""
        self.progress += 1
        if chunk:
            self.chunks_done += 1

    def job_done(self, error: BaseException | None = None) -> None:
        with self._lock:
            self.jobs_left -= 1
            if error is not None and not isinstance(error, Aborted) and self.error is None:
                self.error = error
            finished = self.jobs_left <= 0 or self.error is not None
        if finished:
            self.done.set()

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            for c in self._conds:
                c.notify_all()
        self.mailbox.abort()
