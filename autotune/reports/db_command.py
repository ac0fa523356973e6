"""``autotune db``: look into the results store from the command line.

Every subcommand takes ``--db PATH|URL`` (an SQLite file or a ``postgresql://`` URL;
default: ``$AUTOTUNE_DB`` or ``./autotune.db``) and ``--json`` (machine-readable output
instead of rich tables). A missing, empty, foreign or corrupt database is a clear error
(exit code 1) and is never created or changed (only ``prune`` and ``close`` write,
``prune`` after asking); a file or directory this user may not write says so
("read-only"). Usage errors exit 2. A RUN argument is an id or ``latest``.

Tables are for people (:mod:`autotune.units`: KiB/MiB, scores with their unit, only the
parameters that matter; :mod:`autotune.reports.tables`: fitted to the terminal); ``--json``
and CSV keep raw numbers (bytes in ``*_bytes``, seconds, scores beside a ``unit`` field).
What this shares with ``autotune report`` is in :mod:`autotune.reports.common`.

Heavy imports (SQLAlchemy, networkx) happen inside the commands, so ``autotune``
starts fast.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any, Callable

import click

from autotune.outpath import OutFile
from autotune.reports.common import (db_path_option, emit_json, figure, guard, not_kept_json,
                                     not_kept_text, open_store, partial, run_fields,
                                     speedup_text, spread, sums_on_workers, when, WORKERS_SUM)
from autotune.reports.tables import Column, show
from autotune.store.location import shown
from autotune.store.summary import not_kept
from autotune.speedup import Speedup
from autotune.units import (UNITS, fmt_config, fmt_efficiency, fmt_number, fmt_seconds,
                            fmt_value, shown_params, unit_of)

FP_SHORT = 10


def db_options(fn: Callable | None = None, *,
               json_help: str = "Print JSON instead of a table.") -> Callable:
    """``--json`` and ``--db`` for a ``db`` command; ``json_help`` where ``--json`` does
    something else than replace a table (``@db_options(json_help=...)``)."""
    def add(fn: Callable) -> Callable:
        fn = click.option("--json", "as_json", is_flag=True, help=json_help)(fn)
        return db_path_option(fn)
    return add(fn) if fn is not None else add


def _speedup_json(run: dict) -> dict[str, Any]:
    """``speedup_over_default`` as every ``--json`` gives it
    (:meth:`autotune.speedup.Speedup.as_json`)."""
    return {"speedup_over_default": Speedup.of_run(run).as_json()}


#: what ``db runs``' world column says, in its --help and under its table
WORLD_HELP = ("world: workers/servers/machines, e.g. 2w/1s/1m = 2 worker processes, 1 "
              "Summation Service server process, 1 machine")
#: the mark after a partial figure, and what it says under a table
PARTIAL_MARK = "*"
PARTIAL_HELP = (f"{PARTIAL_MARK}: partial, the run did not finish (aborted, failed, "
                "abandoned or running): its figures cover the iterations until then")


def _world(run: dict) -> str:
    return f"{run.get('workers') or 0}w/{run.get('servers') or 0}s/{run.get('machines') or 0}m"


def _marked(run: dict, value: Any) -> str:
    """A figure of ``run`` in a table cell, marked where it is partial."""
    text = fmt_number(value)
    return text + PARTIAL_MARK if text and partial(run) else text


def _suggesting_group() -> type[click.Group]:
    from autotune.cli import SuggestingGroup

    return SuggestingGroup


@click.group("db", cls=_suggesting_group())
def db() -> None:
    """Inspect the results store: runs, trials, best configurations.

    \b
    Examples:
      autotune db runs --status finished
      autotune db show latest
      autotune db export latest --format csv --out trials.csv
    """


RUN_HELP = "RUN is a run id, or 'latest' for the newest run."


@db.command("runs")
@click.option("--status", type=click.Choice(["running", "finished", "failed", "aborted", "abandoned"]),
              default=None, help="Only runs shown with this status (abandoned: running, but "
              "the process that started it, on this host, is gone).")
@click.option("--job", default=None, help="Only runs of this job name.")
@click.option("--limit", type=int, default=50, show_default=True)
@db_options
def runs_cmd(status: str | None, job: str | None, limit: int, db_path: str | None, as_json: bool) -> None:
    """List runs, newest first.

    Scores are throughput (higher is better) in the run's unit: samples/s, it/s, or
    their simulated counterparts. kept: the kept configuration's mean over its scored
    iterations (the figure the session's table and autotune report show; "autotune db
    show RUN" gives its spread and count), and default the default configuration's, the
    same figures in every table; speed-up is the kept configuration over the default,
    "– (n<4)" where either has fewer than 4 scored iterations (or an unknown count).
    A figure marked * is partial: the run did not finish (aborted, failed, abandoned or
    running). world: workers/servers/machines, e.g. 2w/1s/1m = 2 worker processes, 1
    Summation Service server process, 1 machine.

    \b
    Examples:
      autotune db runs
      autotune db runs --job train_mlp --limit 5
      autotune db runs --status abandoned --json
    """
    with open_store(db_path) as store:
        rows = guard(lambda: store.runs(status=status, job=job, limit=limit))
        counts = guard(store.trial_counts)
    if as_json:
        emit_json([{**r, "trials": counts.get(r["id"], 0), **_speedup_json(r)} for r in rows])
        return
    cols = [Column("id", "num"), Column("created", "word", 4), Column("job"),
            Column("status", "word", 2), Column("world", "text", 5), Column("backend", "text", 6),
            Column("model", "text", 7), Column("topology", "text", 7), Column("trials", "num", 1),
            Column("kept", "num"), Column("±", "num", 4), Column("default", "num", 3),
            Column("unit"), Column("speed-up", "num")]
    show(f"runs in {store.name}", cols,
         ([r["id"], when(r["created"]), r["job"], r["status"], _world(r), r["backend"],
           r["model_fp"][:FP_SHORT], r["topology_fp"][:FP_SHORT], counts.get(r["id"], 0),
           _marked(r, r["best_score"]), fmt_number(spread(r, "best")),
           _marked(r, r["default_score"]), unit_of(r.get("unit")), speedup_text(r)]
          for r in rows),
         caption=WORLD_HELP + (f"; {PARTIAL_HELP}" if any(partial(r) for r in rows) else ""))



@db.command("show")
@click.argument("run_id", metavar="RUN")
@db_options
def show_cmd(run_id: str, db_path: str | None, as_json: bool) -> None:
    """Everything about one run. RUN is a run id, or 'latest'.

    \b
    Examples:
      autotune db show latest
      autotune db show 12 --json
    """
    with open_store(db_path) as store:
        run = guard(lambda: store.run(run_id))
        trials = guard(lambda: store.trials(run["id"]))
    fastest = not_kept(trials, run.get("best_config"))
    if as_json:
        emit_json({**run, "trials": len(trials), **_speedup_json(run),
                   "fastest_not_kept": not_kept_json(fastest, trials)})
        return
    fields = run_fields(run, len(trials))
    if fastest is not None:  # why the fastest trial is not kept, after the kept figure
        at = next(i for i, (label, _) in enumerate(fields) if label == "kept") + 1
        fields.insert(at, ("fastest trial",
                           not_kept_text(fastest, trials, unit_of(run.get("unit")))))
    show(f"run {run['id']}", [Column("field"), Column("value", "fold")], fields)
    if run.get("best_config"):
        show("kept configuration (the parameters that matter)",
             [Column("parameter"), Column("value", "fold")],
             ((k, fmt_value(k, v)) for k, v in shown_params(run["best_config"]).items()),
             caption=WORKERS_SUM if sums_on_workers(run["best_config"]) else None)


@db.command("trials")
@click.argument("run_id", metavar="RUN")
@db_options
def trials_cmd(run_id: str, db_path: str | None, as_json: bool) -> None:
    """The trials of one run, in order. RUN is a run id, or 'latest'.

    \b
    Examples:
      autotune db trials latest
      autotune db trials 12 --json
    """
    with open_store(db_path) as store:
        run = guard(lambda: store.run(run_id))
        trials = guard(lambda: store.trials(run["id"]))
    unit = unit_of(run.get("unit"))
    if as_json:
        emit_json([{**t, "unit": run.get("unit")} for t in trials])
        return
    # the prior's weight when each trial was proposed, where the run had a prior
    trusted = any(t.get("trust") is not None for t in trials)
    show(f"trials of run {run['id']} (score in {unit}"
         + ("; prior: the physics prior's weight when the trial was proposed" if trusted else "")
         + ")",
         [Column("#", "num"), Column("technique"), Column("iters", "num", 2),
          Column("score", "num"), Column("eff.", "num", 2)]
         + ([Column("prior", "num", 2)] if trusted else [])
         + [Column("wall", "num", 3), Column("error", "fold", 1), Column("config", "fold")],
         ([t["number"], t["technique"], t["iterations"],
           "failed" if t["score"] is None else fmt_number(t["score"]),
           fmt_efficiency(t.get("efficiency"))]
          + ([fmt_trust(t.get("trust"))] if trusted else [])
          + [fmt_seconds(t["wall_time"]), t["error"], fmt_config(t["config"])] for t in trials),
         caption=(f"the run's figures, as db runs and db show give them: kept "
                  f"{figure(run, 'best', unit) or '–'}, default "
                  f"{figure(run, 'default', unit) or '–'}; a trial's score is over its "
                  "own iterations only"
                  + ("; " + WORKERS_SUM if any(sums_on_workers(t["config"]) for t in trials)
                     else "")))


def fmt_trust(trust: float | None) -> str:
    """The prior's weight in a table cell (``–`` where the trial had none)."""
    return "–" if trust is None else f"{trust:.2f}"


@db.command("best")
@click.option("--model", "model_fp", default=None, help="Model fingerprint (or its prefix).")
@click.option("--topology", "topology_fp", default=None, help="Topology fingerprint (or its prefix).")
@click.option("--like", "like", default=None, help="Same model and topology as this run.")
@click.option("--unit", type=click.Choice(UNITS), default=None,
              help="Only runs scored in this unit [default: every unit, one table each].")
@click.option("--limit", type=int, default=10, show_default=True, help="Runs per unit.")
@db_options
def best_cmd(model_fp: str | None, topology_fp: str | None, like: str | None, unit: str | None,
             limit: int, db_path: str | None, as_json: bool) -> None:
    """Best configurations found, best score first.

    Runs scored in different units (samples/s, it/s, simulated ones) are never ranked
    together: each unit gets its own table (its own group in --json, by the "unit" field).
    kept: the kept configuration's mean over its scored iterations, ± their spread.

    \b
    Examples:
      autotune db best
      autotune db best --like latest --unit it/s
      autotune db best --model 3f2a --limit 3 --json
    """
    if like is not None and (model_fp or topology_fp):
        raise click.UsageError("--like cannot be combined with --model/--topology")
    with open_store(db_path) as store:
        rows = guard(lambda: store.best(model=model_fp, topology=topology_fp, like=like,
                                        limit=limit, unit=unit))
    if as_json:
        emit_json([{**r, **_speedup_json(r)} for r in rows])
        return
    groups: dict[str | None, list[dict]] = {}
    for r in rows:
        groups.setdefault(r.get("unit"), []).append(r)
    if not groups:
        click.echo("no finished runs with a best configuration"
                   + (f" in {unit}" if unit else "") + f" in {store.name}")
    for u, group in groups.items():
        show(f"best configurations, in {unit_of(u)}",
             [Column("id", "num"), Column("job"), Column("model", "text", 3),
              Column("topology", "text", 3), Column("kept", "num"), Column("±", "num", 2),
              Column("speed-up", "num", 1), Column("config", "fold")],
             ([r["id"], r["job"], r["model_fp"][:FP_SHORT], r["topology_fp"][:FP_SHORT],
               fmt_number(r["best_score"]), fmt_number(r.get("best_spread")), speedup_text(r),
               fmt_config(r["best_config"])] for r in group))


@db.command("calibrations")
@db_options
def calibrations_cmd(db_path: str | None, as_json: bool) -> None:
    """The tuner's model of each cluster: the simulator's constants as measured at a
    job's start and fitted to its trials, stored under the cluster's key (worker machines,
    workers per machine, servers, device, backend). The next job on alike machines starts
    from them (docs/tuner.md, "The model").

    \b
    Examples:
      autotune db calibrations
      autotune db calibrations --json
    """
    from autotune.sim.calibration import Calibration

    with open_store(db_path) as store:
        rows = guard(store.calibrations.all)
    if as_json:
        emit_json([{**r, "world": json.loads(r["world"]),
                    "calibration": json.loads(r["calibration"])} for r in rows])
        return
    if not rows:
        click.echo(f"no calibration in {store.name} yet: a tuning session with several "
                   "workers stores one when it ends")
        return
    for r in rows:
        world = json.loads(r["world"])
        title = (f"cluster {r['key']}: {world.get('machines')} machine(s) x "
                 f"{world.get('workers_per_machine')} worker(s), {world.get('servers')} "
                 f"server(s), {r['device']}, {r['backend']}; run {r['run']}, "
                 f"{when(r['updated'])}, {r['runs']} run(s)"
                 + (f", fit error {r['fit_error']:.1%}" if r["fit_error"] is not None else ""))
        show(title, [Column("constant", "word"), Column("value", "text"), Column("source", "word")],
             Calibration.from_json(r["calibration"]).describe())


@db.command("similar")
@click.argument("run_id", metavar="RUN")
@click.option("-k", "k", type=int, default=5, show_default=True, help="How many runs.")
@click.option("--all", "all_runs", is_flag=True, help="Include unfinished runs.")
@db_options
def similar_cmd(run_id: str, k: int, all_runs: bool, db_path: str | None, as_json: bool) -> None:
    """Stored runs nearest to a run (graph edit distance of model and cluster).

    RUN is a run id, or 'latest'.

    \b
    Examples:
      autotune db similar latest
      autotune db similar 12 -k 3 --all
    """
    with open_store(db_path) as store:
        near = guard(lambda: store.similar(run_id, k, finished_only=not all_runs))
    if as_json:
        emit_json([{**r, "distance": d} for r, d in near])
        return
    show(f"runs like run {run_id}",
         [Column("id", "num"), Column("distance", "num"), Column("job"), Column("status", "text", 2),
          Column("model", "text", 4), Column("topology", "text", 4), Column("best", "num"),
          Column("unit", "text", 1), Column("config", "fold", 3)],
         ([r["id"], f"{d:.3f}", r["job"], r["status"], r["model_fp"][:FP_SHORT],
           r["topology_fp"][:FP_SHORT], fmt_number(r["best_score"]), unit_of(r.get("unit")),
           fmt_config(r["best_config"])] for r, d in near))


CSV_BASE = ["run", "number", "technique", "iterations", "score", "unit", "error", "wall_time",
            "created", "throughput", "efficiency", "trust"]


def trials_csv(trials: list[dict], unit: str | None = None) -> str:
    """Trials as CSV: raw numbers (score in ``unit``, wall time in seconds, sizes in
    bytes), one column per configuration parameter (``config.<name>``)."""
    params: dict[str, None] = {}
    for t in trials:
        params.update(dict.fromkeys(t["config"] or {}))
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=CSV_BASE + [f"config.{p}" for p in params],
                       lineterminator="\n")
    w.writeheader()
    for t in trials:
        row = {k: t.get(k) for k in CSV_BASE}
        row["unit"] = unit
        row.update({f"config.{p}": v for p, v in (t["config"] or {}).items()})
        w.writerow(row)
    return out.getvalue()


