"""Tuning quality at equal budget: the Tuner against each technique alone and baselines.

Three suites of objectives (``--suite``), reported apart:

- ``measured``: the tables that ``benchmarks/record_tables.py`` measured on the emulated
  cluster, replayed by ``benchmarks/measured.py`` (every score a real measurement, the
  prior built as a session builds it, on host rates recorded in ``benchmarks/data/hosts``:
  below);
- ``unseen``: the step-time models of ``benchmarks/unseen.py``, whose laws (congestion
  collapse, window-bound flows, codecs whose cost is not linear, summation that steals
  the workers' CPU, a slower machine) the prior was not built from; it knows only the
  job's facts;
- ``analytic``: the step-time models of ``benchmarks/objectives.py`` (2-5 % noise; they
  share their physics with the prior, so they flatter it).

The first two judge the tuner on data it was not built from. On every objective each
method gets the same budget of training iterations (100, as in the AIACC-Training paper
(ICDCS 2022)) through the same :class:`Tuner` loop (the Tuner's race may run past it, as
a session's does: below):

- ``tuner``: the Tuner as a session runs it (:class:`autotune.leader.tuners.JobTuners`):
  the default as its reference, measured first and long enough for a speed-up; the
  space's seeds tried first; the physics prior (the simulator on what the job knows,
  :meth:`Scenario.prior`) calibrated online, then grid, PBT, Bayes and Hyperband under
  the AUC bandit, every proposal screened by the calibrated prior; and, as a session's,
  its race may go on past the budget (:data:`~autotune.leader.tuners.OVERTIME`) while two
  or more candidates are left that are each proven faster than the default: iterations a
  job spends at a speed it came for, among near-ties (``overtime`` in each run; the table
  gives the median; ``--tuner-options '{"overtime": 0}'`` stops it at the budget too);
- ``ensemble``: the same ensemble without the prior;
- ``prior``, ``grid``, ``pbt``, ``bayes``, ``hyperband``: each technique alone;
- ``random``: random search; ``tpe`` and ``gp``: Optuna's TPE and GP samplers alone.

Every method's trials run as a session's trial schedule runs them (``_measure``): the first
iteration is the switch, not scored, and a trial clearly slow ends early, its iterations
left going back to the budget (``--cut-short``, a session's ``cut_short``, 0.5 by default):
on its switch iteration where that, even ``SWITCH_MARGIN`` (2) times faster, is under half
the held best's score (the unseen and analytic models draw the switch as one more noisy
iteration; a measured table answers with the switch it recorded, its own cost included), or
on its first scored iteration where that is (trials longer than two); the race's trials run
whole. Each run records how many it cut (``cut``). Until 2026-12-07 (eighteenth session)
every trial ran whole.

The figure of merit is the normalised regret of the configuration a method keeps,
``1 - throughput(kept) / throughput(optimum)`` on the noise-free model, the optimum
found by evaluating every configuration. The table shows per objective the median over
seeds; the summary the median over all runs (objectives x seeds), the share of runs within
1 % of the optimum, the median iterations until the held best reaches 95 % of the optimum,
the median regret of the best configuration each run tried (beside the kept one's: how much
of the regret is the search's and how much the choice's; where the choice lost more than
1 %, where that configuration went: ``tried_fate``), the tuning cost (mean relative
slowdown of the trials' configurations against the optimum), the CPU per run, a paired
Wilcoxon test of the tuner against each method, and
issue 51's targets: ratios against the best stock method (Bayes, TPE, GP), the worst
objective, the tuning cost against TPE's, and the prior's CPU (tuner - ensemble); the ratio
against the best stock method and the share within 1 % with a 95 % bootstrap interval over
the seeds (the same code's median moved 2x between seeds 16-31 and 32-63). Each
predictor is judged by its predictions (issue 63, item 4): per job, the share of new
configurations that the tuner's physics prior and its Bayesian GP placed on the right side
of those measured before (``placed`` in each run). Beside the measured suite's runs within
1 %, each table's own resolution of its optimum (:meth:`measured.MeasuredJob.resolution`:
how often the table, its rows' samples drawn again, still puts its recorded optimum within
1 % of the best row): the share of that verdict a table can reproduce (at six samples a row
17-100 % by job, 58 % on average; intra and wlossycap, recorded again with 18, 98 and 78 %).
Each suite gets its own table. Results
go to ``benchmarks/results/tuner_bench.json``.

    python benchmarks/tuner_bench.py            # full: 10 seeds, every suite
    python benchmarks/tuner_bench.py --suite unseen --seeds 8 --methods tuner,bayes,tpe,gp
    python benchmarks/tuner_bench.py --quick    # 2 seeds, for the demo
    python benchmarks/tuner_bench.py --methods tuner,tpe --tuner-options '{"window": 100}'

A change is judged on seeds it was not chosen on (``--first-seed``) and paired against the
code before it (``--against``: the tuner's runs of earlier results join as method
``before``, paired by objective and seed, with the same noise streams)::

    python benchmarks/tuner_bench.py --suite measured --seeds 16 --methods tuner,bayes,tpe \
        --no-warm --against benchmarks/results/issue63/2026-12-07-s13/measured_before_seeds*.json

The seeds 0-15 chose the Tuner as it stands (issue 63's sessions): a change judged on them
meets a winner's curse (changes look worse there than on fresh seeds), so judge on seeds
from 16. Launches of other seeds or methods (the slow ones apart, say) make one table with
``--join`` (runs nothing; every method must have run the tuner's objectives and seeds)::

    python benchmarks/tuner_bench.py --suite measured --join tuner_16-31.json stock_16-31.json

A measured table's prior, as a session's, is built on the host's summation, copy and codec
rates, and timed rates move with the machine's load: timed per launch, the same code and
seeds differed in 27 of 96 runs between two launches, and the Tuner's median between
1.6 % and 4.9 %. So the rates are recorded (``benchmarks/data/hosts``, each file timed at
one load: ``--record-host OUT``), and the run on seed ``s`` builds its prior on the
``s mod n``-th of the ``n`` recorded (each run's ``host``): a launch's figures are a
property of the code over several priors, the same in every launch. ``--host-from`` takes
other recordings (or earlier results' own), ``--host-timed`` times this machine's, once, now.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Iterable

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from measured import load_all  # noqa: E402
from objectives import SCENARIOS  # noqa: E402
from unseen import UNSEEN  # noqa: E402

from autotune.leader.tuners import OVERTIME  # noqa: E402
from autotune.options import SessionOptions  # noqa: E402
from autotune.schedule.schedule import REFERENCE_ITERATIONS  # noqa: E402
from autotune.sim.calibration import Calibration  # noqa: E402
from autotune.tuning.confirm import CONFIRM  # noqa: E402
from autotune.tuning.trial import SWITCH_MARGIN  # noqa: E402
from autotune.tuning.trust import TIE  # noqa: E402
from autotune.tuning.tuner import DEFAULT_TECHNIQUES, Tuner  # noqa: E402

SINGLE = ("prior", *DEFAULT_TECHNIQUES)
METHODS: dict[str, tuple[str, ...]] = {
    "tuner": DEFAULT_TECHNIQUES,           # the Tuner as a session runs it: with the prior
    "ensemble": DEFAULT_TECHNIQUES,        # the same without the prior (as before it)
    **{t: (t,) for t in SINGLE},
    "random": ("random",),
    "structured": ("structured",),
    "tpe": ("tpe",),
    "gp": ("optuna-gp",),
}
WITH_PRIOR = ("tuner", "prior")
ENSEMBLES = ("tuner", "ensemble")  # what --tuner-options changes
CUT_SHORT = SessionOptions().cut_short  # a session's default (--cut-short)
RESULTS = Path(__file__).resolve().parent / "results" / "tuner_bench.json"
# recorded host calibrations: the measured tables' priors are built on these (module doc)
HOSTS = Path(__file__).resolve().parent / "data" / "hosts"
STOCK = ("bayes", "tpe", "gp")  # the stock methods the Tuner is held against
# every objective, by suite; worker processes index into OBJECTIVES
PARTS = {"analytic": list(SCENARIOS), "unseen": list(UNSEEN), "measured": load_all()}
OBJECTIVES = [o for part in PARTS.values() for o in part]
SUITE_OF = [name for name, part in PARTS.items() for _ in part]  # by index into OBJECTIVES
SUITES = {name: [i for i, s in enumerate(SUITE_OF) if s == name] for name in PARTS}
SUITES["all"] = SUITES["measured"] + SUITES["unseen"] + SUITES["analytic"]
SUITES["both"] = SUITES["measured"] + SUITES["analytic"]  # the suites before issue 51


def _optimum(si: int) -> tuple[int, dict, float]:
    config, value = OBJECTIVES[si].optimum
    return si, config, value


def _measure(sc, tuner: Tuner, trial, rng: np.random.Generator,
             switches: np.random.Generator, cut_short: float | None) -> tuple[float, int, int]:
    """``trial`` run on the objective ``sc`` as a session's trial schedule runs it
    (:mod:`autotune.schedule.schedule`, ``trial``): ``(score, iterations run, scored)``.
    Its first iteration is the switch, not scored; a trial clearly slow on it (its speed,
    even :data:`SWITCH_MARGIN` times faster, under ``cut_short`` of the held best's score)
    ends there, scored at that bound; one whose first scored iteration is under
    ``cut_short`` of it ends after that one; the race's trials are never cut (``None``:
    nothing is)."""
    held = tuner.best
    k = max(1, trial.iterations - 1)  # scored iterations
    bar = None if cut_short is None or not held or trial.technique == CONFIRM else (
        cut_short * held[1])
    if bar is not None and trial.iterations > 1:
        switch = sc.switch(trial.config, switches)
        if switch * SWITCH_MARGIN < bar:
            return switch * SWITCH_MARGIN, 1, 0
    first = sc.measure(trial.config, 2, rng)
    if k == 1 or (bar is not None and first < bar):
        return first, min(2, trial.iterations), 1
    rest = sc.measure(trial.config, k, rng)  # the other k - 1
    return (first + (k - 1) * rest) / k, trial.iterations, k


def _run(si: int, method: str, seed: int, budget: int, optimum: float, kwargs: dict,
         host: str | None = None, cut_short: float | None = CUT_SHORT) -> dict:
    sc = OBJECTIVES[si]
    if host is not None:  # a measured table's prior on its host calibration (_host_of)
        sc.pin_host(Calibration.from_json(host))
    rng = np.random.default_rng([seed, si])  # same noise stream for every method
    switches = np.random.default_rng([seed, si, 1])  # the switch iterations' own
    t0 = time.process_time()
    tuner = _tuner(sc, method, seed, budget, kwargs)
    spent, to95, cost, tried, tried_config, cut = 0, None, 0.0, 0.0, None, 0
    placed: dict[str, list[int]] = {}
    while (trial := tuner.ask()) is not None:
        score, used, measured = _measure(sc, tuner, trial, rng, switches, cut_short)
        cut += used < trial.iterations
        _place(tuner, trial.config, score, placed)
        tuner.tell(trial, score, iterations=used, measured=measured)
        spent += used
        truth = sc.throughput(trial.config)
        cost += used * (1.0 - truth / optimum)
        if truth > tried:
            tried, tried_config = truth, dict(trial.config)
        held = tuner.best
        if to95 is None and held and sc.throughput(held[0]) >= 0.95 * optimum:
            to95 = spent
    best = tuner.best
    regret = 1.0 - sc.throughput(best[0]) / optimum if best else 1.0
    return {
        "scenario": sc.name, "si": si, "method": method, "seed": seed, "regret": regret,
        "tried_regret": 1.0 - tried / optimum,  # the best configuration the search ran
        "tried_fate": _fate(tuner, tried_config, best[0] if best else None),
        "iterations_to_95": to95 if to95 is not None else budget + 1,
        "overtime": tuner.overtime,  # iterations past the budget: the race's (module doc)
        "cut": cut,  # trials ended early as clearly slow (module doc)
        "tuning_cost": cost / max(1, spent), "screened": tuner.screened,
        "overruled": tuner.overruled,
        "guarded": getattr(getattr(tuner, "screening", None), "guarded", 0),
        "trials": len(tuner.history),
        "by_technique": dict(Counter(t.technique for t in tuner.history)),
        "new_best_by": dict(Counter(t.technique for t in tuner.history if t.new_best)),
        "cpu_s": time.process_time() - t0, "best": best[0] if best else None,
        "placed": {name: right / votes for name, (right, votes) in placed.items() if votes},
    }


def _tuner(sc, method: str, seed: int, budget: int, kwargs: dict) -> Tuner:
    """``method``'s Tuner on the objective ``sc``; ``tuner`` as a session makes it
    (:class:`autotune.leader.tuners.JobTuners`: the default its reference, measured long
    enough for a speed-up, the space's seeds first, the race's overtime), with the prior
    where ``method`` has one; ``kwargs`` (``--tuner-options``) over all of that."""
    prior = {"prior": sc.prior()} if method in WITH_PRIOR else {}
    session = {"reference": sc.space.default(), "reference_iterations": REFERENCE_ITERATIONS,
               "warm_start": sc.space.seeds(), "overtime": OVERTIME} if method == "tuner" else {}
    return Tuner(sc.space, budget=budget,
                 **{"techniques": METHODS[method], "seed": seed, **prior, **session, **kwargs})


def _fate(tuner: Tuner, tried: dict | None, kept: dict | None) -> str | None:
    """Where the best configuration a run tried went in the choice (issue 63): ``kept``;
    else, where the confirm phase raced, ``not raced`` (never in its field), ``dropped``
    (worse with confidence) or ``raced`` (in the race to its end, another kept); ``no
    race`` where it did not; None where nothing was tried."""
    if tried is None:
        return None
    key = tuner.space.key(tried)
    if kept is not None and tuner.space.key(kept) == key:
        return "kept"
    race = tuner.confirming
    if not race.started:
        return "no race"
    if key not in race.field:
        return "not raced"
    return "dropped" if key in race.dropped else "raced"


def _place(tuner: Tuner, config: dict, score: float | None, placed: dict[str, list[int]]) -> None:
    """Each predictor judged by its predictions (issue 63, item 4): before a configuration's
    first score is told, the physics prior's surrogate and the Bayesian technique's GP each
    predict it; against every configuration measured before, a prediction on the side the
    measurement fell (log scores more than :data:`~autotune.tuning.trust.TIE` apart) is
    right. ``placed[name]`` counts ``[right, votes]``. Reading them changes nothing of the
    run: the surrogate's prediction is the one its ``tell`` makes first, the GP's is its
    current fit's (none when the Tuner has not fitted it on these trials)."""
    if not score or score <= 0 or tuner.score_of(config) is not None:
        return
    predicted = {}
    if tuner.surrogate is not None:
        predicted["prior"] = tuner.surrogate.predict_config(config)[0]
    bayes = tuner.searchers.get("bayes")
    if bayes is not None and bayes.ready and (p := bayes.predicted(config)) is not None:
        predicted["bayes"] = p
    m = math.log(score)
    earlier = [math.log(st.mean) for _, st in tuner.obs.scored() if st.mean > 0]
    for name, p in predicted.items():
        count = placed.setdefault(name, [0, 0])
        for e in earlier:
            if abs(m - e) > TIE:
                count[0] += (p - e) * (m - e) > 0
                count[1] += 1


