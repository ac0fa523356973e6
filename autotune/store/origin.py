"""Where a configuration came from when it came from the store: its provenance.

A session (or ``autotune tune``) may start from configurations stored by earlier runs: a
warm start from the most similar jobs, the stored best kept untuned with ``budget=0``,
or, after a ``torchrun --max-restarts`` restart, the best of the same job. Each such
configuration carries an *origin*, a small dict::

    {"run": 12, "job": "train_mlp", "created": "2026-11-25T10:03:41.120+00:00",
     "how": "warm start"}

``how`` is one of :data:`HOWS`. The session says it when it starts and in its table; when
the kept configuration has one, the run stores it (``runs.kept_from``) and ``autotune db
show`` and ``autotune report`` show it. Nothing here imports anything heavy.
"""

from __future__ import annotations

from typing import Any, Mapping

#: how a stored configuration came into a run: tried first among the trials (and kept if
#: it won), kept untuned because the budget was 0, kept untuned after a restart, kept
#: where the job afforded no search once it beat the default (a stored best that had
#: beaten its own run's default)
WARM_START, BUDGET_ZERO, RESTART, NO_SEARCH = "warm start", "budget 0", "restart", "no search"
HOWS = (WARM_START, BUDGET_ZERO, RESTART, NO_SEARCH)


def origin_of(run: Mapping[str, Any], how: str) -> dict[str, Any]:
    """The origin of a configuration taken from the stored ``run`` (a run row) as ``how``
    (one of :data:`HOWS`)."""
    if how not in HOWS:
        raise ValueError(f"how must be one of {', '.join(HOWS)}, got {how!r}")
    return {"run": run.get("id"), "job": run.get("job"), "created": run.get("created"),
            "how": how}


def when(created: str | None) -> str:
    """A stored time as ``2026-11-25 10:03`` (UTC, to the minute; ``autotune db runs``'s
    ``created``)."""
    return (created or "")[:16].replace("T", " ")


def fmt_origin(origin: Mapping[str, Any] | None, *, how: bool = True) -> str:
    """``run 12 (job 'train_mlp', 2026-11-25 10:03; warm start)``, the time in UTC as
    ``autotune db runs`` shows it; ``""`` for none.
    ``how=False`` leaves out how it came."""
    if not origin:
        return ""
    facts = [f"job {origin['job']!r}" if origin.get("job") else "",
             when(origin.get("created"))]
    text = ", ".join(f for f in facts if f)
    if how and origin.get("how"):
        text = f"{text}; {origin['how']}" if text else str(origin["how"])
    return f"run {origin.get('run', '?')}" + (f" ({text})" if text else "")


def warm_start_line(origins: list[Mapping[str, Any]]) -> str:
    """What a tuning that warm-starts from the store says first: ``warm start: trying the
    best configuration of run 12 (job 'train_mlp', 2026-11-25 10:03) first, then 2 more
    from the store`` (``""`` for none)."""
    if not origins:
        return ""
    more = len(origins) - 1
    return (f"warm start: trying the best configuration of {fmt_origin(origins[0], how=False)}"
            " first" + (f", then {more} more from the store" if more else ""))
