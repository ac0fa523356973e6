"""``autotune report RUN --out FILE.png|html``: how a tuning run went, as a picture.

Three views of a run's trials (paper 004 §VI's ensemble at work):

* the score of every trial, coloured by the technique that proposed it, with the
  best-so-far curve and the default configuration's score;
* each technique's share of the trials;
* each technique's share of the *new bests* (a trial that beat every earlier one: the
  credit the AUC bandit hands out).

PNG is the figure; HTML is the figure embedded in one self-contained page with the
run's facts, best configuration and trial table. matplotlib comes from the ``plot``
extra and is imported only here, inside the functions.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import click

FAILED = "failed"


def summarize(trials: list[dict]) -> dict[str, Any]:
    """Per-technique counts of trials and of new bests, and the best-so-far curve
    (``None`` until the first successful trial)."""
    best: float | None = None
    curve: list[float | None] = []
    new_best_at: list[int] = []
    per_trials: Counter[str] = Counter()
    per_bests: Counter[str] = Counter()
    for i, t in enumerate(trials):
        per_trials[t["technique"]] += 1
        s = t.get("score")
        if s is not None and (best is None or s > best):
            best = s
            new_best_at.append(i)
            per_bests[t["technique"]] += 1
        curve.append(best)
    techniques = sorted(per_trials, key=lambda k: (-per_trials[k], k))
    return {
        "techniques": techniques,
        "trials": dict(per_trials),
        "new_bests": {k: per_bests.get(k, 0) for k in techniques},
        "best_so_far": curve,
        "new_best_at": new_best_at,
        "failed": sum(1 for t in trials if t.get("score") is None),
        "best": best,
    }


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise click.ClickException(
            "autotune report needs matplotlib: pip install 'autotune[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_png(run: dict, trials: list[dict]) -> bytes:
    """The report figure as PNG bytes."""
    plt = _pyplot()
    s = summarize(trials)
    techniques = s["techniques"]
    colours = {t: plt.get_cmap("tab10")(i % 10) for i, t in enumerate(techniques)}
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(9, 7.5), gridspec_kw={"height_ratios": [3, 2]})
    scores = [t["score"] for t in trials if t["score"] is not None]
    # failed trials are drawn as crosses just below the lowest score
    floor = (min(scores) - 0.05 * ((max(scores) - min(scores)) or 1.0)) if scores else 0.0
    for tech in techniques:
        pts = [(i, t["score"]) for i, t in enumerate(trials) if t["technique"] == tech and t["score"] is not None]
        bad = [i for i, t in enumerate(trials) if t["technique"] == tech and t["score"] is None]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=22, color=colours[tech], label=tech)
        if bad:
            ax.scatter(bad, [floor] * len(bad), marker="x", s=30, color=colours[tech],
                       label=f"{tech} ({FAILED})")
    xs = [i for i, b in enumerate(s["best_so_far"]) if b is not None]
    if xs:
        ax.step(xs, [s["best_so_far"][i] for i in xs], where="post", color="black", lw=1.5,
                label="best so far")
    if run.get("default_score") is not None:
        ax.axhline(run["default_score"], color="grey", ls="--", lw=1, label="default config")
    ax.set_xlabel("trial")
    ax.set_ylabel("score (higher is better)")
    ax.set_title(f"run {run['id']}: {run.get('job', '')} ({len(trials)} trials)")
    ax.grid(alpha=0.3)
    if techniques:
        ax.legend(fontsize=8, loc="best")
    n_trials = max(sum(s["trials"].values()), 1)
    n_bests = max(sum(s["new_bests"].values()), 1)
    x = range(len(techniques))
    bx.bar([i - 0.2 for i in x], [100 * s["trials"][t] / n_trials for t in techniques], width=0.4,
           color=[colours[t] for t in techniques], alpha=0.5, label="share of trials")
    bx.bar([i + 0.2 for i in x], [100 * s["new_bests"][t] / n_bests for t in techniques], width=0.4,
           color=[colours[t] for t in techniques], hatch="//", edgecolor="black",
           label="share of new bests")
    bx.set_xticks(list(x), techniques)
    bx.set_ylabel("%")
    bx.set_ylim(0, 100)
    bx.legend(fontsize=8)
    bx.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _html_table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in r) + "</tr>"
        for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page_html(run: dict, trials: list[dict]) -> str:
    """A self-contained HTML report: facts, figure, per-technique table, trials."""
    png = base64.b64encode(figure_png(run, trials)).decode()
    s = summarize(trials)
    facts = [[k, json.dumps(v) if isinstance(v, (dict, list)) else v] for k, v in run.items()
             if k != "best_config"]
    techs = [[t, s["trials"][t], s["new_bests"][t]] for t in s["techniques"]]
    rows = [[t["index"], t["technique"], t["iterations"], t["score"], t["wall_time"], t["error"],
             json.dumps(t["config"], sort_keys=True)] for t in trials]
    title = f"autotune run {run['id']}: {run.get('job', '')}"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:70em}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:2px 8px;font-size:90%;text-align:left}}th{{background:#eee}}</style>
</head><body>
<h1>{html.escape(title)}</h1>
<p>{len(trials)} trials, {s['failed']} failed; best score {s['best']}, default {run.get('default_score')}.</p>
<img alt="scores per trial and technique shares" src="data:image/png;base64,{png}">
<h2>Best configuration</h2>
{_html_table(["parameter", "value"], [[k, v] for k, v in (run.get("best_config") or {}).items()])}
<h2>Techniques</h2>
{_html_table(["technique", "trials", "new bests"], techs)}
<h2>Run</h2>
{_html_table(["field", "value"], facts)}
<h2>Trials</h2>
{_html_table(["#", "technique", "iterations", "score", "wall s", "error", "config"], rows)}
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
@click.argument("run_id")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="FILE.png (the figure) or FILE.html (figure, tables).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Database file [default: $AUTOTUNE_DB or ./autotune.db].")
def report(run_id: str, out: Path, db_path: Path | None) -> None:
    """Plot a run: score per trial by technique, best so far, technique shares."""
    from autotune.store.command import _guard, open_store

    if out.suffix.lower() not in (".png", ".html", ".htm"):
        raise click.BadParameter(f"{out}: the report is a .png or an .html file", param_hint="--out")
    _pyplot()  # fail early, before reading anything, if matplotlib is missing
    with open_store(db_path) as store:
        run = _guard(lambda: store.run(run_id))
        trials = _guard(lambda: store.trials(run_id))
    write_report(run, trials, out)
    click.echo(f"wrote {out} ({len(trials)} trials of run {run['id']})")