BEFORE = "before"  # the method name of --against's runs


def _read(paths: list[Path], chosen: list[int],
          methods: list[str] | None) -> dict[tuple[str, str, int], dict]:
    """The runs of ``methods`` (default: all) on the objectives ``chosen`` in the results
    ``paths``, by (objective, method, seed), each once; one that two files hold with
    different results is an error naming both (results of different code)."""
    names = {OBJECTIVES[si].name: si for si in chosen}
    found: dict[tuple[str, str, int], dict] = {}
    source: dict[tuple[str, str, int], Path] = {}
    for path in paths:
        for r in json.loads(Path(path).read_text())["runs"]:
            if r["scenario"] not in names or (methods is not None and r["method"] not in methods):
                continue
            key = (r["scenario"], r["method"], r["seed"])
            if key in found and found[key]["regret"] != r["regret"]:
                raise ValueError(f"{key[1]} on {key[0]} at seed {key[2]} differs between "
                                 f"{source[key]} and {path}: results of different code")
            found.setdefault(key, {**r, "si": names[r["scenario"]]})
            source.setdefault(key, path)
    return found


def _earlier(paths: list[Path], chosen: list[int], seeds: Iterable[int]) -> list[dict]:
    """The tuner's runs in the results ``paths`` (earlier runs of this benchmark) for every
    objective in ``chosen`` and seed in ``seeds``, as method :data:`BEFORE`; a pair that
    none of them has is an error naming it."""
    found = _read(paths, chosen, ["tuner"])
    out = []
    for si in chosen:
        for seed in seeds:
            key = (OBJECTIVES[si].name, "tuner", seed)
            if key not in found:
                raise ValueError(f"no tuner run of {key[0]} at seed {seed} in "
                                 f"{', '.join(map(str, paths))}")
            out.append({**found[key], "method": BEFORE})
    return out