@db.command("export")
@click.argument("run_id", metavar="RUN")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default=None,
              help="json: the run and its trials; csv: the trials, one row each  [default: json]")
@click.option("--out", type=OutFile(), default=None,
              help="Write here instead of standard output.")
@click.option("--optuna", "optuna_url", metavar="STORAGE", default=None,
              help="Write the run as an Optuna study to this storage URL instead "
                   "(e.g. sqlite:///study.db; browse it with optuna-dashboard).")
@click.option("--study-name", default=None,
              help="With --optuna: the study's name  [default: autotune-run-RUN]")
@db_options(json_help="The same as --format json (the default): the run and its trials "
                      "as JSON, printed on standard output (or written to --out).")
def export_cmd(run_id: str, fmt: str | None, out: Path | None, optuna_url: str | None,
               study_name: str | None, db_path: str | None, as_json: bool) -> None:
    """Export a run: JSON (the run and its trials), CSV (its trials), or an Optuna study.

    RUN is a run id, or 'latest'. --json is the same as --format json. Numbers are raw:
    scores in the run's unit (the "unit" field), wall times in seconds, sizes in bytes.

    \b
    Examples:
      autotune db export latest --out run.json
      autotune db export 12 --format csv --out trials.csv
      autotune db export latest --optuna sqlite:///study.db
    """
    if as_json and fmt == "csv":
        raise click.UsageError("--json and --format csv contradict each other; give one")
    if optuna_url is not None and (fmt or as_json or out):
        raise click.UsageError("--optuna writes a study; it takes no --format, --json or --out")
    if study_name is not None and optuna_url is None:
        raise click.UsageError("--study-name goes with --optuna")
    fmt = fmt or "json"
    with open_store(db_path) as store:
        run = guard(lambda: store.run(run_id))
        trials = guard(lambda: store.trials(run["id"]))
    if optuna_url is not None:
        from autotune.store.optuna_export import ExportError, export_study

        try:
            study = export_study(run, trials, optuna_url, study_name)
        except ExportError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"wrote run {run['id']} ({len(trials)} trials) as Optuna study "
                   f"{study.study_name!r} to {shown(optuna_url)}")
        return
    text = trials_csv(trials, run.get("unit")) if fmt == "csv" else json.dumps(
        {"run": run, "trials": trials}, indent=2, sort_keys=True, default=str) + "\n"
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text)
        click.echo(f"wrote {len(trials)} trials of run {run['id']} to {out}", err=True)


