"""Tuning quality at equal budget: the Tuner against each technique alone and baselines.

Two suites of objectives (``--suite``): ``measured``, the tables that
``benchmarks/record_tables.py`` measured on the emulated cluster, replayed by
``benchmarks/measured.py`` (every score a real measurement, the prior built as a session
builds it; these judge the tuner on data it was not built from), and ``analytic``, the
step-time models of ``benchmarks/objectives.py`` (2-5 % noise; they share their physics
with the prior, so they flatter it). On every objective each method gets the same budget
of training iterations (100, as in the AIACC-Training paper (ICDCS 2022)) through the same :class:`Tuner` loop:

- ``tuner``: the Tuner as a session runs it: the physics prior (the simulator on what the
  job knows, :meth:`Scenario.prior`) calibrated online, then grid, PBT, Bayes and
  Hyperband under the AUC bandit, every proposal screened by the calibrated prior;
- ``ensemble``: the same ensemble without the prior;
- ``prior``, ``grid``, ``pbt``, ``bayes``, ``hyperband``: each technique alone;
- ``random``: random search; ``tpe`` and ``gp``: Optuna's TPE and GP samplers alone.

The figure of merit is the normalised regret of the configuration a method keeps,
``1 - throughput(kept) / throughput(optimum)`` on the noise-free model, the optimum
found by evaluating every configuration. The table shows per objective the median over
seeds; the summary the median over all runs (objectives x seeds), the share of runs within
1 % of the optimum, the median iterations until the held best reaches 95 % of the optimum,
the tuning cost (mean relative slowdown of the trials' configurations against the
optimum), ratios against the better of Optuna's TPE and GP and the best single
technique, and a paired Wilcoxon test of the tuner against each method. Results go to
``benchmarks/results/tuner_bench.json``.

    python benchmarks/tuner_bench.py            # full: 10 seeds
    python benchmarks/tuner_bench.py --quick    # 2 seeds, for the demo
    python benchmarks/tuner_bench.py --methods tuner,tpe --tuner-options '{"window": 100}'
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from measured import load_all  # noqa: E402
from objectives import SCENARIOS  # noqa: E402

from autotune.tuning.tuner import DEFAULT_TECHNIQUES, Tuner  # noqa: E402

SINGLE = ("prior", *DEFAULT_TECHNIQUES)
METHODS: dict[str, tuple[str, ...]] = {
    "tuner": DEFAULT_TECHNIQUES,           # the Tuner as a session runs it: with the prior
    "ensemble": DEFAULT_TECHNIQUES,        # the same without the prior (as before it)
    **{t: (t,) for t in SINGLE},
    "random": ("random",),
    "tpe": ("tpe",),
    "gp": ("optuna-gp",),
}
WITH_PRIOR = ("tuner", "prior")
ENSEMBLES = ("tuner", "ensemble")  # what --tuner-options changes
ANCHORS = ("tpe", "gp")
RESULTS = Path(__file__).resolve().parent / "results" / "tuner_bench.json"
# every objective, analytic then measured; worker processes index into it
OBJECTIVES = [*SCENARIOS, *load_all()]
SUITES = {"analytic": [i for i, o in enumerate(OBJECTIVES) if not hasattr(o, "table")],
          "measured": [i for i, o in enumerate(OBJECTIVES) if hasattr(o, "table")]}
SUITES["both"] = SUITES["measured"] + SUITES["analytic"]


def _optimum(si: int) -> tuple[int, dict, float]:
    config, value = OBJECTIVES[si].optimum
    return si, config, value


def _run(si: int, method: str, seed: int, budget: int, optimum: float, kwargs: dict) -> dict:
    sc = OBJECTIVES[si]
    rng = np.random.default_rng([seed, si])  # same noise stream for every method
    t0 = time.process_time()
    prior = {"prior": sc.prior()} if method in WITH_PRIOR else {}
    tuner = Tuner(sc.space, budget=budget,
                  **{"techniques": METHODS[method], "seed": seed, **prior, **kwargs})
    spent, to95, cost = 0, None, 0.0
    while (trial := tuner.ask()) is not None:
        tuner.tell(trial, sc.measure(trial.config, trial.iterations, rng))
        spent += trial.iterations
        cost += trial.iterations * (1.0 - sc.throughput(trial.config) / optimum)
        held = tuner.best
        if to95 is None and held and sc.throughput(held[0]) >= 0.95 * optimum:
            to95 = spent
    best = tuner.best
    regret = 1.0 - sc.throughput(best[0]) / optimum if best else 1.0
    return {
        "scenario": sc.name, "method": method, "seed": seed, "regret": regret,
        "iterations_to_95": to95 if to95 is not None else budget + 1,
        "tuning_cost": cost / max(1, spent), "screened": tuner.screened,
        "overruled": tuner.overruled,
        "trials": len(tuner.history), "cpu_s": time.process_time() - t0, "best": best[0] if best else None,
    }


def _warm(si: int, seed: int, budget: int, optimum: float) -> dict:
    """Warm start from a similar stored job: tune a neighbour of the objective (25 % more
    gradient bytes, 20 % more compute, the NIC 20 % slower, other noise), then start the
    objective's Tuner from that run's best, as the session does with the store's nearest
    job. Returned: the share of the optimum the held best reaches after 6 iterations."""
    from dataclasses import replace

    sc = OBJECTIVES[si]
    similar = replace(sc, model_mb=sc.model_mb * 1.25, fwd_ms=sc.fwd_ms * 1.2,
                      bwd_ms=sc.bwd_ms * 1.2, nic_gbps=sc.nic_gbps * 0.8)
    rng = np.random.default_rng([seed, si, 7])
    before = Tuner(similar.space, budget=budget, seed=seed, prior=similar.prior())
    stored = before.run(lambda c, it: similar.measure(c, it, rng))
    tuner = Tuner(sc.space, budget=budget, seed=seed + 1, prior=sc.prior(),
                  warm_start=[stored[0]] if stored else [])
    spent, at6 = 0, None
    while (trial := tuner.ask()) is not None and spent < 6:
        tuner.tell(trial, sc.measure(trial.config, trial.iterations, rng))
        spent += trial.iterations
        if spent >= 6 and at6 is None:
            at6 = sc.throughput(tuner.best[0]) / optimum if tuner.best else 0.0
    return {"scenario": sc.name, "seed": seed, "share_at_6": at6 or 0.0,
            "stored_share": sc.throughput(stored[0]) / optimum if stored else 0.0}


def _paired(runs: list[dict], methods: list[str], console: Console) -> dict[str, dict]:
    """Wilcoxon signed-rank test of the tuner's regret against each other method, paired
    by (objective, seed): the same noise stream for both."""
    from scipy.stats import wilcoxon

    regret = {(r["scenario"], r["seed"], r["method"]): r["regret"] for r in runs}
    pairs = sorted({(sc, seed) for sc, seed, _ in regret})
    out = {}
    for m in methods:
        if m == "tuner":
            continue
        a = [regret[(sc, s, "tuner")] for sc, s in pairs]
        b = [regret[(sc, s, m)] for sc, s in pairs]
        diff = [x - y for x, y in zip(a, b)]
        if not any(diff):
            out[m] = {"n": len(a), "p": 1.0, "tuner_better": 0, "tuner_worse": 0}
            continue
        res = wilcoxon(a, b, zero_method="zsplit")
        out[m] = {"n": len(a), "p": float(res.pvalue),
                  "tuner_better": sum(d < 0 for d in diff), "tuner_worse": sum(d > 0 for d in diff)}
        console.print(f"Wilcoxon tuner vs {m}: p = {res.pvalue:.2g} (tuner better in "
                      f"{out[m]['tuner_better']}, worse in {out[m]['tuner_worse']} of {len(a)} pairs)")
    return out


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return 1.0 if a == 0 else float("inf")
    return a / b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds (about 1-3 minutes)")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per objective (default 10, quick 2)")
    ap.add_argument("--budget", type=int, default=100, help="training iterations per method")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset")
    ap.add_argument("--trial-iterations", type=int, default=None,
                    help="iterations per trial for every method (default: the Tuner's)")
    ap.add_argument("--tuner-options", type=json.loads, default={}, metavar="JSON",
                    help='extra Tuner arguments for the "tuner" and "ensemble" methods, e.g. \'{"window": 100, "C": 0.05}\' '
                         'or \'{"techniques": ["grid", "pbt", "tpe", "hyperband"]}\'')
    ap.add_argument("--no-warm", dest="warm", action="store_false",
                    help="skip the warm-start measurement")
    ap.add_argument("--suite", choices=sorted(SUITES), default="both",
                    help="measured tables, analytic models, or both (default)")
    ap.add_argument("--scenarios", default=None,
                    help="comma-separated objective names (default: all of the suite)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if not isinstance(args.tuner_options, dict):
        ap.error("--tuner-options must be a JSON object")
    common = {} if args.trial_iterations is None else {"trial_iterations": args.trial_iterations}
    seeds = args.seeds or (2 if args.quick else 10)
    names = [n.strip() for n in args.scenarios.split(",")] if args.scenarios else None
    suite = SUITES[args.suite]
    unknown = sorted(set(names or ()) - {OBJECTIVES[si].name for si in suite})
    if unknown:
        ap.error(f"--scenarios: unknown {', '.join(unknown)}; choose from "
                 f"{', '.join(OBJECTIVES[si].name for si in suite)}")
    chosen = [si for si in suite if names is None or OBJECTIVES[si].name in names]
    if not chosen:
        ap.error(f"no objective in suite {args.suite!r}"
                 + (" (record tables with benchmarks/record_tables.py)" if args.suite == "measured" else ""))
    methods = [m for m in args.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        ap.error(f"unknown method(s) {bad}; choose from {', '.join(METHODS)}")

    console = Console()
    console.print(
        f"[bold]Tuner benchmark[/]: {len(chosen)} objectives ({args.suite}) x {seeds} seeds, "
        f"budget {args.budget} iterations, methods {', '.join(methods)}"
        + (f", trial_iterations {args.trial_iterations}" if common else "")
        + (f", tuner options {json.dumps(args.tuner_options)}" if args.tuner_options else "")
    )
    correlation = {}
    for si in chosen:
        if si in SUITES["measured"]:
            job = OBJECTIVES[si]
            correlation[job.name] = job.rank_correlation()
            console.print(f"{job.name}: {job.measured} measured configurations; the simulator's "
                          f"rank correlation with them: Kendall tau "
                          f"{correlation[job.name]['kendall_tau']:.2f}, Spearman rho "
                          f"{correlation[job.name]['spearman_rho']:.2f}")
    t_start = time.time()
    runs: list[dict] = []
    optima: dict[int, float] = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with ProcessPoolExecutor(args.workers) as pool, Progress(*columns, console=console) as progress:
        task = progress.add_task("exhaustive optima", total=len(chosen))
        for fut in as_completed([pool.submit(_optimum, si) for si in chosen]):
            si, _, value = fut.result()
            optima[si] = value
            progress.advance(task)
        # warm start is judged on the analytic objectives (it needs a similar job)
        warm_futures = [pool.submit(_warm, si, s, args.budget, optima[si])
                        for s in range(seeds) for si in chosen
                        if si in SUITES["analytic"]] if args.warm else []
        jobs = [(si, m, s) for s in range(seeds) for si in chosen for m in methods]
        progress.update(task, description="tuning runs", completed=0, total=len(jobs))
        futures = [pool.submit(_run, si, m, s, args.budget, optima[si],
                               {**common, **(args.tuner_options if m in ENSEMBLES else {})})
                   for si, m, s in jobs]
        for fut in as_completed(futures):
            runs.append(fut.result())
            progress.advance(task)
        warm = [f.result() for f in warm_futures]
    wall = time.time() - t_start

    by = {(r["scenario"], r["method"]): [] for r in runs}
    for r in sorted(runs, key=lambda r: r["seed"]):
        by[(r["scenario"], r["method"])].append(r["regret"])
    per_scenario = {sc.name: {m: statistics.median(by[(sc.name, m)]) for m in methods}
                    for sc in (OBJECTIVES[si] for si in chosen)}
    overall = {m: statistics.median([r["regret"] for r in runs if r["method"] == m]) for m in methods}
    mean_of_medians = {m: statistics.fmean(per_scenario[s][m] for s in per_scenario) for m in methods}
    cpu = {m: statistics.fmean(r["cpu_s"] for r in runs if r["method"] == m) for m in methods}
    within = {m: statistics.fmean(r["regret"] <= 0.01 for r in runs if r["method"] == m) for m in methods}
    to95 = {m: statistics.median(r["iterations_to_95"] for r in runs if r["method"] == m) for m in methods}
    cost = {m: statistics.fmean(r["tuning_cost"] for r in runs if r["method"] == m) for m in methods}

    table = Table(title=f"median normalised regret over {seeds} seeds (lower is better), %")
    table.add_column("objective")
    for m in methods:
        table.add_column(m, justify="right", style="bold" if m == "tuner" else None)
    for name, row in per_scenario.items():
        low = min(row.values())
        table.add_row(name, *[f"[green]{v * 100:.2f}[/]" if v == low else f"{v * 100:.2f}" for v in (row[m] for m in methods)])
    table.add_section()
    table.add_row("median of all runs", *[f"{overall[m] * 100:.2f}" for m in methods], style="bold")
    table.add_row("mean of medians", *[f"{mean_of_medians[m] * 100:.2f}" for m in methods])
    table.add_row("CPU s per run", *[f"{cpu[m]:.2f}" for m in methods], style="dim")
    table.add_row("runs within 1 % of the optimum", *[f"{within[m] * 100:.0f}" for m in methods])
    table.add_row("median iterations to 95 %", *[f"{to95[m]:.0f}" for m in methods])
    table.add_row("tuning cost (mean slowdown), %", *[f"{cost[m] * 100:.1f}" for m in methods])
    console.print(table)

    summary: dict[str, object] = {"within_1pct": within, "median_iterations_to_95": to95,
                                  "tuning_cost": cost}
    if "tuner" in methods:
        summary["wilcoxon"] = _paired(runs, methods, console)
    if "tuner" in methods:
        singles = [m for m in SINGLE if m in methods]
        if singles:
            best_single = min(singles, key=lambda m: overall[m])
            r = _ratio(overall["tuner"], overall[best_single])
            summary.update(best_single=best_single, ratio_vs_best_single=r, target_vs_best_single=r <= 1.1)
            mark = "[green]met[/]" if r < 1 else "[red]missed[/]"
            summary.update(target_vs_best_single=r < 1)
            console.print(f"tuner / best single technique ({best_single}): {r:.2f}x  (target < 1x: {mark})")
        anchors = [m for m in ANCHORS if m in methods]
        if anchors:
            anchor = min(anchors, key=lambda m: overall[m])
            r = _ratio(overall["tuner"], overall[anchor])
            summary.update(better_anchor=anchor, ratio_vs_anchor=r, target_vs_anchor=r <= 0.6)
            mark = "[green]met[/]" if r <= 0.6 else "[red]missed[/]"
            console.print(f"tuner / better of Optuna TPE and GP ({anchor}): {r:.2f}x  (target <= 0.6x: {mark})")
            c = _ratio(cost["tuner"], cost["tpe"]) if "tpe" in methods else None
            if c is not None:
                summary.update(cost_vs_tpe=c)
                mark = "[green]met[/]" if c <= 0.5 else "[red]missed[/]"
                console.print(f"tuning cost, tuner / TPE: {c:.2f}x  (target <= 0.5x: {mark})")
        mark = "[green]met[/]" if within["tuner"] >= 0.7 else "[red]missed[/]"
        console.print(f"tuner runs within 1 % of the optimum: {within['tuner'] * 100:.0f} %  (target >= 70 %: {mark})")
        mark = "[green]met[/]" if to95["tuner"] <= 20 else "[red]missed[/]"
        console.print(f"tuner median iterations to 95 %: {to95['tuner']:.0f}  (target <= 20: {mark})")
        if "random" in methods:
            console.print(f"tuner / random search: {_ratio(overall['tuner'], overall['random']):.2f}x")
    if warm:
        shares = [w["share_at_6"] for w in warm]
        ok = statistics.fmean(x >= 0.97 for x in shares)
        summary["warm_start"] = {"median_share_at_6": statistics.median(shares), "share_ge_97": ok,
                                 "runs": warm}
        mark = "[green]met[/]" if statistics.median(shares) >= 0.97 else "[red]missed[/]"
        console.print(f"warm start from a similar job: median {statistics.median(shares) * 100:.1f} % of "
                      f"the optimum after 6 iterations, {ok * 100:.0f} % of runs at >= 97 %  "
                      f"(target 97 %: {mark})")
    console.print(f"{len(runs)} runs in {wall:.0f} s wall ({args.workers} processes)")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "tuner_bench",
        "quick": args.quick, "seeds": seeds, "budget": args.budget, "methods": methods,
        "trial_iterations": args.trial_iterations, "tuner_options": args.tuner_options,
        "objectives": [OBJECTIVES[si].name for si in chosen], "suite": args.suite,
        "rank_correlation": correlation,
        "median_regret_overall": overall, "mean_of_median_regret": mean_of_medians,
        "median_regret_per_objective": per_scenario, "summary": summary,
        "cpu_s_per_run": cpu, "wall_s": wall, "host": platform.node(), "python": platform.python_version(),
        "runs": runs,
    }, indent=1, default=str))
    console.print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