def _joined(paths: list[Path], chosen: list[int], methods: list[str] | None) -> list[dict]:
    """The runs in the results ``paths`` (launches of other seeds or methods; :func:`_read`)
    where the tuner ran: every method must cover the tuner's (objective, seed) pairs, so
    that the table and the paired tests compare like with like; a missing pair is an error
    naming it."""
    found = _read(paths, chosen, methods)
    pairs = sorted({(sc, seed) for sc, m, seed in found if m == "tuner"})
    if not pairs:
        raise ValueError(f"no tuner run of the chosen objectives in {', '.join(map(str, paths))}")
    for m in sorted({m for _, m, _ in found}):
        for sc, seed in pairs:
            if (sc, m, seed) not in found:
                raise ValueError(f"no {m} run of {sc} at seed {seed} (the tuner has one)")
    return [r for (sc, _, seed), r in sorted(found.items()) if (sc, seed) in pairs]


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


FLOOR = 0.01  # regret below this counts as this, for the per-job ratio (issue 51)


def _report(suite: str, runs: list[dict], methods: list[str], seeds: int,
            console: Console) -> dict:
    """The table and the targets of one suite's runs (issue 51): the Tuner's median
    regret at most 0.4x the best stock method's; on no objective over 1.5x the best of
    Bayes, GP and TPE (regrets floored at 1 %); at least 70 % of runs within 1 %; at most
    20 iterations (median) to 95 %; tuning cost at most half of TPE's; the prior's CPU
    at most 5 s per run."""
    names = list(dict.fromkeys(r["scenario"] for r in runs))
    by: dict[tuple[str, str], list[float]] = {}
    for r in sorted(runs, key=lambda r: r["seed"]):
        by.setdefault((r["scenario"], r["method"]), []).append(r["regret"])
    per_job = {n: {m: statistics.median(by[(n, m)]) for m in methods} for n in names}
    spread = {n: {m: [min(by[(n, m)]), max(by[(n, m)])] for m in methods} for n in names}

    def over(key: str, f) -> dict[str, float]:
        return {m: f([r.get(key) for r in runs if r["method"] == m]) for m in methods}

    overall = over("regret", statistics.median)
    tried = {m: _tried(runs, m) for m in methods}
    within = over("regret", _within)
    to95 = over("iterations_to_95", statistics.median)
    past = over("overtime", _median_of_recorded)
    cut = over("cut", _median_of_recorded)
    cost = over("tuning_cost", statistics.fmean)
    cpu = over("cpu_s", statistics.fmean)

    table = Table(title=f"{suite}: median normalised regret over {seeds} seeds, % "
                        "(lower is better; min-max for the tuner)")
    table.add_column("objective")
    for m in methods:
        table.add_column(m, justify="right", style="bold" if m == "tuner" else None)
    for name, row in per_job.items():
        low = min(row.values())
        cells = []
        for m in methods:
            v = f"{row[m] * 100:.2f}"
            if m == "tuner":
                lo, hi = spread[name][m]
                v += f" ({lo * 100:.1f}-{hi * 100:.1f})"
            cells.append(f"[green]{v}[/]" if row[m] == low else v)
        table.add_row(name, *cells)
    table.add_section()
    table.add_row("median of all runs", *[f"{overall[m] * 100:.2f}" for m in methods], style="bold")
    table.add_row("  of the best configuration tried",
                  *["-" if tried[m] is None else f"{tried[m] * 100:.2f}" for m in methods])
    table.add_row("runs within 1 % of the optimum", *[f"{within[m] * 100:.0f}" for m in methods])
    table.add_row("median iterations to 95 %", *[f"{to95[m]:.0f}" for m in methods])
    table.add_row("  past the budget (the race's overtime)",
                  *["-" if math.isnan(past[m]) else f"{past[m]:.0f}" for m in methods])
    table.add_row("trials cut short as clearly slow",
                  *["-" if math.isnan(cut[m]) else f"{cut[m]:.0f}" for m in methods])
    table.add_row("tuning cost (mean slowdown), %", *[f"{cost[m] * 100:.1f}" for m in methods])
    table.add_row("CPU s per run", *[f"{cpu[m]:.2f}" for m in methods], style="dim")
    console.print(table)

    out: dict[str, object] = {"median_regret": overall, "median_tried_regret": tried,
                              "median_regret_per_objective": per_job,
                              "regret_range_per_objective": spread, "within_1pct": within,
                              "median_iterations_to_95": to95,
                              "median_overtime": past, "median_cut": cut, "tuning_cost": cost,
                              "cpu_s_per_run": cpu}
    if "tuner" not in methods:
        return out
    out["wilcoxon"] = _paired(runs, methods, console)
    placed = {n: {k: statistics.fmean(v) for k in ("prior", "bayes")
                  if (v := [r["placed"][k] for r in runs if r["scenario"] == n
                            and r["method"] == "tuner" and k in r.get("placed", {})])}
              for n in names}
    out["placed_rightly"] = placed
    if any(placed.values()):
        console.print(f"{suite}: new configurations placed rightly against the measured ones, "
                      "the tuner's physics prior / its Bayesian GP: " + "; ".join(
                          f"{n} {v.get('prior', math.nan) * 100:.0f} / "
                          f"{v.get('bayes', math.nan) * 100:.0f} %" for n, v in placed.items()))

    def mark(ok: bool) -> str:
        return "[green]met[/]" if ok else "[red]missed[/]"

    stock = [m for m in STOCK if m in methods]
    if stock:
        best = min(stock, key=lambda m: overall[m])

        def to_stock(rs: list[dict]) -> float:  # the tuner's median over the best stock one's
            median = {m: statistics.median(x["regret"] for x in rs if x["method"] == m)
                      for m in ("tuner", *stock)}
            return _ratio(median["tuner"], min(median[m] for m in stock))

        r, (lo, hi) = to_stock(runs), _over_seeds(runs, to_stock)
        out.update(best_stock=best, ratio_vs_best_stock=r, ratio_vs_best_stock_interval=[lo, hi])
        console.print(f"{suite}: tuner / best stock method ({best}): {r:.2f}x, {INTERVAL} "
                      f"{lo:.2f}-{hi:.2f}x  (target <= 0.4x: {mark(r <= 0.4)})")
        worst = {n: _ratio(max(FLOOR, per_job[n]["tuner"]),
                           max(FLOOR, min(per_job[n][m] for m in stock))) for n in names}
        out["worst_job_vs_stock"] = worst
        name = max(worst, key=worst.get)
        console.print(f"{suite}: worst objective, tuner / best of {', '.join(stock)} (floor 1 %): "
                      f"{worst[name]:.2f}x on {name}  (target <= 1.5x: {mark(worst[name] <= 1.5)})")
    if "tpe" in methods:
        c = _ratio(cost["tuner"], cost["tpe"])
        out["cost_vs_tpe"] = c
        console.print(f"{suite}: tuning cost, tuner / TPE: {c:.2f}x  (target <= 0.5x: {mark(c <= 0.5)})")
    lo, hi = _over_seeds(runs, lambda rs: _within([x["regret"] for x in rs
                                                    if x["method"] == "tuner"]))
    out["within_1pct_interval"] = [lo, hi]
    lost = Counter(r["tried_fate"] for r in runs if r["method"] == "tuner" and "tried_fate" in r
                   and r["regret"] - r["tried_regret"] > 0.01)
    if lost:
        out["tried_lost_in_the_choice"] = dict(lost)
        console.print(f"{suite}: runs whose best configuration tried was > 1 % better than the "
                      f"kept one: {sum(lost.values())}; where it went: " + ", ".join(
                          f"{fate} {n}" for fate, n in lost.most_common()))
    console.print(f"{suite}: tuner runs within 1 % of the optimum: {within['tuner'] * 100:.0f} %, "
                  f"{INTERVAL} {lo * 100:.0f}-{hi * 100:.0f} %  "
                  f"(target >= 70 %: {mark(within['tuner'] >= 0.7)})")
    console.print(f"{suite}: tuner median iterations to 95 %: {to95['tuner']:.0f}  "
                  f"(target <= 20: {mark(to95['tuner'] <= 20)})")
    if "ensemble" in methods:
        prior_cpu = cpu["tuner"] - cpu["ensemble"]
        out["prior_cpu_s"] = prior_cpu
        console.print(f"{suite}: the prior's CPU per run (tuner - ensemble): {prior_cpu:.1f} s  "
                      f"(target <= 5 s: {mark(prior_cpu <= 5)})")
    return out


