"""``autotune report RUN``: how a tuning run went, as a picture that teaches.

The figure (PNG, or embedded in a self-contained HTML page) has three parts:

* **the tuning curve**: every trial's score in the run's unit, coloured by the technique
  that proposed it, failed trials as red crosses along the bottom, the best-so-far
  curve, the default configuration's score, and the kept configuration marked (a star
  on the trials that measured it, its score and spread as a band);
* **who found the improvements**: each time a trial beat every earlier one, the gain is
  credited to its technique (what the AUC bandit rewards); the stacked areas add up to
  the best-so-far curve's rise over the first successful trial;
* **score per parameter value** (like Optuna's slice plot): one small panel per
  parameter that was varied, a point per trial where the parameter mattered, the kept
  value shaded.

Without ``--out`` the report is a short summary in the terminal (:func:`show_summary`,
rich, fitted to the width like every table): the run, the kept configuration, the speed-up
over the default, the tuning curve as two sparklines (each trial's score, coloured by its
technique, and the best so far) and the credit per technique.

Technique colours are fixed (:data:`TECHNIQUE_COLOURS`), so they are the same in every
report. ``--json`` prints the same facts as numbers. matplotlib comes from the ``plot``
extra and is imported only here, inside the functions. The numbers come from
:func:`autotune.store.summary.summarize`; what this shares with ``autotune db`` is in
:mod:`autotune.reports.common`.
"""

from __future__ import annotations

import base64
import html
import io
import zlib
from pathlib import Path
from typing import Any

import click

from autotune.outpath import OutFile
from autotune.reports.common import (db_path_option, ddp_fields, emit_json, guard,
                                     iterations, not_kept_json, not_kept_text, not_measured,
                                     open_store, run_fields, when)
from autotune.reports.tables import Column, console, show
from autotune.speedup import Speedup
from autotune.store.origin import fmt_origin
from autotune.store.summary import summarize
from autotune.schedule.stakes import fmt_cost
from autotune.units import (BYTE_PARAMS, fmt_config, fmt_efficiency, fmt_number, fmt_score,
                            fmt_seconds, fmt_value, ordered, shown_params, unit_of)

FAILED = "failed"
FAIL_COLOUR = "#d62728"  # red: only failures are red
#: one colour per technique, the same in every report (failures alone are red)
TECHNIQUE_COLOURS = {
    "grid": "#1f77b4", "pbt": "#2ca02c", "bayes": "#9467bd", "hyperband": "#ff7f0e",
    "tpe": "#8c564b", "optuna-gp": "#e377c2", "random": "#7f7f7f", "warm": "#17becf",
    "confirm": "#bcbd22", "polish": "#ff9896", "fault": "#393b79", "default": "#000000",
}
_SPARE = ("#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354",
          "#756bb1", "#636363", "#9c9ede")


def technique_colour(name: str) -> str:
    """The technique's fixed colour; an unknown name gets a spare one chosen by a hash of
    the name (so it too is the same in every report)."""
    return TECHNIQUE_COLOURS.get(name) or _SPARE[zlib.crc32(name.encode()) % len(_SPARE)]


def report_json(run: dict, trials: list[dict]) -> dict[str, Any]:
    """What ``report --json`` prints: the run, its unit, and the summary (raw numbers:
    scores in ``unit``, sizes in bytes)."""
    s = summarize(trials, run)
    return {
        "run": run["id"], "job": run.get("job"), "status": run.get("status"),
        "created": run.get("created"), "finished": run.get("finished"),
        "unit": run.get("unit"), "trials": len(trials), "failed_trials": s["failed"],
        "best_score": run.get("best_score"), "best_spread": run.get("best_spread"),
        "default_score": run.get("default_score"), "default_spread": run.get("default_spread"),
        "best_iterations": run.get("best_iterations"),
        "default_iterations": run.get("default_iterations"),
        "speedup_over_default": Speedup.of_run(run).as_json(),
        "kept_config": run.get("best_config"), "kept_from": run.get("kept_from"),
        "tuning_cost": run.get("tuning_cost"),
        "kept_at": [trials[i].get("number") for i in s["kept_at"]],
        "best_trial_score": s["best"],
        "fastest_not_kept": not_kept_json(s["not_kept"], trials),
        "techniques": {k: {"trials": s["trials"][k], "share": s["trials"][k] / len(trials),
                           "new_bests": s["new_bests"][k],
                           "gain": s["gain"][k], "colour": technique_colour(k)}
                       for k in s["techniques"]},
        "best_so_far": s["best_so_far"],
        "new_best_at": [trials[i].get("number") for i in s["new_best_at"]],
        "parameters": {name: [{"value": v, **stats} for v, stats in values]
                       for name, values in slices(trials).items()},
    }


