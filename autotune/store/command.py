"""``autotune db``: look into the results store from the command line.

Every subcommand takes ``--db PATH`` (default: ``$AUTOTUNE_DB`` or ``./autotune.db``)
and ``--json`` (machine-readable output instead of rich tables). A missing, empty
(0-byte), foreign or corrupt file is a clear error (exit code 1) and is never created or
changed (only ``prune`` writes); a file or directory this user may not write says so
("read-only").

Heavy imports (sqlite-utils, networkx) happen inside the commands, so ``autotune``
starts fast.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import click

if TYPE_CHECKING:  # pragma: no cover
    from autotune.store.db import Store

FP_SHORT = 10


def db_options(fn: Callable) -> Callable:
    fn = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(fn)
    fn = click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path),
                      default=None, help="Database file [default: $AUTOTUNE_DB or ./autotune.db].")(fn)
    return fn


def open_store(db_path: Path | None) -> "Store":
    from autotune.store.db import Store, StoreError

    try:
        return Store(db_path, create=False)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


def _guard(fn: Callable[[], Any]) -> Any:
    from autotune.store.db import StoreError

    try:
        return fn()
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


def _table(title: str, columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold", justify="right" if c in {"id", "#", "score", "best",
                                                                   "default", "speed-up", "trials",
                                                                   "iters", "wall s", "distance"} else "left")
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200).print(t)


def _num(x: float | None, digits: int = 4) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def _speedup(run: dict) -> str:
    b, d = run.get("best_score"), run.get("default_score")
    return f"{b / d:.2f}x" if b is not None and d else ""


def _config_text(cfg: dict | None) -> str:
    if not cfg:
        return ""
    return " ".join(f"{k}={v}" for k, v in cfg.items())


def _world(run: dict) -> str:
    return f"{run.get('workers') or 0}w/{run.get('servers') or 0}s/{run.get('machines') or 0}m"


@click.group("db")
def db() -> None:
    """Inspect the results store: runs, trials, best configurations."""


@db.command("runs")
@click.option("--status", type=click.Choice(["running", "finished", "failed", "aborted"]), default=None)
@click.option("--job", default=None, help="Only runs of this job name.")
@click.option("--limit", type=int, default=50, show_default=True)
@db_options
def runs_cmd(status: str | None, job: str | None, limit: int, db_path: Path | None, as_json: bool) -> None:
    """List runs, newest first."""
    with open_store(db_path) as store:
        rows = _guard(lambda: store.runs(status=status, job=job, limit=limit))
        counts = _guard(store.trial_counts)
    if as_json:
        _emit_json([{**r, "trials": counts.get(r["id"], 0)} for r in rows])
        return
    _table(f"runs in {store.path}", ["id", "created", "job", "status", "world", "backend", "model",
                                     "topology", "trials", "best", "default", "speed-up"],
           ([r["id"], (r["created"] or "")[:16].replace("T", " "), r["job"], r["status"], _world(r),
             r["backend"], r["model_fp"][:FP_SHORT], r["topology_fp"][:FP_SHORT],
             counts.get(r["id"], 0), _num(r["best_score"]), _num(r["default_score"]), _speedup(r)]
            for r in rows))


@db.command("show")
@click.argument("run_id")
@db_options
def show_cmd(run_id: str, db_path: Path | None, as_json: bool) -> None:
    """Everything about one run."""
    with open_store(db_path) as store:
        run = _guard(lambda: store.run(run_id))
        n = _guard(store.trial_counts).get(run["id"], 0)
    if as_json:
        _emit_json({**run, "trials": n})
        return
    fields = [(k, v) for k, v in run.items() if k not in ("best_config", "world", "space_facts")]
    fields += [("world", json.dumps(run["world"])), ("space facts", json.dumps(run["space_facts"])),
               ("trials", n), ("speed-up", _speedup(run))]
    _table(f"run {run['id']}", ["field", "value"], fields)
    if run.get("best_config"):
        _table("best configuration", ["parameter", "value"], run["best_config"].items())


@db.command("trials")
@click.argument("run_id")
@db_options
def trials_cmd(run_id: str, db_path: Path | None, as_json: bool) -> None:
    """The trials of one run, in order."""
    with open_store(db_path) as store:
        trials = _guard(lambda: store.trials(run_id))
    if as_json:
        _emit_json(trials)
        return
    _table(f"trials of run {run_id}", ["#", "technique", "iters", "score", "wall s", "error", "config"],
           ([t["index"], t["technique"], t["iterations"], _num(t["score"]), _num(t["wall_time"], 3),
             t["error"], _config_text(t["config"])] for t in trials))


@db.command("best")
@click.option("--model", "model_fp", default=None, help="Model fingerprint (or its prefix).")
@click.option("--topology", "topology_fp", default=None, help="Topology fingerprint (or its prefix).")
@click.option("--like", "like", default=None, help="Same model and topology as this run.")
@click.option("--limit", type=int, default=10, show_default=True)
@db_options
def best_cmd(model_fp: str | None, topology_fp: str | None, like: str | None, limit: int,
             db_path: Path | None, as_json: bool) -> None:
    """Best configurations found, best score first."""
    if like is not None and (model_fp or topology_fp):
        raise click.UsageError("--like cannot be combined with --model/--topology")
    with open_store(db_path) as store:
        rows = _guard(lambda: store.best(model=model_fp, topology=topology_fp, like=like, limit=limit))
    if as_json:
        _emit_json(rows)
        return
    _table("best configurations", ["id", "job", "model", "topology", "best", "speed-up", "config"],
           ([r["id"], r["job"], r["model_fp"][:FP_SHORT], r["topology_fp"][:FP_SHORT],
             _num(r["best_score"]), _speedup(r), _config_text(r["best_config"])] for r in rows))


@db.command("similar")
@click.argument("run_id")
@click.option("-k", "k", type=int, default=5, show_default=True, help="How many runs.")
@click.option("--all", "all_runs", is_flag=True, help="Include unfinished runs.")
@db_options
def similar_cmd(run_id: str, k: int, all_runs: bool, db_path: Path | None, as_json: bool) -> None:
    """Stored runs nearest to a run (graph edit distance of model and cluster)."""
    with open_store(db_path) as store:
        near = _guard(lambda: store.similar(run_id, k, finished_only=not all_runs))
    if as_json:
        _emit_json([{**r, "distance": d} for r, d in near])
        return
    _table(f"runs like run {run_id}", ["id", "distance", "job", "status", "model", "topology",
                                       "best", "config"],
           ([r["id"], f"{d:.3f}", r["job"], r["status"], r["model_fp"][:FP_SHORT],
             r["topology_fp"][:FP_SHORT], _num(r["best_score"]), _config_text(r["best_config"])]
            for r, d in near))


def trials_csv(trials: list[dict]) -> str:
    """Trials as CSV, one column per configuration parameter (``config.<name>``)."""
    params: dict[str, None] = {}
    for t in trials:
        params.update(dict.fromkeys(t["config"] or {}))
    base = ["run", "index", "technique", "iterations", "score", "error", "wall_time", "created"]
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=base + [f"config.{p}" for p in params], lineterminator="\n")
    w.writeheader()
    for t in trials:
        row = {k: t.get(k) for k in base}
        row.update({f"config.{p}": v for p, v in (t["config"] or {}).items()})
        w.writerow(row)
    return out.getvalue()


@db.command("export")
@click.argument("run_id")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="json", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here instead of standard output.")
@db_options
def export_cmd(run_id: str, fmt: str, out: Path | None, db_path: Path | None, as_json: bool) -> None:
    """A run and its trials as JSON, or its trials as CSV (``--json`` = ``--format json``)."""
    if as_json:
        fmt = "json"
    with open_store(db_path) as store:
        run = _guard(lambda: store.run(run_id))
        trials = _guard(lambda: store.trials(run_id))
    text = trials_csv(trials) if fmt == "csv" else json.dumps(
        {"run": run, "trials": trials}, indent=2, sort_keys=True, default=str) + "\n"
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text)
        click.echo(f"wrote {len(trials)} trials of run {run['id']} to {out}", err=True)


@db.command("prune")
@click.option("--older-than", "older_than", required=True, help="Age, e.g. 30d, 12h, 2w.")
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@db_options
def prune_cmd(older_than: str, dry_run: bool, db_path: Path | None, as_json: bool) -> None:
    """Delete runs (and their trials) older than an age."""
    with open_store(db_path) as store:
        n = _guard(lambda: store.prune(older_than, dry_run=dry_run))
    if as_json:
        _emit_json({"runs": n, "dry_run": dry_run})
    else:
        click.echo(f"{'would delete' if dry_run else 'deleted'} {n} run{'s' if n != 1 else ''} "
                   f"older than {older_than}")