def _resolution(runs: list[dict], console: Console) -> dict[str, dict]:
    """Each measured table's resolution of its own optimum (:meth:`measured.MeasuredJob.
    resolution`): how often the table, drawn again from its own samples, still puts its
    recorded optimum within 1 % of the best row. Beside the runs within 1 % it says how
    much of that verdict the tables can reproduce at all."""
    jobs = {OBJECTIVES[r["si"]].name: OBJECTIVES[r["si"]] for r in runs}
    out = {name: job.resolution() for name, job in jobs.items()}
    mean = statistics.fmean(v["within"] for v in out.values())
    console.print("measured: the tables' resolution: their recorded optimum within 1 % of the "
                  f"best row on {mean * 100:.0f} % of tables drawn again from their samples "
                  "(mean over jobs; " + "; ".join(
                      f"{n} {v['within'] * 100:.0f} % (9 draws in 10 within "
                      f"{v['p90_regret'] * 100:.1f} %)"
                      for n, v in out.items()) + ")")
    return out


def _median_of_recorded(values: list) -> float:
    """The median of a per-run figure; NaN where some run did not record it (results from
    before the figure was added, joined or brought in by ``--against``)."""
    return statistics.median(values) if None not in values else math.nan


def _within(regrets: list[float]) -> float:
    """The share of ``regrets`` within 1 % of the optimum."""
    return statistics.fmean(x <= 0.01 for x in regrets)


