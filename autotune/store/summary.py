"""What a run's stored trials say, as numbers: :func:`summarize`.

Per technique, its trials, its new bests and the gain credited to it (each time a trial
beat every earlier one, the rise goes to its technique: what the AUC bandit rewards); the
best-so-far curve; the trials that measured the kept configuration. ``autotune report``
draws and prints it (:mod:`autotune.reports.report`), and the Optuna export
(:mod:`autotune.store.optuna_export`) marks the kept trials with it. Pure: no click, no
rich, nothing heavy.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

from autotune.units import shown_params


def same_config(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two configurations agree on every parameter that matters."""
    return a is not None and b is not None and shown_params(a) == shown_params(b)


def not_kept(trials: list[dict], kept: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Where the fastest single trial is not of the ``kept`` configuration (issue 65: a
    report showed a trial faster than what was kept, and not why): its index, its score,
    and the mean of its configuration's trials (``mean``, over ``trials``); else None."""
    scored = [(i, t) for i, t in enumerate(trials) if t.get("score") is not None]
    if not scored or kept is None:
        return None
    at, top = max(scored, key=lambda it: it[1]["score"])
    if same_config(top.get("config"), kept):
        return None
    mine = [t["score"] for _, t in scored if same_config(t.get("config"), top.get("config"))]
    return {"at": at, "config": top.get("config"), "score": top["score"],
            "mean": sum(mine) / len(mine), "trials": len(mine)}


def summarize(trials: list[dict], run: dict | None = None) -> dict[str, Any]:
    """Per-technique counts of trials, of new bests and their gains; the best-so-far
    curve (``None`` until the first successful trial); the cumulative gain credited to
    each technique after every trial; the trials that measured the kept configuration;
    the fastest trial where it is not of the kept configuration (:func:`not_kept`)."""
    best: float | None = None
    curve: list[float | None] = []
    new_best_at: list[int] = []
    per_trials: Counter[str] = Counter()
    per_bests: Counter[str] = Counter()
    gain: Counter[str] = Counter()
    credit: list[dict[str, float]] = []
    for i, t in enumerate(trials):
        per_trials[t["technique"]] += 1
        s = t.get("score")
        if s is not None and (best is None or s > best):
            if best is not None:
                gain[t["technique"]] += s - best
            best = s
            new_best_at.append(i)
            per_bests[t["technique"]] += 1
        curve.append(best)
        credit.append(dict(gain))
    techniques = sorted(per_trials, key=lambda k: (-per_trials[k], k))
    kept = (run or {}).get("best_config")
    return {
        "not_kept": not_kept(trials, kept),
        "techniques": techniques,
        "trials": dict(per_trials),
        "new_bests": {k: per_bests.get(k, 0) for k in techniques},
        "gain": {k: gain.get(k, 0.0) for k in techniques},
        "credit": [{k: c.get(k, 0.0) for k in techniques} for c in credit],
        "best_so_far": curve,
        "new_best_at": new_best_at,
        "failed": sum(1 for t in trials if t.get("score") is None),
        "best": best,
        "kept_at": [i for i, t in enumerate(trials) if same_config(t.get("config"), kept)],
    }