SPARKS = "▁▂▃▄▅▆▇█"
#: a failed trial in the sparkline of each trial's score
NO_SCORE = "×"
#: the columns left of the sparklines ("  best so far  ")
SPARK_LABEL = 15


def sparkline(values: list[float | None], lo: float, hi: float, empty: str = NO_SCORE) -> str:
    """One character per value, ``▁`` at ``lo`` up to ``█`` at ``hi`` (all ``▅`` when
    ``lo == hi``); ``empty`` for a ``None``."""
    span = hi - lo
    out = []
    for v in values:
        if v is None:
            out.append(empty)
        else:
            i = 5 if span <= 0 else round((v - lo) / span * (len(SPARKS) - 1))
            out.append(SPARKS[min(len(SPARKS) - 1, max(0, i))])
    return "".join(out)


def _buckets(n: int, width: int) -> list[range]:
    """``n`` trials in at most ``width`` columns: consecutive trials, the same number in
    each column (the last may hold fewer)."""
    per = max(1, -(-n // max(1, width)))
    return [range(i, min(i + per, n)) for i in range(0, n, per)]


def show_summary(run: dict, trials: list[dict], out: Any = None) -> None:
    """``autotune report RUN`` without ``--out``: the run, its kept configuration and
    speed-up, the tuning curve as sparklines, the credit per technique, fitted to the
    console's width (``out``: a rich Console, default :func:`autotune.reports.tables.console`)."""
    from rich.table import Table
    from rich.text import Text

    out = out or console()
    unit = unit_of(run.get("unit"))
    s = summarize(trials, run)
    span = when(run.get("created"))
    if run.get("finished"):
        end = when(run["finished"])
        span += f" to {end[11:] if end[:10] == span[:10] else end}"
    n = f"{len(trials)} trial{'s' if len(trials) != 1 else ''}"
    out.print(Text(f"run {run['id']}: {run.get('job', '')}", style="bold"), overflow="fold")
    facts = Table.grid(padding=(0, 2))
    facts.add_column(no_wrap=True)
    facts.add_column(overflow="fold")
    for label, value in [
        ("status", f"{run.get('status')}, {span}"),
        ("trials", f"{n}, {s['failed']} failed"),
        ("kept", (fmt_score(run.get("best_score"), unit, run.get("best_spread"))
                  + iterations(run, "best")) or not_measured(run)),
        ("default", (fmt_score(run.get("default_score"), unit, run.get("default_spread"))
                     + iterations(run, "default")) or "not measured"),
        ("speed-up", Speedup.of_run(run).shown() or "unknown"),
    ] + ddp_fields(run, unit) + [
        ("kept configuration", fmt_config(run.get("best_config")) or "none"),
    ] + ([("kept from", fmt_origin(run["kept_from"]))] if run.get("kept_from") else []) + (
            [("fastest trial", not_kept_text(s["not_kept"], trials, unit))]
            if s["not_kept"] else []) + (
            [("tuning cost", fmt_cost(run["tuning_cost"]))] if run.get("tuning_cost") else []):
        facts.add_row(Text(f"  {label}"), Text(value))
    out.print(facts)

    scores = [t.get("score") for t in trials]
    ok = [x for x in scores if x is not None]
    if not ok:
        out.print(Text(f"tuning curve: no successful trial ({s['failed']} failed)"
                       if trials else "tuning curve: no trials"))
    else:
        lo, hi = min(ok), max(ok)
        cols = _buckets(len(trials), out.width - SPARK_LABEL)
        per = len(cols[0])
        out.print(Text(f"tuning curve, {n}" + (f", {per} per column" if per > 1 else "")
                       + f": {SPARKS[0]} {fmt_number(lo)} to {SPARKS[-1]} {fmt_number(hi)} "
                       + unit), overflow="fold")
        each = Text("  each trial".ljust(SPARK_LABEL))
        for c in cols:  # a column's best trial, in its technique's colour
            got = [i for i in c if scores[i] is not None]
            if not got:
                each.append(NO_SCORE, style=FAIL_COLOUR)
                continue
            top = max(got, key=lambda i: scores[i])
            each.append(sparkline([scores[top]], lo, hi),
                        style=technique_colour(trials[top]["technique"]))
        out.print(each, no_wrap=True, overflow="crop")
        best = sparkline([s["best_so_far"][c[-1]] for c in cols], lo, hi, empty=" ")
        out.print(Text("  best so far".ljust(SPARK_LABEL) + best), no_wrap=True, overflow="crop")
        at = ", ".join(str(trials[i].get("number", i)) for i in s["new_best_at"])
        fails = f"; {NO_SCORE}: failed" if s["failed"] else ""
        out.print(Text(f"  new bests at trial {at}{fails}"), overflow="fold")
        if out.color_system:  # the colours of the trials' sparkline, on a terminal
            key = Text("  ")
            for k in s["techniques"]:
                key.append("■ ", style=technique_colour(k)).append(f"{k}  ")
            out.print(key)
    if trials:
        out.print(Text(f"credit per technique (gain: how much the best score rose at the "
                       f"technique's new bests, in {unit})"), overflow="fold")
        show(None, [Column("technique", "word"), Column("trials", "num"),
                    Column("share", "num", 2), Column("new bests", "num"),
                    Column("gain", "num", 1)],
             ([k, s["trials"][k], f"{s['trials'][k] / len(trials):.0%}", s["new_bests"][k],
               fmt_number(s["gain"][k])] for k in s["techniques"]), out=out)


def slices(trials: list[dict]) -> dict[str, list[tuple[Any, dict[str, Any]]]]:
    """For every parameter that took more than one value (where it mattered): each value
    with its trials, successful ones, best and mean score, in value order."""
    seen: dict[str, dict[Any, list[float | None]]] = {}
    for t in trials:
        for k, v in shown_params(t.get("config")).items():
            seen.setdefault(k, {}).setdefault(v, []).append(t.get("score"))
    out: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    for name in ordered(seen):  # the search space's order
        by_value = seen[name]
        if len(by_value) < 2:
            continue
        rows = []
        for v in _ordered(by_value):
            ok = [s for s in by_value[v] if s is not None]
            rows.append((v, {"trials": len(by_value[v]), "succeeded": len(ok),
                             "best": max(ok) if ok else None,
                             "mean": sum(ok) / len(ok) if ok else None}))
        out[name] = rows
    return out


def _ordered(values: Any) -> list[Any]:
    vals = list(values)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        return sorted(vals)
    return sorted(vals, key=str)


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise click.ClickException(
            "autotune report needs matplotlib: pip install 'autotune[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _score_axis(ax: Any, plt: Any) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: fmt_number(y)))


def _trial_axis(ax: Any) -> None:
    """Trial numbers are whole: no tick at trial 2.5."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _no_data(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=11,
            color="#555555")
    ax.set_yticks([])


def _curve(ax: Any, plt: Any, run: dict, trials: list[dict], s: dict, unit: str) -> None:
    """The tuning curve (see the module docstring)."""
    xs = [t.get("number", i) for i, t in enumerate(trials)]
    scores = [t["score"] for t in trials if t["score"] is not None]
    refs = [v for v in (run.get("default_score"), run.get("best_score")) if v is not None]
    lo, hi = (min(scores + refs), max(scores + refs)) if scores else (0.0, 1.0)
    pad = 0.08 * ((hi - lo) or abs(hi) or 1.0)
    floor = lo - pad
    for tech in s["techniques"]:
        pts = [(x, t["score"]) for x, t in zip(xs, trials)
               if t["technique"] == tech and t["score"] is not None]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=26, zorder=3,
                       color=technique_colour(tech), label=tech)
    bad = [x for x, t in zip(xs, trials) if t["score"] is None]
    if bad:
        ax.scatter(bad, [floor if scores else 0.1] * len(bad), marker="x", s=40,
                   color=FAIL_COLOUR, zorder=4, label=f"{FAILED} ({len(bad)})")
    if not scores:  # no score axis to draw: say so instead of an empty -0.04..0.04
        _no_data(ax, f"no successful trial ({len(bad)} failed)" if bad else "no trials")
        ax.set_ylim(0, 1)
    else:
        bx = [x for x, b in zip(xs, s["best_so_far"]) if b is not None]
        by = [b for b in s["best_so_far"] if b is not None]
        ax.step(bx, by, where="post", color="black", lw=1.4, label="best so far", zorder=2)
        if run.get("default_score") is not None:
            ax.axhline(run["default_score"], color="grey", ls="--", lw=1,
                       label=f"default: {fmt_score(run['default_score'], unit, run.get('default_spread'))}")
        if run.get("best_score") is not None:
            b, sd = run["best_score"], run.get("best_spread")
            ax.axhline(b, color="#b8860b", ls=":", lw=1.2,
                       label=f"kept: {fmt_score(b, unit, sd)}")
            if sd:
                ax.axhspan(b - sd, b + sd, color="#b8860b", alpha=0.12, lw=0)
        kept = [(xs[i], trials[i]["score"]) for i in s["kept_at"] if trials[i]["score"] is not None]
        if kept:
            ax.scatter([k[0] for k in kept], [k[1] for k in kept], marker="*", s=220,
                       facecolor="none", edgecolor="#b8860b", lw=1.5, zorder=5,
                       label="kept configuration")
        ax.set_ylim(floor - pad * 0.5, hi + pad)
        _score_axis(ax, plt)
    ax.set_xlabel("trial")
    ax.set_ylabel(f"score ({unit}, higher is better)")
    _trial_axis(ax)
    if len(xs) <= 12:
        ax.set_xticks(xs)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="best", ncol=2, framealpha=0.85)


def _credit(ax: Any, plt: Any, trials: list[dict], s: dict, unit: str) -> None:
    """Cumulative gain over the first successful trial, stacked by technique."""
    xs = [t.get("number", i) for i, t in enumerate(trials)]
    techs = [k for k in s["techniques"] if s["gain"][k] > 0]
    ax.set_title("who found the improvements: each new best's gain, credited to its technique",
                 fontsize=9, loc="left")
    if not techs:
        _no_data(ax, "no trial improved on the first successful one" if s["best"] is not None
                 else "no successful trial")
        ax.set_xticks([])
        return
    ys = [[c[k] for c in s["credit"]] for k in techs]
    ax.stackplot(xs, ys, step="post", colors=[technique_colour(k) for k in techs], alpha=0.85,
                 labels=[f"{k}: {s['new_bests'][k]} new best(s), +{fmt_number(s['gain'][k])}"
                         for k in techs])
    for i in s["new_best_at"][1:]:
        ax.axvline(xs[i], color="black", lw=0.4, alpha=0.3)
    ax.set_xlabel("trial")
    _trial_axis(ax)
    ax.set_ylabel(f"gain ({unit})", fontsize=8)
    _score_axis(ax, plt)
    ax.set_xlim(xs[0], xs[-1] if len(xs) > 1 else xs[0] + 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left", framealpha=0.85)


def _slice(ax: Any, plt: Any, name: str, trials: list[dict], kept: dict | None,
           floor: float) -> None:
    """One parameter: the score of every trial where it mattered, by value."""
    pairs = [(shown_params(t.get("config")).get(name, _ABSENT), t) for t in trials]
    pairs = [(v, t) for v, t in pairs if v is not _ABSENT]
    values = _ordered({v for v, _ in pairs})
    pos = {v: i for i, v in enumerate(values)}
    kept_value = shown_params(kept).get(name, _ABSENT) if kept else _ABSENT
    if kept_value in pos:
        ax.axvspan(pos[kept_value] - 0.4, pos[kept_value] + 0.4, color="#b8860b", alpha=0.15, lw=0)
    for j, (v, t) in enumerate(pairs):
        jitter = ((j * 0.618) % 1 - 0.5) * 0.35
        if t["score"] is None:
            ax.scatter(pos[v] + jitter, floor, marker="x", s=22, color=FAIL_COLOUR, zorder=3)
        else:
            ax.scatter(pos[v] + jitter, t["score"], s=14, color=technique_colour(t["technique"]),
                       zorder=3, alpha=0.85)
    labels = [fmt_value(name, v, compact=True) if name in BYTE_PARAMS else str(v) for v in values]
    ax.set_xticks(range(len(values)), labels, fontsize=7,
                  rotation=45 if sum(len(x) for x in labels) > 28 else 0,
                  ha="right" if sum(len(x) for x in labels) > 28 else "center")
    ax.set_xlim(-0.6, len(values) - 0.4)
    ax.set_title(f"{name} ({len(pairs)} trials)", fontsize=8.5)
    ax.tick_params(axis="y", labelsize=7)
    _score_axis(ax, plt)
    ax.grid(axis="y", alpha=0.3)


_ABSENT = object()
SLICE_COLUMNS = 4


def figure_png(run: dict, trials: list[dict]) -> bytes:
    """The report figure as PNG bytes."""
    plt = _pyplot()
    s = summarize(trials, run)
    unit = unit_of(run.get("unit"))
    params = list(slices(trials))
    rows = -(-len(params) // SLICE_COLUMNS)
    heights = [4.2, 2.0] + [2.3] * rows
    top, bottom = 0.8, 0.6  # inches above the first panel and below the last
    total = sum(heights) + top + bottom
    fig = plt.figure(figsize=(11, total))
    grid = fig.add_gridspec(2 + rows, SLICE_COLUMNS, height_ratios=heights, hspace=0.75,
                            wspace=0.28, left=0.08, right=0.98, top=1 - top / total,
                            bottom=bottom / total)
    ax = fig.add_subplot(grid[0, :])
    _curve(ax, plt, run, trials, s, unit)
    fails = f", {s['failed']} failed" if s["failed"] else ""
    ax.set_title("tuning curve: the score of each trial; the kept configuration is starred",
                 fontsize=9, loc="left")
    n = f"{len(trials)} trial{'s' if len(trials) != 1 else ''}"
    fig.suptitle(f"run {run['id']}: {run.get('job', '')} ({n}{fails}), "
                 f"scores in {unit}", fontsize=12, x=0.01, y=1 - 0.2 / total, ha="left",
                 va="top")
    _credit(fig.add_subplot(grid[1, :]), plt, trials, s, unit)
    scores = [t["score"] for t in trials if t["score"] is not None]
    if scores and params:
        floor = min(scores) - 0.08 * ((max(scores) - min(scores)) or abs(max(scores)) or 1.0)
        first = None
        for i, name in enumerate(params):
            a = fig.add_subplot(grid[2 + i // SLICE_COLUMNS, i % SLICE_COLUMNS], sharey=first)
            first = first or a
            _slice(a, plt, name, trials, run.get("best_config"), floor)
            if i % SLICE_COLUMNS == 0:
                a.set_ylabel(unit, fontsize=8)
            else:
                a.tick_params(axis="y", labelleft=False)
        y = first.get_position().y1 + 0.3 / total
        fig.text(0.01, y, "score per parameter value (a point per trial where the parameter "
                 "mattered; the kept value shaded; failures as red crosses)", fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _html_table(headers: list[str], rows: list[list[Any]], raw: int | None = None) -> str:
    """An HTML table; column ``raw`` holds markup already escaped."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(
            f"<td>{v if j == raw else html.escape('' if v is None else str(v))}</td>"
            for j, v in enumerate(r)) + "</tr>"
        for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page_html(run: dict, trials: list[dict]) -> str:
    """A self-contained HTML report: summary, figure with how to read it, tables."""
    png = base64.b64encode(figure_png(run, trials)).decode()
    s = summarize(trials, run)
    unit = unit_of(run.get("unit"))
    swatch = '<span style="display:inline-block;width:.9em;height:.9em;background:{}"></span> {}'
    techs = [[swatch.format(technique_colour(t), html.escape(t)), s["trials"][t],
              s["new_bests"][t], fmt_score(s["gain"][t], unit)] for t in s["techniques"]]
    rows = [[t.get("number"), t["technique"], t["iterations"],
             FAILED if t["score"] is None else fmt_number(t["score"]),
             fmt_efficiency(t.get("efficiency")), fmt_seconds(t["wall_time"]), t["error"],
             fmt_config(t["config"])] for t in trials]
    kept = [[k, fmt_value(k, v)] for k, v in shown_params(run.get("best_config")).items()]
    title = f"autotune run {run['id']}: {run.get('job', '')}"
    best = fmt_score(run.get("best_score"), unit, run.get("best_spread")) or "none"
    default = fmt_score(run.get("default_score"), unit, run.get("default_spread")) or "not measured"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:72em}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:2px 8px;font-size:90%;text-align:left}}th{{background:#eee}}
img{{max-width:100%}}</style>
</head><body>
<h1>{html.escape(title)}</h1>
<p>{len(trials)} trials, {s['failed']} failed. Kept configuration: <b>{html.escape(best)}</b>;
default configuration: {html.escape(default)}; speed-up over the default:
{html.escape(Speedup.of_run(run).shown() or "none")}. Scores are throughput in {html.escape(unit)}
(higher is better).</p>
<img alt="tuning curve, improvements per technique, score per parameter value" src="data:image/png;base64,{png}">
<h2>How to read the figure</h2>
<ul>
<li><b>Tuning curve</b>: one point per trial, coloured by the technique that proposed it
(the colours are the same in every report); failed trials are red crosses along the bottom.
The black steps are the best score so far, the dashed grey line the default configuration,
the dotted gold line (with its spread as a band) the configuration that was kept, and the
gold stars the trials that measured it.</li>
<li><b>Who found the improvements</b>: each time a trial beat every earlier one, the gain
goes to its technique. The AUC bandit gives more trials to techniques that earn such
credit.</li>
<li><b>Score per parameter value</b>: for each parameter that was varied, the trials where
it mattered (<code>servers</code> only with push/pull, <code>reduce_root</code> only with
<code>intra=root</code>, ...), by value; the kept value is shaded. A value whose points sit
high is a good one; a wide spread means the other parameters matter more.</li>
</ul>
<h2>Kept configuration</h2>
{_html_table(["parameter", "value"], kept)}
{"" if s["not_kept"] is None else
 f'<p class="not-kept">Fastest trial: {html.escape(not_kept_text(s["not_kept"], trials, unit))}</p>'}
<h2>Techniques</h2>
{_html_table(["technique", "trials", "new bests", "gain credited"], techs, raw=0)}
<h2>Run</h2>
{_html_table(["field", "value"], [list(f) for f in run_fields(run, len(trials))])}
<h2>Trials (score in {html.escape(unit)})</h2>
{_html_table(["#", "technique", "iterations", "score", "efficiency", "wall", "error",
              "config"], rows)}
</body></html>
"""


def write_report(run: dict, trials: list[dict], out: Path) -> None:
    suffix = out.suffix.lower()
    if suffix == ".png":
        out.write_bytes(figure_png(run, trials))
    elif suffix in (".html", ".htm"):
        out.write_text(page_html(run, trials), encoding="utf-8")
    else:
        raise click.BadParameter(f"{out}: the report is a .png or an .html file", param_hint="--out")


@click.command("report")
@click.argument("run_id", metavar="RUN")
@click.option("--out", type=OutFile(), default=None,
              help="FILE.png (the figure) or FILE.html (figure, how to read it, tables) "
                   "[default: a summary in the terminal].")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report's numbers as JSON (raw: scores in the run's unit).")
@db_path_option
def report(run_id: str, out: Path | None, as_json: bool, db_path: str | None) -> None:
    """Show how a run went: the tuning curve with the kept configuration, which
    technique found the improvements, and the score per parameter value.

    RUN is a run id, or 'latest' for the newest run. Without --out: a summary in the
    terminal (the kept configuration with its figure, where it came from if from the
    store, the speed-up, the curve as sparklines, the credit per technique).

    \b
    Examples:
      autotune report latest
      autotune report 12 --out run.html
      autotune report latest --json
    """
    if out is not None:
        if out.suffix.lower() not in (".png", ".html", ".htm"):
            raise click.BadParameter(f"{out}: the report is a .png or an .html file",
                                     param_hint="--out")
        _pyplot()  # fail early, before reading anything, if matplotlib is missing
    with open_store(db_path) as store:
        run = guard(lambda: store.run(run_id))
        trials = guard(lambda: store.trials(run["id"]))
    if out is not None:
        write_report(run, trials, out)
        n = f"{len(trials)} trial{'s' if len(trials) != 1 else ''}"
        click.echo(f"wrote {out} ({n} of run {run['id']})", err=as_json)
    if as_json:
        emit_json(report_json(run, trials))
    elif out is None:
        show_summary(run, trials)