def _tried(runs: list[dict], method: str) -> float | None:
    """The median regret of the best configuration each of ``method``'s runs tried (beside
    the kept one's it says how much of the regret is the search's, how much the choice's);
    None where some run was written before runs recorded it."""
    of = [r for r in runs if r["method"] == method]
    if not all("tried_regret" in r for r in of):
        return None
    return statistics.median(r["tried_regret"] for r in of)


INTERVAL = "95 % interval over seeds"  # _over_seeds, as the report prints it
RESAMPLES = 2000  # the seed bootstrap's resamples


def _over_seeds(runs: list[dict], figure) -> tuple[float, float]:
    """A 95 % percentile bootstrap interval of ``figure(runs)`` over the seeds: each
    resample draws as many seeds as the runs hold, with replacement, each with all its
    runs (every objective and method: the pairing kept); the same resamples for every
    figure (a fixed generator). It says how far a target's figure moves with the seeds it
    was measured on: one launch of 16 seeds and the next differed by 2x."""
    seeds = sorted({r["seed"] for r in runs})
    of = {s: [r for r in runs if r["seed"] == s] for s in seeds}
    rng = np.random.default_rng(0)
    values = [figure([r for s in rng.choice(seeds, size=len(seeds)) for r in of[s]])
              for _ in range(RESAMPLES)]
    with np.errstate(invalid="ignore"):  # between two infinite ratios: inf - inf
        bounds = np.percentile(values, [2.5, 97.5])
    # a bound between infinite values (a ratio over a stock median of 0) is infinite
    lo, hi = (math.inf if math.isnan(b) else float(b) for b in bounds)
    return lo, hi


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return 1.0 if a == 0 else float("inf")
    return a / b


