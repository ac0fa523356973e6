"""Errors the runtime raises.

``ConfigError`` (from :mod:`autotune.runtime.config`) means a configuration or a registration is
wrong: it is raised identically on every rank, the previous configuration stays active.
:class:`RuntimeFault` means communication failed: a peer died, an operation timed out, or
an injected fault fired (see :mod:`autotune.runtime.control.faults`). :class:`PeerFailed`, one of
them, means another rank failed and names it; uncaught, it is printed as one line
(:func:`autotune.errors.install_excepthook`).
"""

from __future__ import annotations

from autotune.errors import AutotuneError

__all__ = ["RuntimeFault", "PeerFailed", "PeerStopped", "ServerLost",
           "UsageError"]


class RuntimeFault(AutotuneError, RuntimeError):
    """Averaging or reconfiguring failed.

    ``rank``: the rank held responsible (a dead or stuck peer, or the rank that refused a
    configuration), or ``None`` when it could not be told. ``recoverable``: ``True`` when
    the fault happened identically on every rank before any byte of the iteration moved
    (an injected fault, a configuration every rank could not apply): the gradients in
    ``.grad`` are intact and the iteration can be averaged again under another
    configuration (``sync``, then ``wait`` again). ``False`` after a dead peer or a timeout: the
    process groups may hold half-finished operations, the runtime refuses further work.
    """

    def __init__(self, message: str, *, rank: int | None = None, recoverable: bool = False):
        super().__init__(message)
        self.rank = rank
        self.recoverable = recoverable


class PeerFailed(RuntimeFault):
    """Another rank (``rank``) failed, so this one cannot go on: its own code raised (the
    message gives that rank's exception, which it posted before it left; see
    :meth:`~autotune.runtime.control.faults.Liveness.fail`), it died, or it stopped answering (the
    message says what was seen, and during which operation). Not recoverable. Nothing went
    wrong on this rank: the whole story is the message, so uncaught it is printed as that
    one line, without a traceback (:func:`autotune.errors.install_excepthook`)."""

    one_line = True  # printed as ``autotune: <message>`` (autotune.errors.install_excepthook)

    def __init__(self, message: str, *, rank: int):
        super().__init__(message, rank=rank, recoverable=False)


class PeerStopped(PeerFailed):
    """Another rank (``rank``) was stopped by a signal (Ctrl-C, SIGTERM: a pre-empted
    node), so this one cannot go on: the job was stopped, not broken, and the run closes
    as ``aborted`` (:func:`autotune.signals.status_of` reads :attr:`aborts`)."""

    aborts = True


class ServerLost(RuntimeFault):
    """Summation servers stopped (killed, stopped, their machine gone): recoverable.

    On a worker the runtime has already dropped every server: from now on it runs
    all-reduce among the workers only (over groups made at bootstrap), the iteration's
    gradients are intact, so ``sync`` (with a configuration without servers) and a second
    ``wait`` average them again and no step is lost. On a surviving server it means: leave, the
    workers go on without servers. ``servers``: the ranks that stopped.
    """

    def __init__(self, message: str, *, servers: tuple[int, ...]):
        super().__init__(message, rank=servers[0], recoverable=True)
        self.servers = servers


class UsageError(AutotuneError, RuntimeError):
    """The runtime or the session was driven against its protocol: two backward passes in
    one iteration without ``no_sync()``, ``step()`` inside ``no_sync()``, a parameter added
    after the start, no ``sync`` before a push/pull round. Raised on the rank that did it;
    nothing was averaged wrongly. Uncaught, it is one line naming the call of the user's
    code that broke the rule (``autotune: <message> (at train.py:42)``)."""

    one_line = True
    show_where = True
