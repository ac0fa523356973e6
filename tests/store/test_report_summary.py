"""``autotune report RUN`` without ``--out`` (issue 28): a short summary in the terminal,
from a real tuning run on the simulator: the run, the kept configuration in human units,
the speed-up, the tuning curve as sparklines, the credit per technique; 80 columns."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.reports.report import NO_SCORE, SPARKS, sparkline
from autotune.speedup import Speedup
from autotune.store import Store
from autotune.store.summary import summarize
from autotune.units import fmt_config, fmt_score, unit_of
from store_helpers import CNN, WORLD, cluster, model, tune_simulated


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A store holding one real simulated tuning run: (path, run, trials)."""
    work = tmp_path_factory.mktemp("summary")
    path = work / "runs.db"
    rid = tune_simulated(path, work)
    with Store(path, create=False) as s:
        return path, s.run(rid), s.trials(rid)


def report(*args, **kw):
    return CliRunner().invoke(cli, ["report", *[str(a) for a in args]],
                              catch_exceptions=False, **kw)


def _fits(text: str, width: int = 80) -> list[str]:
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines), [ln for ln in lines if len(ln) > width]
    return lines


def _spark(lines: list[str], label: str) -> str:
    (line,) = [ln for ln in lines if ln.strip().startswith(label)]
    return line.strip()[len(label):].strip()


def _new_bests(trials: list[dict]) -> dict[str, int]:
    best, out = None, {}
    for t in trials:
        out.setdefault(t["technique"], 0)
        if t["score"] is not None and (best is None or t["score"] > best):
            best = t["score"]
            out[t["technique"]] += 1
    return out


def test_summary_shows_the_kept_configuration_curve_and_techniques(tuned, monkeypatch):
    path, run, trials = tuned
    monkeypatch.setenv("COLUMNS", "80")
    r = report("latest", "--db", path)
    assert r.exit_code == 0, r.output
    lines = _fits(r.output)
    flat = " ".join(r.output.split())  # a long configuration may wrap
    unit = unit_of(run["unit"])
    assert f"run {run['id']}: {run['job']}" in lines[0]
    assert run["status"] in flat and run["created"][:10] in flat
    assert fmt_config(run["best_config"]) in flat and "chunk_bytes=" in flat
    assert "KiB" in flat or "MiB" in flat  # human units, not raw bytes
    assert fmt_score(run["best_score"], unit, run["best_spread"]) in flat
    assert Speedup.of_run(run).shown() in flat  # the one definition, as everywhere
    # the tuning curve: one character per trial; the best so far never falls and ends
    # at the top; each trial's own character rises with its score, lowest to highest
    scores = [t["score"] for t in trials]
    each, best = _spark(lines, "each trial"), _spark(lines, "best so far")
    assert len(each) == len(best) == len(trials) < 80 - 15
    levels = [SPARKS.index(c) for c in best]
    assert levels == sorted(levels) and best[-1] == SPARKS[-1]
    by_score = [SPARKS.index(each[i]) for i in sorted(range(len(scores)), key=scores.__getitem__)]
    assert by_score == sorted(by_score) and by_score[0] == 0 and by_score[-1] == len(SPARKS) - 1
    assert len(set(by_score)) >= 3  # a curve, not a flat line
    assert "simulated samples/s" in flat
    # credit per technique: every technique with its trials and new bests
    want = _new_bests(trials)
    assert len(want) >= 3
    for tech, bests in want.items():
        n = sum(t["technique"] == tech for t in trials)
        (row,) = [ln for ln in lines if ln.startswith(f"│ {tech} ")]
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[:2] == [tech, str(n)] and cells[3] == str(bests), row
        assert cells[2] == f"{n / len(trials):.0%}"


def test_summary_json_has_the_same_facts(tuned):
    path, run, trials = tuned
    r = report(run["id"], "--db", path, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["kept_config"] == run["best_config"] and data["created"] == run["created"]
    assert data["finished"] == run["finished"] and data["trials"] == len(trials)
    assert {k: v["new_bests"] for k, v in data["techniques"].items()} == _new_bests(trials)
    assert sum(v["share"] for v in data["techniques"].values()) == pytest.approx(1.0)
    assert data["best_so_far"][-1] == max(t["score"] for t in trials)


def test_many_trials_share_columns_and_failures_are_crosses(tmp_path, monkeypatch):
    path = tmp_path / "many.db"
    scores = [None if i % 37 == 5 else 100.0 + (i * 7919) % 251 for i in range(300)]
    with Store(path) as s:
        rid = s.start_run(job="many", world=WORLD, backend="gloo", model_graph=model(CNN),
                          topology_graph=cluster(2), space_facts={}, unit="it/s")
        for i, sc in enumerate(scores):
            s.add_trial(rid, number=i, technique=["grid", "bayes"][i % 2],
                        config={"streams": 1 + i % 16}, iterations=2, score=sc,
                        error=None if sc is not None else "timed out")
        s.finish_run(rid, best_config={"streams": 3}, best_score=340.0, default_score=170.0,
                     best_iterations=6, default_iterations=6)
    monkeypatch.setenv("COLUMNS", "80")
    r = report("latest", "--db", path)
    assert r.exit_code == 0, r.output
    lines = _fits(r.output)
    each, best = _spark(lines, "each trial"), _spark(lines, "best so far")
    per = -(-300 // (80 - 15))
    assert len(each) == len(best) == -(-300 // per) and f"{per} per column" in r.output
    assert NO_SCORE not in each  # every column has a successful trial: its best is shown
    assert "2.00x" in r.output and "failed" in r.output
    # a run whose every trial failed says so instead of drawing a curve
    with Store(path) as s:
        rid = s.start_run(job="broken", world=WORLD, backend="gloo", model_graph=model(CNN),
                          topology_graph=cluster(2), space_facts={}, unit="it/s")
        s.add_trial(rid, number=0, technique="grid", config={"streams": 1}, iterations=2,
                    score=None, error="timed out")
        s.finish_run(rid, status="failed", best_config=None, best_score=None)
    r = report("latest", "--db", path)
    assert r.exit_code == 0, r.output
    assert "no successful trial (1 failed)" in r.output and "best so far" not in r.output


def test_sparkline_maps_the_range_onto_eight_levels():
    assert sparkline([0.0, 1.0, 2.0, 7.0, None], 0.0, 7.0) == "▁▂▃█" + NO_SCORE
    assert sparkline([5.0, 5.0], 5.0, 5.0) == SPARKS[5] * 2
    assert sparkline([None], 0, 1, empty=" ") == " "


def test_report_latest_on_an_empty_store_is_a_one_line_error(tmp_path):
    path = tmp_path / "empty.db"
    Store(path).close()
    r = report("latest", "--db", path)
    assert r.exit_code == 1 and r.output.strip().count("\n") == 0, r.output
    assert "no runs in" in r.output and "Traceback" not in r.output


def test_the_figure_numbers_trials_with_whole_numbers(tuned):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from autotune.reports import report as rep

    _, run, trials = tuned
    assert len(trials) > 12  # past the explicit ticks, the locator chooses them
    s = summarize(trials, run)
    fig, (a, b) = plt.subplots(2)
    rep._curve(a, plt, run, trials, s, "it/s")
    rep._credit(b, plt, trials, s, "it/s")
    for ax in (a, b):
        ticks = list(ax.get_xticks())
        assert len(ticks) >= 3 and all(float(t).is_integer() for t in ticks), ticks
    plt.close(fig)