def _age(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from autotune.store.db import StoreError, parse_age

    try:
        parse_age(value)
    except StoreError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def _interactive() -> bool:
    return sys.stdin.isatty()


def _age_or_none(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else _age(ctx, param, value)


@db.command("prune")
@click.option("--older-than", "older_than", default=None, callback=_age_or_none,
              help="Age with a unit: 30d, 12h, 90m, 2w.")
@click.option("--status", type=click.Choice(["running", "finished", "failed", "aborted", "abandoned"]),
              default=None, help="Only runs shown with this status (e.g. abandoned).")
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
@db_options(json_help="Print the count as JSON instead of a sentence.")
def prune_cmd(older_than: str | None, status: str | None, dry_run: bool, yes: bool,
              db_path: str | None, as_json: bool) -> None:
    """Delete runs (and their trials) older than an age and/or of a status.

    Give --older-than, --status, or both. Asks before deleting (--yes does not);
    without a terminal to ask on, it refuses unless --yes is given.

    \b
    Examples:
      autotune db prune --older-than 30d --dry-run
      autotune db prune --status abandoned --yes
    """
    if older_than is None and status is None:
        raise click.UsageError("give --older-than AGE, --status STATUS, or both")

    def plural(n: int) -> str:
        return f"{n} run{'s' if n != 1 else ''}"

    what = " and ".join(([f"older than {older_than}"] if older_than else [])
                        + ([f"{status}"] if status else []))
    with open_store(db_path) as store:
        n = guard(lambda: store.prune(older_than, status=status, dry_run=True))
        if not dry_run and n and not yes:
            if not _interactive():
                raise click.ClickException(
                    f"would delete {plural(n)} {what} from {store.name}; "
                    "not asking without a terminal: add --yes to delete (or --dry-run to count)")
            if not click.confirm(f"delete {plural(n)} {what} (and their "
                                 f"trials) from {store.name}?", default=False):
                click.echo("nothing deleted")
                return
        if not dry_run and n:
            n = guard(lambda: store.prune(older_than, status=status))
    if as_json:
        emit_json({"runs": n, "dry_run": dry_run})
    else:
        click.echo(f"{'would delete' if dry_run else 'deleted'} {plural(n)} {what}")


@db.command("close")
@click.argument("run_ids", metavar="RUN...", nargs=-1)
@click.option("--abandoned", is_flag=True, help="Close every abandoned run.")
@click.option("--as", "status", type=click.Choice(["aborted", "failed", "finished"]),
              default="aborted", show_default=True, help="The status to close them with.")
@db_options
def close_cmd(run_ids: tuple[str, ...], abandoned: bool, status: str, db_path: str | None,
              as_json: bool) -> None:
    """Close runs left running (e.g. abandoned: their process is gone) with a finish
    time; their trials are kept. A run already closed is left as it is.

    RUN is a run id, or 'latest'; --abandoned closes every abandoned run.

    \b
    Examples:
      autotune db close --abandoned
      autotune db close 12 --as failed
    """
    if not run_ids and not abandoned:
        raise click.UsageError("give RUN ids, or --abandoned")
    out = []
    with open_store(db_path) as store:
        ids = [guard(lambda r=r: store.run(r))["id"] for r in run_ids]
        if abandoned:
            ids += [r["id"] for r in guard(lambda: store.runs(status="abandoned"))]
        for rid in dict.fromkeys(ids):
            was = guard(lambda: store.run(rid))["status"]
            now_status = guard(lambda: store.close_run(rid, status))
            out.append({"run": rid, "was": was, "status": now_status,
                        "closed": now_status != was})
    if as_json:
        emit_json(out)
        return
    for o in out:
        click.echo(f"run {o['run']}: {o['was']} -> {o['status']}" if o["closed"]
                   else f"run {o['run']}: already {o['status']}, left as it is")
    if not out:
        click.echo("no runs to close")


@db.command("import")
@click.argument("source", metavar="SOURCE")
@db_options
def import_cmd(source: str, db_path: str | None, as_json: bool) -> None:
    """Bring the runs of the store SOURCE (an SQLite file, e.g. the ./autotune.db a job
    recorded in while its shared store was out of reach) into the store --db, with their
    trials. Runs already there are left out, so importing twice copies nothing new. A run
    that went on locally after its store was lost closes the run it continues there as
    abandoned, saying why.

    \b
    Examples:
      autotune db import autotune.db --db postgresql://autotune@db-host/autotune
      autotune db import old-runs.db --json
    """
    from autotune.store.transfer import import_runs

    with open_store(source) as src, open_store(db_path) as dst:
        if src.name == dst.name:
            raise click.UsageError(f"SOURCE and --db are the same store ({dst.name})")
        done = guard(lambda: import_runs(src, dst))
        name = dst.name
    if as_json:
        emit_json([vars(d) for d in done])
        return
    for d in done:
        if d.run_id is None:
            click.echo(f"run {d.source_id}: already in {name}, left out")
        else:
            click.echo(f"run {d.source_id} -> run {d.run_id} in {name}"
                       + (f"; run {d.closed} there, whose store was lost, closed as abandoned"
                          if d.closed is not None else ""))
    if not done:
        click.echo(f"no runs in {source}")
