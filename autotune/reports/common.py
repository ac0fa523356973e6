"""What ``autotune db ...`` and ``autotune report`` share: the ``--db`` option, opening
the store for a command (:func:`open_store`), the store's errors as click's
(:func:`guard`), JSON output (:func:`emit_json`), and how a run reads to a person
(:func:`when`, :func:`iterations`, :func:`speedup_text`, :func:`run_fields`: ``autotune db
show``'s fields, which the HTML report shows too).

The store itself is imported inside the functions, so ``autotune --help`` starts fast.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import click

from autotune.outpath import StoreTarget
from autotune.speedup import Speedup
from autotune.store.origin import fmt_origin, when
from autotune.units import fmt_config, fmt_score, unit_of

if TYPE_CHECKING:  # pragma: no cover
    from autotune.store.db import Store

__all__ = ["db_path_option", "ddp_fields", "emit_json", "figure", "guard", "iterations",
           "not_kept_json", "not_kept_text", "not_measured", "open_store", "partial",
           "run_fields", "speedup_text", "spread", "sums_on_workers", "when", "WORKERS_SUM"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

DB_HELP = ("The results store: an SQLite file or a postgresql:// URL "
           "[default: $AUTOTUNE_DB or ./autotune.db].")


def db_path_option(fn: F) -> F:
    """Add the ``--db PATH|URL`` option (the ``db_path`` argument) to a command."""
    return click.option("--db", "db_path", type=StoreTarget(), metavar="PATH|URL",
                        default=None, help=DB_HELP)(fn)


def open_store(db_path: str | None) -> Store:
    """The existing store at ``db_path`` (never created); a clear error if it cannot be."""
    from autotune.store.db import Store, StoreError

    try:
        return Store(db_path, create=False)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


def guard(fn: Callable[[], T]) -> T:
    """``fn()``, with a :class:`~autotune.store.db.StoreError` turned into a click error."""
    from autotune.store.db import StoreError

    try:
        return fn()
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


def emit_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON with sorted keys (anything else as its ``str``)."""
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


#: the statuses of a run whose figures are all there is: it ran to its end
COMPLETE = ("finished",)


def partial(run: dict) -> bool:
    """Whether the run's figures are partial: it did not finish (aborted, failed,
    abandoned, or still running), so they cover the iterations until then."""
    return run.get("status") not in COMPLETE


def iterations(run: dict, side: str) -> str:
    """``" (12 iterations)"`` after a measured score of ``side`` (``best``/``default``),
    with ``; partial: the run is aborted`` where the run did not finish; nothing for a
    simulated run (its iterations are draws of the simulator, not measurements), an
    unknown count or no score."""
    n = run.get(f"{side}_iterations")
    if run.get("simulated") or n is None or run.get(f"{side}_score") is None:
        return ""
    said = f"{n} iteration{'' if n == 1 else 's'}"
    return f" ({said}; partial: the run is {run['status']})" if partial(run) else f" ({said})"


def not_measured(run: dict) -> str:
    """What stands for the kept figure where the run has none: ``none`` where it kept no
    configuration; where it did, that it was not measured (an aborted run's best so far:
    kept untuned, or stopped before its settled iterations were scored)."""
    if not run.get("best_config"):
        return "none"
    return "not measured" + (f" (the run was {run['status']})"
                             if run.get("status") not in (None, "finished") else "")


def ddp_fields(run: dict, unit: str) -> list[tuple[str, str]]:
    """What ``autotune tune`` measured against PyTorch DDP (``runs.ddp``): DDP's figure,
    the kept configuration re-timed as DDP's is, and the speed-up of the one over the
    other (:mod:`autotune.speedup`); none where nothing was compared."""
    ddp = run.get("ddp") or {}
    if not ddp.get("ddp") or not ddp.get("kept"):
        return []
    sides = {k: (v.get("score"), v.get("spread"), v.get("iterations")) for k, v in ddp.items()}

    def shown(side: tuple) -> str:
        count = f" ({side[2]} iterations)" if side[2] is not None else ""
        return fmt_score(side[0], unit, side[1] if (side[2] or 0) > 1 else None) + count

    return [("DDP", shown(sides["ddp"])), ("kept, re-timed as DDP is", shown(sides["kept"])),
            ("speed-up over DDP", Speedup.of(sides["kept"], sides["ddp"]).shown())]


