"""The ``autotune tune`` command: tune before the real job, so it starts warm.

    autotune tune --model resnet50 --workers 2 --servers 1 [--machines 2] [--budget 100]
    autotune tune --model resnet50 --workers 4 --emulate 200mbit        # root: shaped links
    autotune tune --model bert-large --simulate cluster.json            # any size, simulated

Progress shows on stderr through :mod:`autotune.progress`, as a session's does: a bar on
a terminal, plain lines per trial otherwise (local and emulated jobs: rank 0's events,
shown by a :class:`~autotune.progress.Viewer`). See ``docs/tune.md``. Heavy imports (torch)
happen inside the command.

The table and ``--json`` headline the speed-up over DDP (the DDP-like configuration under
``--simulate``; ``--no-compare-ddp`` skips it), then the kept configuration's figure (its
mean over its scored iterations: the tuning's closing line, ``autotune db`` and ``autotune
report`` show the same), the default's and the speed-up over the default, both speed-ups
as :class:`autotune.speedup.Speedup` (refused under 4 scored iterations a side; the
default's is built from the stored run, so ``autotune db runs`` and ``autotune report``
show the same one). The kept configuration re-timed as DDP is (``--verify-iterations``,
what the speed-up over DDP compares) is a second, labelled figure.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any

import click

from autotune.outpath import StoreTarget
from autotune.speedup import Speedup, measure_times
from autotune.store.location import shown
from autotune.tuning.search import TECHNIQUES
from autotune.tuning.tuner import DEFAULT_TECHNIQUES, PRIOR

#: what ``--techniques`` may name: the searchers and the physics prior
TUNE_TECHNIQUES = (*TECHNIQUES, PRIOR)


def _compute_ms(value: str) -> float | str:
    text = str(value).strip().lower()
    if text == "measure":
        return "measure"
    try:
        ms = float(text)
    except ValueError:
        raise click.BadParameter(f"give milliseconds (e.g. 120) or 'measure', got {value!r}",
                                 param_hint="--compute-ms") from None
    if not math.isfinite(ms) or ms < 0:
        raise click.BadParameter(f"must be >= 0 ms, got {value!r}", param_hint="--compute-ms")
    return ms


def _techniques(value: str) -> tuple[str, ...]:
    """``--techniques``: comma-separated names from :data:`TUNE_TECHNIQUES`."""
    names = tuple(t.strip() for t in value.split(",") if t.strip())
    bad = [t for t in names if t not in TUNE_TECHNIQUES]
    if not names or bad:
        raise click.BadParameter(f"choose from {', '.join(TUNE_TECHNIQUES)} (comma-separated), "
                                 f"got {value!r}", param_hint="--techniques")
    return names


def _resolve_model(model: str) -> str:
    """The canonical zoo name, or the factory string after checking that it imports."""
    import os

    from autotune import zoo

    try:
        if zoo.is_factory_spec(model):
            if os.getcwd() not in sys.path:  # factories are looked up from here, like the ranks do
                sys.path.insert(0, os.getcwd())
            zoo.load_factory(model)
            return model
        return zoo.resolve(model)
    except zoo.ZooError as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from None


class _Machines(click.ParamType):
    """``-m/--machines N``: as in ``autotune launch``. Until issue 19 ``-m`` was
    ``--model`` here, so a model name after ``-m`` gets a message saying so."""

    name = "integer"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int):
            return value
        try:
            return int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of machines: -m is --machines (as in "
                      f"autotune launch); give the model with --model {value}", param, ctx)


def _side(r: dict, name: str) -> tuple[Any, Any, Any]:
    """``(mean, spread, iterations)`` of ``name`` (best, default, kept, ddp) in a report."""
    return r.get(f"{name}_score"), r.get(f"{name}_spread"), r.get(f"{name}_iterations")


def _speedups(r: dict) -> tuple[Speedup | None, Speedup]:
    """The report's speed-ups (:mod:`autotune.speedup`): the kept configuration over DDP
    (``None`` without DDP), the headline, and the kept over the default (over the tuning
    trials, as ``autotune db runs`` shows it). Simulated ones are marked so."""
    sim = bool(r.get("simulated"))
    over_ddp = (Speedup.of(_side(r, "kept"), _side(r, "ddp"), simulated=sim)
                if r.get("ddp_score") is not None else None)
    return over_ddp, Speedup.of(_side(r, "best"), _side(r, "default"), simulated=sim)


def _with_speedups(r: dict) -> dict:
    """``r`` with ``speedup_over_ddp`` and ``speedup_over_default``
    (:meth:`~autotune.speedup.Speedup.as_json`; ``speedup_over_ddp`` null without DDP)."""
    over_ddp, over_default = _speedups(r)
    r["speedup_over_ddp"] = over_ddp.as_json() if over_ddp else None
    r["speedup_over_default"] = over_default.as_json()
    return r


def _stored_sides(run: dict) -> dict[str, Any]:
    """The kept and default configurations' means, spreads and iteration counts as the
    store has them (so ``tune``, ``db runs`` and ``report`` show the same figures and
    speed-up), and the stored run the kept configuration came from, if it did."""
    sides = {f"{side}_{what}": run.get(f"{side}_{what}") for side in ("best", "default")
             for what in ("score", "spread", "iterations")}
    return {**sides, "kept_from": run.get("kept_from")}


@click.command("tune")
@click.option("--model", "model", required=True, metavar="NAME|module:attr",
              help="A zoo model (resnet50, bert-large, ...) or a factory 'package.module:attr'.")
@click.option("--workers", "-n", type=int, default=None, help="Worker processes (not with --simulate).")
@click.option("--servers", "-k", type=int, default=0, show_default=True,
              help="Summation Service processes.")
@click.option("--machines", "-m", type=_Machines(), default=None,
              help="Split the workers into this many (emulated) machines; must divide --workers.")
@click.option("--budget", type=int, default=100, show_default=True, help="Tuning iterations.")
@click.option("--db", type=StoreTarget(), metavar="PATH|URL", default=None,
              help="Results store: an SQLite file or a postgresql:// URL (default: $AUTOTUNE_DB or ./autotune.db).")
@click.option("--compute-ms", "compute_ms", default="0", show_default=True, metavar="MS|measure",
              help="Forward+backward time per iteration to emulate, or 'measure' (zoo models: "
                   "a few real steps on this CPU).")
@click.option("--backward-fraction", type=click.FloatRange(0, 1), default=2 / 3,
              show_default="2/3", help="Share of the compute that is the backward pass.")
@click.option("--emulate", metavar="RATE", default=None,
              help="Run on the emulated cluster, one host per machine at RATE (e.g. 200mbit); root only.")
@click.option("--simulate", "simulate", metavar="CLUSTER.json", default=None,
              help="Tune against the simulator for the described cluster instead of real processes.")
@click.option("--compare-ddp/--no-compare-ddp", default=True, show_default=True,
              help="Also time PyTorch DDP on the same job (the DDP-like configuration under "
                   "--simulate): the headline speed-up is over DDP.")
@click.option("--trial-iterations", type=click.IntRange(2, None), default=None,
              help="Iterations per trial (default: the Tuner's).")
@click.option("--verify-iterations", type=click.IntRange(1, None), default=8, show_default=True,
              help="Iterations of the kept configuration after the budget, timed as DDP's "
                   "are (what the speed-up over DDP compares); at least.")
@click.option("--verify-seconds", type=click.FloatRange(0, None), default=2.0,
              show_default=True,
              help="DDP's timing and the kept configuration's each go on until they add up "
                   "to this long (a fast job's few iterations measure noise).")
@click.option("--techniques", default=",".join(DEFAULT_TECHNIQUES), show_default=True,
              metavar="NAME[,NAME...]",
              help=f"Search techniques, comma-separated, from: {', '.join(TUNE_TECHNIQUES)} "
                   "(prior: the physics prior's own proposals; tpe and optuna-gp need optuna).")
@click.option("--seed", type=int, default=0, show_default=True, help="The Tuner's seed.")
@click.option("--allow-lossy", is_flag=True, help="Let compression codecs into the space.")
@click.option("--fix", "fix", multiple=True, metavar="KNOB=VALUE[,VALUE...]",
              help="Pin a knob (chunk_bytes=4MiB) or narrow it (streams=1,2,4); repeatable.")
@click.option("--noise", type=click.FloatRange(0, 0.5), default=0.03, show_default=True,
              help="--simulate: relative measurement noise of one iteration.")
@click.option("--batch", type=click.IntRange(1, None), default=32, show_default=True,
              help="--simulate: samples per worker per iteration (scores are samples/s).")
@click.option("--max-memory", type=click.FloatRange(0, None, min_open=True), default=None,
              metavar="GiB", help="Refuse local jobs needing more (default: half the free memory).")
@click.option("--timeout", type=click.FloatRange(1, None), default=3600.0, show_default=True,
              help="Seconds the whole local job may take.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def tune(**options: Any) -> None:
    """Tune the gradient communication of a model before the real job runs.

    Runs a synthetic job with the model's real gradient shapes through the same session
    the training loop uses (on local processes, or on the emulated cluster), or the same
    Tuner against the cluster simulator, and stores the run so that a later
    autotune.session() with this model and world starts from its best configuration.

    \b
    Examples:
      autotune tune --model resnet50 --workers 2 --budget 40
      autotune tune --model my_pkg.models:make_net --workers 4 --compute-ms 120
      autotune tune --model bert-large --simulate cluster.json --techniques grid,bayes
    """
    import signal

    from autotune.signals import TerminateAsInterrupt, exit_code
    from autotune.store.db import StoreError

    req = _checked(TuneOptions(**options))
    try:
        # Ctrl-C or SIGTERM: the run is closed as aborted (by the leader rank, which the
        # launcher stops with SIGTERM, or by the simulated tuner, between two trials),
        # then exit 130 or 143
        with TerminateAsInterrupt((signal.SIGINT, signal.SIGTERM)):
            report = _simulated(req) if req.options.simulate is not None else _local(req)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt as exc:
        code = exit_code(exc)
        click.echo(f"autotune tune: {'stopped by SIGTERM' if code == 143 else 'interrupted'}; "
                   "the run was closed as aborted", err=True)
        sys.exit(code)
    if req.options.as_json:
        click.echo(json.dumps(report, indent=1, default=str))
    else:
        _print_summary(report)


# ------------------------------------------------------------------------------ checking
@dataclass(frozen=True)
class TuneOptions:
    """The options of ``autotune tune`` as click parsed them (one field per option)."""

    model: str
    workers: int | None
    servers: int
    machines: int | None
    budget: int
    db: str | None
    compute_ms: str
    backward_fraction: float
    emulate: str | None
    simulate: str | None
    compare_ddp: bool
    trial_iterations: int | None
    verify_iterations: int
    verify_seconds: float
    techniques: str
    seed: int
    allow_lossy: bool
    fix: tuple[str, ...]
    noise: float
    batch: int
    max_memory: float | None
    timeout: float
    as_json: bool


@dataclass(frozen=True)
class _Request:
    """A checked ``autotune tune``: its options, the resolved model (canonical zoo name or
    factory), techniques, compute time (ms), store path and, with ``--simulate``, the
    cluster to simulate."""

    options: TuneOptions
    model: str
    techniques: tuple[str, ...]
    compute_ms: float
    db: str
    cluster: Any = None
    fixed: dict[str, Any] = field(default_factory=dict)


def _checked(o: TuneOptions) -> _Request:
    """Check the options (usage errors before anything starts) and resolve them."""
    from autotune.store.db import default_path

    techs = _techniques(o.techniques)
    cms = _compute_ms(o.compute_ms)
    if o.budget < 1:
        raise click.BadParameter(f"must be >= 1 iteration, got {o.budget}", param_hint="--budget")
    db_path = str(o.db) if o.db is not None else str(default_path())
    cluster = None
    if o.simulate is not None:
        cluster = _simulated_cluster(o)
    else:
        _check_local_world(o)
    fixed = _fixed(o, cluster)
    if cluster is None:  # local or emulated ranks: forked from this process
        from autotune import forked

        forked.preload()  # torch's first import here, once the options are checked
    name = _resolve_model(o.model)
    if cms == "measure":
        if ":" in name:
            raise click.BadParameter("'measure' needs a zoo model; give milliseconds for a "
                                     "factory", param_hint="--compute-ms")
        from autotune.workload import measure_compute_ms

        with _status(o.as_json, f"measuring {name}'s compute on this CPU"):
            cms = measure_compute_ms(name)
    return _Request(options=o, model=name, techniques=techs, compute_ms=float(cms), db=db_path,
                    cluster=cluster, fixed=fixed)


def _fixed(o: TuneOptions, cluster: Any) -> dict[str, Any]:
    """``--fix``: the pinned knobs, checked against this job's space (what its world can
    run) before anything starts."""
    from autotune.runtime.config import ConfigError
    from autotune.tuning.space import SearchSpace
    from autotune.units import parse_knob

    fixed: dict[str, Any] = {}
    for text in o.fix:
        try:
            name, value = parse_knob(text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--fix") from None
        if name in fixed:
            raise click.BadParameter(f"{name} is fixed twice", param_hint="--fix")
        fixed[name] = value
    if not fixed:
        return fixed
    try:
        if cluster is not None:
            cluster.space(allow_lossy=o.allow_lossy, fixed=fixed)
        else:
            SearchSpace.build(k_max=o.servers, allow_lossy=o.allow_lossy, fixed=fixed,
                              workers_per_machine=o.workers // (o.machines or o.workers))
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--fix") from None
    return fixed


def _simulated_cluster(o: TuneOptions) -> Any:
    """``--simulate``: the cluster file's :class:`~autotune.sim.ClusterSpec` (the world comes
    from it, so no world options)."""
    given = [n for n, v in (("--workers", o.workers), ("--machines", o.machines),
                            ("--emulate", o.emulate)) if v is not None]
    if o.servers:
        given.append("--servers")
    if given:
        raise click.UsageError(f"--simulate takes the world from the cluster file; drop "
                               f"{', '.join(given)} (set machines, workers_per_machine and "
                               f"server_machines in the JSON)")
    from autotune.sim import ClusterSpec, ClusterError

    try:
        return ClusterSpec.from_json(o.simulate)
    except ClusterError as exc:
        raise click.BadParameter(str(exc), param_hint="--simulate") from None


def _check_local_world(o: TuneOptions) -> None:
    """Local processes (or the emulated cluster): the world options and ``--emulate``."""
    if o.workers is None:
        raise click.UsageError("give --workers N (local processes), or --simulate cluster.json")
    if o.workers < 1:
        raise click.BadParameter(f"must be >= 1, got {o.workers}", param_hint="--workers")
    if o.servers < 0:
        raise click.BadParameter(f"must be >= 0, got {o.servers}", param_hint="--servers")
    if o.machines is not None and (o.machines < 1 or o.workers % o.machines):
        raise click.BadParameter(f"{o.machines} must divide --workers {o.workers} (same workers "
                                 "per machine)", param_hint="--machines")
    if o.emulate is not None:
        from autotune.emulate import ShapingError, parse_rate, unavailable_reason

        try:
            parse_rate(o.emulate)
        except ShapingError as exc:
            raise click.BadParameter(str(exc), param_hint="--emulate") from None
        reason = unavailable_reason()
        if reason is not None:
            raise click.UsageError(f"--emulate cannot run here: {reason}. Drop --emulate to "
                                   "tune on local processes, or use --simulate.")


# ------------------------------------------------------------------------------ running
class _status:
    """A rich spinner on stderr (nothing with --json)."""

    def __init__(self, quiet: bool, text: str) -> None:
        self.quiet, self.text, self._ctx = quiet, text, None

    def __enter__(self) -> None:
        if not self.quiet:
            from rich.console import Console

            self._ctx = Console(stderr=True).status(self.text)
            self._ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)


def _local(req: _Request) -> dict:
    from autotune import progress, zoo
    from autotune.offline.local import LocalTune, TuneError, memory_check, tune_local
    from autotune.workload import gradient_bytes

    o, name = req.options, req.model
    try:
        grad_bytes = gradient_bytes(zoo.build(name, device="meta"))
        memory_check(name, grad_bytes, o.workers, o.servers,
                     int(o.max_memory * (1 << 30)) if o.max_memory else None)
    except (TuneError, zoo.ZooError) as exc:
        raise click.UsageError(str(exc)) from None
    tune = LocalTune(model=name, workers=o.workers, servers=o.servers, machines=o.machines,
                     budget=o.budget, db=req.db, compute_ms=req.compute_ms,
                     backward_fraction=o.backward_fraction, seed=o.seed,
                     techniques=req.techniques, trial_iterations=o.trial_iterations,
                     allow_lossy=o.allow_lossy, timeout=o.timeout, emulate=o.emulate,
                     job=f"tune:{name}", verify_iterations=o.verify_iterations,
                     verify_seconds=o.verify_seconds, compare_ddp=o.compare_ddp,
                     fixed=req.fixed)
    where = f"emulated cluster at {o.emulate}" if o.emulate else "this machine"
    # rank 0's events, shown on stderr (a bar on a terminal, else lines); the mode is
    # chosen here, before the ranks' environment (AUTOTUNE_PROGRESS=events) is set
    viewer = None if o.as_json else progress.Viewer(out=sys.stderr)
    if viewer is not None:
        progress.message(f"autotune tune: starting {o.workers} worker(s) + {o.servers} "
                         f"server(s) on {where}", sys.stderr)
    try:
        res = tune_local(tune, on_event=None if viewer is None else viewer.event)
    except TuneError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if viewer is not None:
            viewer.close()
    run = res["run"]
    kept = measure_times(res["verify_times_s"])
    ddp = measure_times(res["ddp"]["times_s"]) if res.get("ddp") else (None, None, None)
    failed = sum(1 for t in res["trials"] if t["score"] is None)
    return _with_speedups({
        "mode": "emulated" if o.emulate else "local", "model": name, "gradient_bytes": grad_bytes,
        "world": res["world"], "emulate_rate": o.emulate, "compute_ms": req.compute_ms,
        "budget": o.budget, "unit": "it/s", "best": res["best"], **_stored_sides(run),
        "kept": res["kept"], "kept_score": kept[0], "kept_spread": kept[1],
        "kept_iterations": kept[2], "kept_timed_s": sum(res["verify_times_s"]),
        "ddp_score": ddp[0], "ddp_spread": ddp[1], "ddp_iterations": ddp[2],
        "ddp_timed_s": sum(res["ddp"]["times_s"]) if res.get("ddp") else None,
        "trials": len(res["trials"]), "failed_trials": failed,
        "run_id": run["id"], "db": shown(req.db), "model_fp": run["model_fp"], "topology_fp": run["topology_fp"],
        "simulated": False, "wall_s": res["wall_s"], "history": res["history"],
    })


def _simulated(req: _Request) -> dict:
    from autotune.offline.simulated import tune_simulated

    o, name = req.options, req.model
    display = None
    if not o.as_json:
        from autotune import progress

        progress.message(f"autotune tune: {name} on the simulated cluster {o.simulate}",
                         sys.stderr)
        display = progress.tuning_display(o.budget, out=sys.stderr)
    res = tune_simulated(name, req.cluster, budget=o.budget, db=req.db,
                         compute_ms=req.compute_ms, backward_fraction=o.backward_fraction,
                         batch_per_worker=o.batch, seed=o.seed, techniques=req.techniques,
                         trial_iterations=o.trial_iterations, noise=o.noise,
                         allow_lossy=o.allow_lossy, fixed=req.fixed, display=display)
    run = res["run"]
    sides = _stored_sides(run)
    return _with_speedups({
        "mode": "simulated", "model": name, "world": res["world"], "compute_ms": req.compute_ms,
        "budget": o.budget, "unit": "samples/s", "best": res["best"], **sides,
        # the kept configuration is the best of the trials: no separate re-timing
        "kept": res["best"], "kept_score": sides["best_score"],
        "kept_spread": sides["best_spread"], "kept_iterations": sides["best_iterations"],
        "ddp_score": res["ddp_like_score"] if o.compare_ddp else None,
        "ddp_spread": res["ddp_like_spread"] if o.compare_ddp else None,
        "ddp_iterations": sides["best_iterations"] if o.compare_ddp else None,
        "predicted": res["predicted"], "warm_start": res["warm_start"],
        "trials": len(res["trials"]), "failed_trials": 0,
        "run_id": run["id"], "db": shown(req.db), "model_fp": run["model_fp"], "topology_fp": run["topology_fp"],
        "simulated": True,
    })


# ------------------------------------------------------------------------------ output
def _score(r: dict, name: str, unit: str) -> str:
    """``name``'s mean ± spread with its iteration count (measured runs only: a simulated
    draw is no measurement), ``-`` when there is none."""
    from autotune.units import fmt_score

    mean, spread, n = _side(r, name)
    if mean is None:
        return "-"
    if r.get("simulated"):
        return fmt_score(mean, unit)
    return fmt_score(mean, unit, spread) + ("" if n is None else f" ({n} iterations)")


def _print_summary(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from autotune.units import fmt_seconds, fmt_value, shown_params

    w = r["world"]
    where = {"local": "local processes", "emulated": f"emulated cluster at {r.get('emulate_rate')}",
             "simulated": "simulated cluster (predicted)"}[r["mode"]]
    title = (f"autotune tune: {r['model']} on {w['workers']} worker(s) + {w['servers']} server(s), "
             f"{w['machines']} machine(s), {where}")
    sim = r["mode"] == "simulated"
    unit = ("simulated " if sim and not r["unit"].startswith("simulated") else "") + r["unit"]
    t = Table(title=title)
    t.add_column("")
    t.add_column("value")
    for k, v in shown_params(r["best"]).items():
        t.add_row(k, fmt_value(k, v))
    over_ddp, over_default = _speedups(r)
    retimed = "kept config, re-timed as DDP is"  # a second figure, for the DDP comparison
    if over_ddp is not None:  # the headline: over DDP
        t.add_row("DDP" + ("-like (simulated)" if sim else " (gloo, default buckets)"),
                  _score(r, "ddp", unit))
        if not sim:
            t.add_row(retimed, _score(r, "kept", unit))
        sp = over_ddp.shown() or "-"
        if sim and over_ddp.ratio:
            sp += (" [dim](caveat: the simulated DDP is a flat ring all-reduce, 25 MiB "
                   "buckets, one stream; real DDP/NCCL may use trees or hierarchies and do "
                   "better)[/]")
        t.add_row("[bold]speed-up over DDP[/]", sp)
    elif not sim:
        t.add_row(retimed, _score(r, "kept", unit))
    # the kept figure: as the tuning's closing line, autotune db and autotune report
    t.add_row("kept config", _score(r, "best", unit))
    if r.get("kept_from"):
        from autotune.store.origin import fmt_origin

        t.add_row("kept config from the store", fmt_origin(r["kept_from"]))
    t.add_row("default config", _score(r, "default", unit))
    t.add_row("speed-up over the default", over_default.shown() or "-")
    if sim:
        p = r["predicted"]["best"]
        t.add_row("predicted step (noise-free)",
                  f"{fmt_seconds(p['step_s'])}, bottleneck {p['bottleneck']}")
    t.add_row("trials", f"{r['trials']} ({r['failed_trials']} failed)")
    t.add_row("stored", f"run {r['run_id']} in {r['db']}" + (" (simulated)" if sim else ""))
    t.add_row("fingerprints", f"model {r['model_fp'][:12]}, topology {r['topology_fp'][:12]}")
    Console().print(t)