def _recorded_hosts(paths: list[Path]) -> list[dict[str, str]]:
    """The host calibrations that ``paths`` record: a file of :data:`HOSTS`, or results of
    this benchmark (their ``host_calibrations``, or the one ``host_calibration`` of
    results written before there were several)."""
    found = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        if "host_calibrations" in data:
            found += data["host_calibrations"]
        elif "host_calibration" in data:
            found.append(data["host_calibration"])
        else:
            raise ValueError(f"{path} records no host calibration")
    return found


def _hosts(chosen: list[int], recorded: list[Path] | None) -> list[dict[str, str]]:
    """The measured tables' host calibrations for this launch, each a dict of table name to
    JSON of a :class:`~autotune.sim.calibration.Calibration`: ``recorded`` ones (files of
    :data:`HOSTS`, or earlier results: ``--host-from``), else this machine's rates timed once,
    now (``--host-timed``). A run on seed ``s`` builds its prior on the ``s % n``-th of ``n``
    (:func:`_host_of`). Each must cover every measured table chosen."""
    measured = [OBJECTIVES[si] for si in chosen if si in SUITES["measured"]]
    if recorded is None:
        return [{job.name: job.host.to_json() for job in measured}]
    hosts = _recorded_hosts(recorded)
    if measured and not hosts:
        raise ValueError(f"no host calibration in {', '.join(map(str, recorded)) or HOSTS} "
                         "(record one with --record-host, or time this machine's with "
                         "--host-timed)")
    for i, host in enumerate(hosts):
        lacking = [job.name for job in measured if job.name not in host]
        if lacking:
            raise ValueError(f"host calibration {i} of {', '.join(map(str, recorded))} has "
                             f"none for {', '.join(lacking)}")
    return [{job.name: host[job.name] for job in measured} for host in hosts] or [{}]