def figure(run: dict, side: str, unit: str) -> str:
    """The run's figure for ``side`` (``best``: the kept configuration, or ``default``)
    as every table shows it: mean ± spread (none under 2 iterations), its count, and
    whether it is partial (:func:`iterations`)."""
    return fmt_score(run.get(f"{side}_score"), unit, spread(run, side)) + iterations(run, side)


#: what ``transport=pushpull servers=0`` means, under a table that shows one
WORKERS_SUM = ("transport=pushpull servers=0: push/pull through Summation Services on the "
               "workers themselves (no server process)")


def sums_on_workers(config: dict | None) -> bool:
    """Whether ``config`` is push/pull with no server process (:data:`WORKERS_SUM`)."""
    return bool(config) and config.get("transport") == "pushpull" and not config.get("servers")


def spread(run: dict, side: str) -> float | None:
    """The spread of the run's figure for ``side``, where it has one: 2 scored iterations
    or more (or an unknown count); one iteration has none, not ``± 0``."""
    n = run.get(f"{side}_iterations")
    return run.get(f"{side}_spread") if n is None or n >= 2 else None


def speedup_text(run: dict, *, counts: bool = False) -> str:
    """The run's kept-over-default speed-up as shown (:meth:`autotune.speedup.Speedup.of_run`):
    refused under 4 scored iterations on either side, or where the counts are unknown."""
    return Speedup.of_run(run).shown(counts=counts, spread=counts)


def not_kept_text(n: dict, trials: list[dict], unit: str) -> str:
    """Why the fastest trial's configuration was not kept (:func:`~autotune.store.summary.
    not_kept`): its number, configuration, score and mean, and the rule."""
    mean = (f"{fmt_score(n['mean'], unit)} on average over its {n['trials']} trials"
            if n["trials"] > 1 else "its only trial")
    return (f"#{trials[n['at']].get('number')} {fmt_config(n['config'])}, "
            f"{fmt_score(n['score'], unit)} once ({mean}), not kept: a configuration is kept "
            "on its mean's lower bound over its trials, confirmed 4 times, and only where "
            "that clears the default's upper bound (docs/tuner.md, \"Confirming\")")


def not_kept_json(n: dict | None, trials: list[dict]) -> dict | None:
    """:func:`~autotune.store.summary.not_kept` as ``report --json`` and ``db show
    --json`` give it: ``at`` is the trial's number, not its index."""
    return None if n is None else {**n, "at": trials[n["at"]].get("number")}


def run_fields(run: dict, n_trials: int) -> list[tuple[str, Any]]:
    """``autotune db show``'s fields of a run (the HTML report's too): the kept figure,
    where the kept configuration came from when it came from the store, the default's,
    the speed-up, what ran."""
    unit = unit_of(run.get("unit"))
    fields: list[tuple[str, Any]] = [
        ("id", run["id"]), ("job", run["job"]), ("status", run["status"]),
        ("created", run.get("created")), ("finished", run.get("finished")),
        ("unit", unit),
        ("kept", figure(run, "best", unit) or not_measured(run)),
        ("default", figure(run, "default", unit)),
        ("speed-up", speedup_text(run, counts=True)), ("trials", n_trials),
        ("world", " ".join(f"{k}={v}" for k, v in (run.get("world") or {}).items())),
        ("backend", run.get("backend")), ("simulated", "yes" if run.get("simulated") else "no"),
        ("model", run.get("model_fp")), ("topology", run.get("topology_fp")),
        ("space facts", " ".join(f"{k}={json.dumps(v)}" for k, v in
                                 (run.get("space_facts") or {}).items())),
        ("versions", f"autotune {run.get('autotune_version')}, torch {run.get('torch_version')}"),
    ]
    if run.get("ddp"):  # autotune tune timed PyTorch DDP on the same job
        fields[9:9] = ddp_fields(run, unit)  # after the speed-up over the default
    if run.get("kept_from"):  # the kept configuration came from an earlier run
        fields.insert(7, ("kept from", fmt_origin(run["kept_from"])))
    if run.get("tuning_cost"):
        from autotune.schedule.stakes import fmt_cost

        fields.insert(7, ("tuning cost", fmt_cost(run["tuning_cost"])))
    if run.get("cause"):  # why it was closed as it was (abandoned: its store was lost)
        fields.insert(3, ("cause", run["cause"]))
    if run.get("continues"):  # it went on locally from a run whose store was lost
        fields.insert(3, ("continues", f"run {run['continues'].get('run')} of "
                                       f"{run['continues'].get('store')}"))
    return fields
