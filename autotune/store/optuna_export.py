"""``autotune db export RUN --optuna STORAGE``: a run as an Optuna study.

Every trial becomes a finished Optuna trial (``value`` = its score, direction
``maximize``) or a failed one (state ``FAIL``, no value), with the parameters that
matter for its configuration (Optuna's conditional parameters: ``servers`` only under
``transport=pushpull`` and so on). Each parameter's distribution comes from the run's
search space when its stored facts rebuild it (ordinal parameters as
``IntDistribution``/``FloatDistribution`` over their range, log-scaled where the space
is, the others ``CategoricalDistribution`` of the domain), else from the values tried.
Trial user attributes: ``technique``, ``iterations``, ``wall_time`` (s), ``error``,
``autotune_number``; study user attributes: the run's id, job, unit, fingerprints,
default score and kept configuration. ``optuna-dashboard STORAGE`` then shows it.
"""

from __future__ import annotations

from typing import Any, Mapping

from autotune.errors import AutotuneError
from autotune.units import shown_params


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


def export_study(run: Mapping[str, Any], trials: list[Mapping[str, Any]], storage: str,
                 study_name: str | None = None) -> Any:
    """Write ``run`` and its ``trials`` to ``storage`` as a new study; returns it."""
    try:
        import optuna
    except ImportError:  # pragma: no cover - optuna is a dependency
        raise ExportError("exporting to Optuna needs optuna: pip install optuna") from None
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = study_name or f"autotune-run-{run['id']}"
    dists = distributions(run, trials)
    try:
        study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    except optuna.exceptions.DuplicatedStudyError:
        raise ExportError(f"{storage} already has a study named {name!r}; give another "
                          "--study-name or delete it (optuna delete-study)") from None
    except Exception as exc:  # noqa: BLE001 - storage URLs fail in many ways
        raise ExportError(f"cannot create an Optuna study in {storage}: {exc}") from None
    attrs = {"autotune_run": run["id"], "job": run.get("job"), "unit": run.get("unit"),
             "model_fp": run.get("model_fp"), "topology_fp": run.get("topology_fp"),
             "default_score": run.get("default_score"), "best_config": run.get("best_config")}
    for k, v in attrs.items():
        study.set_user_attr(k, v)
    made = []
    for t in trials:
        params = shown_params(t.get("config"))
        failed = t.get("score") is None
        made.append(optuna.trial.create_trial(
            params=params, distributions={k: dists[k] for k in params},
            value=None if failed else float(t["score"]),
            state=TrialState.FAIL if failed else TrialState.COMPLETE,
            user_attrs={"technique": t.get("technique"), "iterations": t.get("iterations"),
                        "wall_time": t.get("wall_time"), "error": t.get("error"),
                        "autotune_number": t.get("number")}))
    study.add_trials(made)
    return study