def _host_index(hosts: list[dict[str, str]], si: int, seed: int) -> int | None:
    """Which of ``hosts`` the run of objective ``si`` at ``seed`` builds its prior on: the
    ``seed % len(hosts)``-th; None where the objective has none (not a measured table)."""
    i = seed % len(hosts)
    return i if OBJECTIVES[si].name in hosts[i] else None


def _host_of(hosts: list[dict[str, str]], si: int, seed: int) -> str | None:
    """The host calibration (JSON) of :func:`_host_index`, or None."""
    i = _host_index(hosts, si, seed)
    return None if i is None else hosts[i][OBJECTIVES[si].name]


def _record_host(chosen: list[int], out: Path, console: Console) -> int:
    """``--record-host``: time this machine's rates for every measured table chosen, now,
    and write them to ``out`` (a file for :data:`HOSTS`)."""
    (host,) = _hosts(chosen, None)
    load = os.getloadavg()[0]  # the last minute's: what ran just before is in it too
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"recorded": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                               "host": platform.node(), "load": load,
                               "host_calibrations": [host]}, indent=1) + "\n")
    console.print(f"{len(host)} tables' host calibration (load {load:.2f}): {out}")
    return 0


def _launch(args: argparse.Namespace, chosen: list[int], methods: list[str],
            seed_range: range, common: dict, hosts: list[dict[str, str]],
            console: Console) -> tuple[list[dict], list[dict]]:
    """Every method's tuning runs on ``chosen`` x ``seed_range`` (and the warm-start runs on
    the analytic objectives), in ``args.workers`` processes, the measured tables' priors on
    ``hosts`` (:func:`_host_of`): ``(runs, warm)``."""
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
                        for s in seed_range for si in chosen
                        if si in SUITES["analytic"]] if args.warm else []
        jobs = [(si, m, s) for s in seed_range for si in chosen for m in methods]
        progress.update(task, description="tuning runs", completed=0, total=len(jobs))
        futures = [pool.submit(_run, si, m, s, args.budget, optima[si],
                               {**common, **(args.tuner_options if m in ENSEMBLES else {})},
                               _host_of(hosts, si, s), args.cut_short)
                   for si, m, s in jobs]
        for fut in as_completed(futures):
            run = fut.result()  # with the host calibration its prior was built on, by index
            run["host"] = _host_index(hosts, run["si"], run["seed"])
            runs.append(run)
            progress.advance(task)
        warm = [f.result() for f in warm_futures]
    return runs, warm


