"""The driver's side of the user's clock: launching arms, medians with their spread, the speed-up.

One convention for every case: the **speed-up over DDP** is DDP's time over the arm's
(above 1, the arm is faster); where a case reports a time ratio as well (the ``job`` case:
wall time over DDP's, above 1 slower, the form its targets take), it says so.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from benchlib import launch_json, median
from userclock.rank import SESSIONS

SCRIPT = Path(__file__).resolve().parents[1] / "clock_bench.py"
WARMUP = 3  # the session's warm-up iterations (its default), before the budget


def launch(cluster: Any, spec: dict, a: Any, *, servers: int = 0,
           hosts: list[int] | None = None, failed: str) -> list[dict]:
    """Run ``spec``'s arms (:mod:`.rank`) on ``spec["workers"]`` hosts of ``cluster`` and
    ``servers`` more (or on ``hosts``, one per rank; every rank's output echoed with
    ``a.verbose``; bounded by the arms' seconds and ``a.timeout``); each arm's
    measurements, in order. With servers, a session arm comes last (the servers leave
    after a session)."""
    kinds = [arm["kind"] for arm in spec["arms"]]
    if servers and any(k in SESSIONS for k in kinds[:-1]):
        raise ValueError(f"with servers, a session arm comes last; got {kinds}")
    length = sum(arm.get("seconds") or 0 for arm in spec["arms"])
    argv = [sys.executable, str(SCRIPT), "--rank", json.dumps(spec)]
    return launch_json(cluster, argv, workers=spec["workers"], servers=servers, hosts=hosts,
                       timeout_s=length + a.timeout, verbose=a.verbose, failed=failed)["arms"]


def spread(xs: list[float]) -> dict[str, float]:
    """The median of ``xs`` with its min-max spread (infinite values kept: "never")."""
    return {"median": median(xs), "min": min(xs), "max": max(xs)}


def speedup(ref: float | None, t: float | None) -> float | None:
    """DDP's time over the arm's (None where either is unknown or infinite)."""
    if not ref or not t or not (math.isfinite(ref) and math.isfinite(t)):
        return None
    return ref / t


def session_options(a: Any, seed: int | None = None, **more: Any) -> dict[str, Any]:
    """What every case's sessions get: no store (runs must not warm-start each other),
    the run's seed (``seed``, else ``a.seed``), its verbosity and its waits' bound; then
    ``more``."""
    return {"store": False, "seed": a.seed if seed is None else seed, "verbose": a.verbose,
            "timeout": a.rank_timeout, **more}


def kept_steps(r: dict) -> list[float]:
    """A session arm's steps under its kept configuration, the first (the switch) left out."""
    return [t for t, busy in zip(r["step_s"], r["tuning"]) if not busy][1:]


def command(case: str) -> str:
    """The command line that ran, for the JSON."""
    args = sys.argv[1:]
    if args and args[0] == case:
        args = args[1:]
    return f"benchmarks/clock_bench.py {case} " + " ".join(args)


def fmt(cfg: dict | None) -> str:
    if not cfg:
        return ""
    from autotune.units import fmt_config

    return fmt_config(cfg)


def fmt_s(x: float) -> str:
    return f"{x:.1f}" if math.isfinite(x) else "never"

