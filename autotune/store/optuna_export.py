"""``autotune db export RUN --optuna STORAGE``: a run as an Optuna study.

Every trial becomes a finished Optuna trial (``value`` = its score, direction
``maximize``) or a failed one (state ``FAIL``, no value), with the parameters that
matter for its configuration (Optuna's conditional parameters: ``servers`` only under
``transport=pushpull`` and so on). Each parameter's distribution comes from the run's
search space when its stored facts rebuild it (ordinal parameters as
``IntDistribution``/``FloatDistribution`` over their range, log-scaled where the space
is, the others ``CategoricalDistribution`` of the domain), else from the values tried.
Each trial keeps its real times: it finished when the store recorded it (``created``) and
started ``wall_time`` seconds before (under ``--simulate``, the predicted duration), so
Optuna's timeline and durations are the run's. The objective is named with its unit
(``study.metric_names``: ``"throughput (samples/s)"``). Trial user attributes:
``technique``, ``iterations``, ``wall_time`` (s), ``error``, ``autotune_number``,
``autotune_kept`` (it measured the kept configuration); study user attributes: the run's
id, job, unit, fingerprints, default and kept scores with spreads and iteration counts,
the kept configuration, ``speedup_over_default`` (:meth:`autotune.speedup.Speedup.as_json`),
``autotune_kept_trial``/``autotune_kept_trials`` (the Optuna numbers of the trials that
measured the kept configuration) and ``autotune_kept_note``: why Optuna's ``best_trial``
(the single highest value) may differ from what autotune kept (the best mean over
repeated measurements). ``optuna-dashboard STORAGE`` then shows it.
"""

from __future__ import annotations

import warnings
from datetime import datetime, timedelta
from typing import Any, Mapping

from autotune.errors import AutotuneError
from autotune.store.location import shown
from autotune.speedup import Speedup
from autotune.store.summary import summarize
from autotune.units import shown_params, unit_of


class ExportError(AutotuneError, RuntimeError):
    """The study cannot be written (storage, name taken)."""


def _space_distributions(facts: Mapping[str, Any]) -> dict[str, Any]:
    """Distributions from the run's space, rebuilt from its facts ({} if it cannot be)."""
    from optuna.distributions import (CategoricalDistribution, FloatDistribution,
                                      IntDistribution)

    from autotune.tuning.space import SearchSpace

    keys = ("k_max", "workers_per_machine", "root_candidates", "allow_lossy", "max_streams")
    try:
        space = SearchSpace.build(**{k: facts[k] for k in keys if k in facts})
    except (TypeError, ValueError):
        return {}
    out: dict[str, Any] = {}
    for p in space.params:
        vals = p.values
        if p.ordinal and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            out[p.name] = IntDistribution(vals[0], vals[-1], log=p.log and vals[0] >= 1)
        elif p.ordinal and all(isinstance(v, (int, float)) for v in vals):
            out[p.name] = FloatDistribution(float(vals[0]), float(vals[-1]),
                                            log=p.log and vals[0] > 0)
        else:
            out[p.name] = CategoricalDistribution(vals)
    return out


def _value_distribution(name: str, values: list[Any]) -> Any:
    """A distribution covering ``values`` (numbers as a range, the rest as choices)."""
    from optuna.distributions import (CategoricalDistribution, FloatDistribution,
                                      IntDistribution)

    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if nums and len(nums) == len(values):
        lo, hi = min(nums), max(nums)
        if all(isinstance(v, int) for v in nums):
            return IntDistribution(int(lo), int(hi), log=name.endswith("_bytes") and lo >= 1)
        return FloatDistribution(float(lo), float(hi))
    return CategoricalDistribution(list(dict.fromkeys(values)))


def distributions(run: Mapping[str, Any], trials: list[Mapping[str, Any]]) -> dict[str, Any]:
    """One distribution per parameter that occurs (active) in any trial."""
    params = [shown_params(t.get("config")) for t in trials]
    names: dict[str, list[Any]] = {}
    for p in params:
        for k, v in p.items():
            names.setdefault(k, []).append(v)
    space = _space_distributions(run.get("space_facts") or {})
    out: dict[str, Any] = {}
    for name, values in names.items():
        d = space.get(name)
        if d is None or not all(_contains(d, v) for v in values):
            d = _value_distribution(name, values)
        out[name] = d
    return out