def _fraction_or_none(text: str) -> float | None:
    """``--cut-short``: a fraction in (0, 1), or ``none``."""
    if text.lower() == "none":
        return None
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"a fraction in (0, 1) or 'none', got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds (about 1-3 minutes)")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per objective (default 10, quick 2)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="the first seed (seeds FIRST..FIRST+N-1): held-out seeds for a change "
                         "chosen on others")
    ap.add_argument("--budget", type=int, default=100, help="training iterations per method")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--methods", default=None, help="comma-separated subset (default: all)")
    ap.add_argument("--trial-iterations", type=int, default=None,
                    help="iterations per trial for every method (default: the Tuner's)")
    ap.add_argument("--cut-short", type=_fraction_or_none, default=CUT_SHORT, metavar="F",
                    help="end a trial clearly slow on its switch or first scored iteration "
                         f"against F x the held best's score, as a session does (default "
                         f"{CUT_SHORT}, a session's; 'none': never)")
    ap.add_argument("--tuner-options", type=json.loads, default={}, metavar="JSON",
                    help='extra Tuner arguments for the "tuner" and "ensemble" methods, e.g. \'{"window": 100, "C": 0.05}\' '
                         'or \'{"techniques": ["grid", "pbt", "tpe", "hyperband"]}\'')
    ap.add_argument("--no-warm", dest="warm", action="store_false",
                    help="skip the warm-start measurement")
    ap.add_argument("--suite", choices=sorted(SUITES), default="all",
                    help="measured tables, unseen models, analytic models, all (default), "
                         "or both (measured and analytic, the suites before issue 51)")
    ap.add_argument("--scenarios", default=None,
                    help="comma-separated objective names (default: all of the suite)")
    ap.add_argument("--against", type=Path, nargs="+", default=None, metavar="JSON",
                    help="earlier results of this benchmark (the code before a change): their "
                         f"tuner's runs join as method {BEFORE!r}, paired by objective and seed")
    ap.add_argument("--join", type=Path, nargs="+", default=None, metavar="JSON",
                    help="run nothing: report on the runs these results hold (launches of "
                         "other seeds or methods), every method on the tuner's objectives and "
                         "seeds")
    hosts_from = ap.add_mutually_exclusive_group()
    hosts_from.add_argument("--host-from", type=Path, nargs="+", default=None, metavar="JSON",
                            help="the measured tables' priors on the host calibrations these "
                                 "files record (files of benchmarks/data/hosts, or earlier "
                                 "results); the run on seed s on the (s mod n)-th of n "
                                 "(default: benchmarks/data/hosts/*.json)")
    hosts_from.add_argument("--host-timed", action="store_true",
                            help="the measured tables' priors on this machine's rates, timed "
                                 "once, now")
    hosts_from.add_argument("--record-host", type=Path, default=None, metavar="OUT",
                            help="run nothing: time this machine's rates for the measured "
                                 "tables now and write them to OUT (a file for "
                                 "benchmarks/data/hosts)")
    ap.add_argument("--json", "--out", dest="out", type=Path, default=RESULTS)
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
    methods = [m for m in (args.methods or ",".join(METHODS)).split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        ap.error(f"unknown method(s) {bad}; choose from {', '.join(METHODS)}")

    seed_range = range(args.first_seed, args.first_seed + seeds)
    if args.record_host:
        return _record_host(chosen, args.record_host, Console())
    joined = []
    if args.join:
        if (args.seeds is not None or args.first_seed or args.quick or args.host_from
                or args.host_timed):
            ap.error("--join reports on the runs its results hold: no --seeds, --first-seed, "
                     "--quick, --host-from or --host-timed")
        try:
            joined = _joined(args.join, chosen, methods if args.methods else None)
        except (OSError, ValueError, KeyError) as e:  # unreadable, not JSON, a pair missing
            ap.error(f"--join: {e}")
        methods = [m for m in METHODS if any(r["method"] == m for r in joined)]
        chosen = sorted({r["si"] for r in joined})
        seed_range = sorted({r["seed"] for r in joined})
        seeds = len(seed_range)
    earlier = []
    if args.against:
        try:
            earlier = _earlier(args.against, chosen, seed_range)
        except (OSError, ValueError, KeyError) as e:  # unreadable, not JSON, a pair missing
            ap.error(f"--against: {e}")
    hosts: list[dict[str, str]] = []
    if not joined:
        recorded = (None if args.host_timed else
                    args.host_from or sorted(HOSTS.glob("*.json")))
        try:
            hosts = _hosts(chosen, recorded)
        except (OSError, ValueError, KeyError) as e:  # unreadable, not JSON, a table missing
            ap.error(f"--host-from: {e}")
    console = Console()
    console.print(
        f"[bold]Tuner benchmark[/]{' (joined)' if joined else ''}: {len(chosen)} objectives "
        f"({args.suite}) x {seeds} seeds, "
        f"budget {args.budget} iterations, methods {', '.join(methods)}"
        + (f", trial_iterations {args.trial_iterations}" if common else "")
        + (f", trials cut short under {args.cut_short} of the best" if args.cut_short
           else ", trials never cut short")
        + (f", tuner options {json.dumps(args.tuner_options)}" if args.tuner_options else "")
    )
    correlation = {}  # a measured table's on the first host calibration
    for si in ([] if joined else chosen):
        if si in SUITES["measured"] or si in SUITES["unseen"]:
            job = OBJECTIVES[si]
            if host := _host_of(hosts, si, 0):
                job.pin_host(Calibration.from_json(host))
            correlation[job.name] = job.rank_correlation()
            console.print(f"{job.name}: the prior's rank correlation with {job.measured} "
                          f"configurations: Kendall tau "
                          f"{correlation[job.name]['kendall_tau']:.2f}, Spearman rho "
                          f"{correlation[job.name]['spearman_rho']:.2f}")
    t_start = time.time()
    runs, warm = (joined, []) if joined else _launch(args, chosen, methods, seed_range, common,
                                                     hosts, console)
    wall = time.time() - t_start
    if earlier:
        runs += earlier
        methods.append(BEFORE)

    summaries = {}
    for suite in ("measured", "unseen", "analytic"):
        part = [r for r in runs if SUITE_OF[r["si"]] == suite]
        if part:
            summaries[suite] = _report(suite, part, methods, seeds, console)
        if part and suite == "measured":
            summaries[suite]["table_resolution"] = _resolution(part, console)
    if warm:
        shares = [w["share_at_6"] for w in warm]
        ok = statistics.fmean(x >= 0.97 for x in shares)
        summaries["warm_start"] = {"median_share_at_6": statistics.median(shares),
                                   "share_ge_97": ok, "runs": warm}
        mark = "[green]met[/]" if statistics.median(shares) >= 0.97 else "[red]missed[/]"
        console.print(f"warm start from a similar job: median {statistics.median(shares) * 100:.1f} % of "
                      f"the optimum after 6 iterations, {ok * 100:.0f} % of runs at >= 97 %  "
                      f"(target 97 %: {mark})")
    console.print(f"{len(runs)} runs joined from {len(args.join)} results" if joined else
                  f"{len(runs)} runs in {wall:.0f} s wall ({args.workers} processes)")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "tuner_bench", "joined": [str(p) for p in args.join or ()],
        "quick": args.quick, "seeds": seeds, "budget": args.budget, "methods": methods,
        "trial_iterations": args.trial_iterations, "tuner_options": args.tuner_options,
        "cut_short": args.cut_short,
        "objectives": [OBJECTIVES[si].name for si in chosen], "suite": args.suite,
        "rank_correlation": correlation, "host_calibrations": hosts,
        "suites": summaries, "wall_s": wall, "host": platform.node(), "python": platform.python_version(),
        "runs": runs,
    }, indent=1, default=str))
    console.print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
