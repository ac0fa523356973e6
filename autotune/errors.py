"""The base of every error autotune raises on purpose: ``except autotune.AutotuneError``.

Each concept has its own subclass, next to the code that raises it, and keeps a builtin
base too (``ValueError`` for bad input, ``RuntimeError`` for failures), so existing
``except ValueError`` / ``except RuntimeError`` clauses still work. Import-light: no torch.

Uncaught, two kinds are printed differently (:func:`install_excepthook`): an error whose
class says ``one_line`` (another rank failed: the message is the whole story) as
``autotune: <message>``, and an error every rank raises alike for the same cause (a bad
argument, checked before anything starts; :func:`shown_by_rank_0`) by rank 0 alone.
"""

from __future__ import annotations

import difflib
import os
import sys
import time
from typing import Any, Sequence

__all__ = ["AutotuneError", "ArgumentError", "did_you_mean", "install_excepthook",
           "shown_by_rank_0"]


class AutotuneError(Exception):
    """Base class of autotune's errors."""


class ArgumentError(AutotuneError, ValueError):
    """An argument of a public call is out of its range; the message names the argument,
    what was given and what is allowed."""


class UnknownOption(ArgumentError, TypeError):
    """A keyword argument that the call does not take (a ``TypeError``, as Python's own),
    named with the closest one it does take."""


def did_you_mean(name: object, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the name in ``known`` closest to ``name``, or "": the
    end of an error message for a misspelled name."""
    close = difflib.get_close_matches(str(name), known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


#: how long another rank waits, uncaught, for rank 0 to print the same error, before it
#: prints the error itself
QUIET_WAIT_S = 30.0
#: the key rank 0 sets in the job's rendezvous store once it has printed its error
SHOWN_KEY = "autotune/shown-by-rank-0"
POLL_S = 0.05


def shown_by_rank_0(exc: BaseException) -> BaseException:
    """``exc``, raised alike on every rank of a job for one cause (a misspelled option,
    checked when the session or callback is made), marked so that it is printed once: on
    a rank other than 0 (``$RANK`` set by the launcher), uncaught, it waits up to
    :data:`QUIET_WAIT_S` for rank 0 to say, in the job's rendezvous store (the
    launcher's, which outlives rank 0: ``autotune launch``'s or torchrun's agent's), that
    it printed its error, then exits 1 without a word; it prints the error as one line
    only if that did not come (rank 0 did not fail, or no store could be reached).
    Caught, it is the same exception."""
    if os.environ.get("RANK", "0") != "0":
        exc.autotune_quiet = True  # type: ignore[attr-defined]
        install_excepthook()
    return exc


def _callers_line(tb: Any) -> str:
    """`` (at FILE:LINE)``: the innermost frame of ``tb`` outside autotune and torch, where
    the user's code made the call that failed; "" if there is none."""
    inside = (os.path.dirname(os.path.abspath(__file__)), os.sep + "torch" + os.sep)
    where = ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith(inside[0]) and inside[1] not in name:
            where = f" (at {name}:{tb.tb_lineno})"
        tb = tb.tb_next
    return where


def install_excepthook() -> None:
    """Print an uncaught error whose class says ``one_line`` as ``autotune: <message>`` on
    stderr (with ``show_where``, followed by the line of the user's code that made the
    failing call), and one :func:`shown_by_rank_0` marked here only if the job goes on; the
    process exits 1 as for any uncaught error. Every other error goes to the hook there
    was (torch.distributed's, which prefixes ``[rank<r>]:``, or Python's). Idempotent."""
    previous = sys.excepthook
    if getattr(previous, "autotune", False):
        return

    def hook(kind: type, value: BaseException, tb: object) -> None:
        if getattr(value, "autotune_quiet", False):
            if _shown_by_rank_0(QUIET_WAIT_S):
                return  # rank 0 said it: this rank exits 1 without a word
            sys.stderr.write(f"autotune (rank {os.environ.get('RANK')}): "
                             f"{kind.__name__}: {value}\n")
        elif getattr(value, "one_line", False):
            where = _callers_line(tb) if getattr(value, "show_where", False) else ""
            sys.stderr.write(f"autotune: {value}{where}\n")
        else:
            previous(kind, value, tb)
            return
        sys.stderr.flush()
        if os.environ.get("RANK", "0") == "0":
            _say_shown()  # the ranks waiting quiet for rank 0's line may end

    hook.autotune = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _job_store() -> Any:
    """A client of the job's rendezvous store (``MASTER_ADDR``/``MASTER_PORT``, where the
    launcher keeps it), or ``None`` where there is none to reach (no launcher, or torch
    was never imported: nothing distributed ran)."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port or "torch.distributed" not in sys.modules:
        return None
    try:
        from datetime import timedelta

        import torch.distributed as dist

        return dist.TCPStore(addr, int(port), is_master=False, wait_for_workers=False,
                             timeout=timedelta(seconds=2))
    except Exception:  # noqa: BLE001 - no store: the ranks fall back to waiting
        return None


def _key() -> str:
    # one per attempt: torchrun's agent keeps its store across a job's restarts
    return f"{SHOWN_KEY}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def _say_shown() -> None:
    """Rank 0 printed its error: tell the ranks waiting to stay quiet (best effort)."""
    store = _job_store()
    if store is not None:
        try:
            store.set(_key(), "1")
        except Exception:  # noqa: BLE001 - they print theirs after their wait
            pass


def _shown_by_rank_0(wait_s: float) -> bool:
    """Whether rank 0 says it printed its error, within ``wait_s`` seconds (bounded)."""
    store = _job_store()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if store is not None:
            try:
                if store.check([_key()]):
                    return True
            except Exception:  # noqa: BLE001 - the launcher's store is gone: wait it out
                store = None
        time.sleep(POLL_S)
    return False