def _contains(dist: Any, value: Any) -> bool:
    from optuna.distributions import CategoricalDistribution

    if isinstance(dist, CategoricalDistribution):
        return value in dist.choices
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return dist.low <= value <= dist.high


#: why the study's ``best_trial`` may not be the configuration autotune kept
KEPT_NOTE = ("autotune keeps the configuration with the best mean over all its scored "
             "iterations (often several trials, compared with the default over as many "
             "iterations, so noise averages out); Optuna's best_trial is the single trial "
             "with the highest value, which one lucky short trial can win. The trials "
             "that measured the kept configuration are in autotune_kept_trials.")


def metric_name(run: Mapping[str, Any]) -> str:
    """The study's objective as Optuna shows it: ``"throughput (samples/s)"``."""
    return f"throughput ({unit_of(run.get('unit'))})"


def _local(text: str | None) -> datetime | None:
    """A stored UTC time as the naive local time Optuna stores (``None`` for none)."""
    if not text:
        return None
    return datetime.fromisoformat(text).astimezone().replace(tzinfo=None)


def trial_times(run: Mapping[str, Any], trial: Mapping[str, Any]) -> tuple[datetime, datetime]:
    """``(start, finish)`` of a stored trial: it was recorded (``created``) when it
    finished and ran ``wall_time`` seconds (a simulated trial: its predicted duration).
    A trial stored without a time (schema v1) gets its run's finish (or start) time."""
    finish = (_local(trial.get("created")) or _local(run.get("finished"))
              or _local(run.get("created")) or datetime.now())
    wall = trial.get("wall_time")
    start = finish - timedelta(seconds=float(wall)) if wall and wall > 0 else finish
    return start, finish


def export_study(run: Mapping[str, Any], trials: list[Mapping[str, Any]], storage: str,
                 study_name: str | None = None) -> Any:
    """Write ``run`` and its ``trials`` to ``storage`` as a new study; returns it."""
    try:
        import optuna
    except ImportError:  # pragma: no cover - optuna is a dependency
        raise ExportError("exporting to Optuna needs optuna: pip install optuna") from None
    from optuna.trial import FrozenTrial, TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = study_name or f"autotune-run-{run['id']}"
    dists = distributions(run, trials)
    try:
        study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    except optuna.exceptions.DuplicatedStudyError:
        raise ExportError(f"{shown(storage)} already has a study named {name!r}; give another "
                          "--study-name or delete it (optuna delete-study)") from None
    except Exception as exc:  # noqa: BLE001 - storage URLs fail in many ways
        raise ExportError(f"cannot create an Optuna study in {shown(storage)}: "
                          f"{str(exc).replace(storage, shown(storage))}") from None
    with warnings.catch_warnings():  # set_metric_names is "experimental" in Optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([metric_name(run)])
    kept_at = summarize([dict(t) for t in trials], dict(run))["kept_at"]  # Optuna numbers
    attrs = {"autotune_run": run["id"], "job": run.get("job"), "unit": run.get("unit"),
             "model_fp": run.get("model_fp"), "topology_fp": run.get("topology_fp"),
             "default_score": run.get("default_score"),
             "default_iterations": run.get("default_iterations"),
             "best_config": run.get("best_config"), "best_score": run.get("best_score"),
             "best_spread": run.get("best_spread"), "best_iterations": run.get("best_iterations"),
             "speedup_over_default": Speedup.of_run(run).as_json(),
             "autotune_kept_trial": kept_at[0] if kept_at else None,
             "autotune_kept_trials": kept_at, "autotune_kept_note": KEPT_NOTE}
    for k, v in attrs.items():
        study.set_user_attr(k, v)
    made = []
    for i, t in enumerate(trials):
        params = shown_params(t.get("config"))
        failed = t.get("score") is None
        start, finish = trial_times(run, t)
        made.append(FrozenTrial(
            number=i, trial_id=i, state=TrialState.FAIL if failed else TrialState.COMPLETE,
            value=None if failed else float(t["score"]), datetime_start=start,
            datetime_complete=finish, params=params,
            distributions={k: dists[k] for k in params}, system_attrs={},
            intermediate_values={},
            user_attrs={"technique": t.get("technique"), "iterations": t.get("iterations"),
                        "wall_time": t.get("wall_time"), "error": t.get("error"),
                        "autotune_number": t.get("number"), "autotune_kept": i in kept_at}))
    study.add_trials(made)
    return study
