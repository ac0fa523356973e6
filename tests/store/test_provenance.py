"""Issue 38 item 6: one number per claim, with provenance, in real store files.

* A configuration that came from the store (a warm start from a similar job, the stored
  best kept with budget 0, a restart) keeps its origin: the run it came from, that
  run's job, when, how. When it is the one kept, the run stores it (``runs.kept_from``,
  schema v7) and ``autotune db show`` and ``autotune report`` show it.
* The kept figure is one number: the same mean (± spread, over its iterations) in ``db
  runs``, ``db show``, ``db best`` and ``report``.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.schedule.ledger import Ledger
from autotune.store import Store, schema
from autotune.store.origin import BUDGET_ZERO, WARM_START, fmt_origin, origin_of
from autotune.store.warmstart import warm_start_sources
from autotune.tuning.space import SearchSpace
from autotune.units import fmt_number, fmt_score
from store_helpers import (CNN, OLD_FINISHED_RUN, WORLD, add_run, cluster, model, old_store,
                           table_field)


def run_cli(*args: str) -> str:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False, env={"COLUMNS": "240"})
    assert r.exit_code == 0, r.output
    return r.output


def _squeezed(text: str) -> str:
    return " ".join(text.split())


def test_a_warm_start_says_which_run_and_the_kept_one_is_stored_with_it(tmp_path):
    path = tmp_path / "p.db"
    space = SearchSpace.build()
    g, t = model(CNN), cluster(2)
    stored = space.validate({"streams": 4, "chunk_bytes": 1 << 20})
    with Store(path) as store:
        first = add_run(store, g, t, stored, score=900.0, job="earlier")
        earlier = store.run(first)
        sources = warm_start_sources(store, g, t, space, unit="samples/s", machines=2)
        # its best against its own default: no counts stored, so no speed-up is claimed
        assert sources == [(stored, {**origin_of(earlier, WARM_START), "distance": 0.0,
                                     "speedup": None, "beat_default": False})]
        # a later run tries it first, measures it and keeps it
        rid = store.start_run(job="later", world=WORLD, backend="gloo", model_graph=g,
                              topology_graph=t, space_facts={})
        ledger = Ledger(space, None, store, rid)
        for config, origin in sources:
            ledger.came_from(config, origin)
        for x in (1000.0, 1040.0, 980.0, 1020.0):
            ledger.sample(stored, x)
        ledger.close("finished", kept=stored)
        later = store.run(rid)
    assert later["kept_from"] == {"run": first, "job": "earlier", "created": earlier["created"],
                                  "how": WARM_START, "distance": 0.0, "speedup": None,
                                  "beat_default": False}
    said = fmt_origin(later["kept_from"])
    assert said == f"run {first} (job 'earlier', {earlier['created'][:16].replace('T', ' ')}; " \
                   "warm start)"
    # autotune db show and autotune report (terminal, JSON, HTML's fields) show it
    assert table_field(run_cli("db", "show", str(rid), "--db", str(path)), "kept from") == said
    assert later["kept_from"] == json.loads(run_cli("db", "show", str(rid), "--db", str(path),
                                                    "--json"))["kept_from"]
    assert f"kept from {said}" in _squeezed(run_cli("report", str(rid), "--db", str(path)))
    doc = json.loads(run_cli("report", str(rid), "--db", str(path), "--json"))
    assert doc["kept_from"] == later["kept_from"]
    # a run whose kept configuration did not come from the store says nothing of it
    assert table_field(run_cli("db", "show", str(first), "--db", str(path)), "kept from") is None


def test_a_configuration_not_kept_leaves_no_provenance(tmp_path):
    space = SearchSpace.build()
    with Store(tmp_path / "p.db") as store:
        rid = store.start_run(job="j", world=WORLD, backend="gloo", model_graph=model(CNN),
                              topology_graph=cluster(2), space_facts={})
        ledger = Ledger(space, None, store, rid)
        warm = space.validate({"streams": 2})
        ledger.came_from(warm, {"run": 7, "job": "x", "created": None, "how": BUDGET_ZERO})
        ledger.sample(space.default(), 5.0)
        ledger.close("finished", kept=space.default())
        assert store.run(rid)["kept_from"] is None


def test_a_v6_store_migrates_to_v7_with_no_provenance(tmp_path):
    path = tmp_path / "v6.db"
    old_store(path, 6, OLD_FINISHED_RUN)
    with Store(path) as s:
        assert s.schema_version == schema.SCHEMA_VERSION >= 7
        assert s.run(1)["kept_from"] is None
    assert "kept from" not in run_cli("db", "show", "1", "--db", str(path))


def test_one_kept_figure_in_db_runs_show_best_and_report(tmp_path):
    path = tmp_path / "k.db"
    with Store(path) as store:
        rid = store.start_run(job="j", world=WORLD, backend="gloo", model_graph=model(CNN),
                              topology_graph=cluster(2), space_facts={})
        store.finish_run(rid, best_config={"streams": 3}, best_score=4937.4, best_spread=614.2,
                         best_iterations=23, default_score=3833.0, default_spread=41.0,
                         default_iterations=4)
    figure = f"{fmt_score(4937.4, 'samples/s', 614.2)} (23 iterations)"
    assert table_field(run_cli("db", "show", str(rid), "--db", str(path)), "kept") == figure
    assert f"kept {figure}" in _squeezed(run_cli("report", str(rid), "--db", str(path)))
    for command in (["db", "runs"], ["db", "best"]):
        out = run_cli(*command, "--db", str(path))
        header = [c.strip() for c in next(ln for ln in out.splitlines()
                                           if "┃ id" in ln).split("┃")]
        assert "kept" in header and "±" in header and "best" not in header, header
        row = next(ln for ln in out.splitlines() if ln.startswith("│") and " j " in ln)
        cells = [c.strip() for c in row.split("│")]
        assert fmt_number(4937.4) in cells and fmt_number(614.2) in cells, row


@pytest.mark.parametrize("origin, text", [
    ({"run": 3, "job": "a", "created": "2026-11-25T10:03:41.120+00:00", "how": "restart"},
     "run 3 (job 'a', 2026-11-25 10:03; restart)"),
    ({"run": 3, "job": None, "created": None, "how": "budget 0"}, "run 3 (budget 0)"),
    (None, ""),
])
def test_an_origin_reads_as_one_phrase(origin, text):
    assert fmt_origin(origin) == text


def test_an_aborted_runs_best_so_far_is_not_measured_not_none(tmp_path):
    """Issue 65 item 7: an aborted run that kept a configuration from the store before any
    figure of it was scored said ``kept none`` beside that configuration and its origin."""
    path = tmp_path / "a.db"
    with Store(path) as store:
        first = add_run(store, model(CNN), cluster(2), {"streams": 4}, score=900.0, job="e")
        rid = store.start_run(job="j", world=WORLD, backend="gloo", model_graph=model(CNN),
                              topology_graph=cluster(2), space_facts={})
        store.finish_run(rid, status="aborted", best_config={"streams": 4}, best_score=None,
                         kept_from={"run": first, "job": "e", "created": None,
                                    "how": WARM_START})
        empty = store.start_run(job="j", world=WORLD, backend="gloo", model_graph=model(CNN),
                                topology_graph=cluster(2), space_facts={})
        store.finish_run(empty, status="aborted", best_config=None, best_score=None)
    shown = run_cli("db", "show", str(rid), "--db", str(path))
    assert table_field(shown, "kept") == "not measured (the run was aborted)"
    assert table_field(shown, "kept from") == f"run {first} (job 'e'; warm start)"
    report = _squeezed(run_cli("report", str(rid), "--db", str(path)))
    assert "kept not measured (the run was aborted)" in report and "kept none" not in report
    assert "kept none" in _squeezed(run_cli("report", str(empty), "--db", str(path)))


def test_the_ddp_comparison_is_stored_and_shown(tmp_path):
    """Issue 65 item 5: what ``autotune tune`` measured against DDP was printed and stored
    nowhere; ``record_ddp`` keeps it (``runs.ddp``, schema 13), and ``db show``, its JSON,
    ``report`` and the HTML page's fields show it. A store of schema 12 migrates with none."""
    from autotune.speedup import Speedup

    path = tmp_path / "d.db"
    with Store(path) as store:
        rid = store.start_run(job="tune:m", world=WORLD, backend="gloo", model_graph=model(CNN),
                              topology_graph=cluster(2), space_facts={}, unit="it/s")
        store.finish_run(rid, best_config={"streams": 2}, best_score=180.0)
        store.record_ddp(rid, (190.0, 40.0, 300), (175.0, 30.0, 320))
        stored = {"ddp": {"score": 190.0, "spread": 40.0, "iterations": 300},
                  "kept": {"score": 175.0, "spread": 30.0, "iterations": 320}}
        assert store.run(rid)["ddp"] == stored
        other = store.start_run(job="j", world=WORLD, backend="gloo", model_graph=model(CNN),
                                topology_graph=cluster(2), space_facts={})
    ratio = Speedup.of((175.0, 30.0, 320), (190.0, 40.0, 300)).shown()
    shown = run_cli("db", "show", str(rid), "--db", str(path))
    assert table_field(shown, "speed-up over DDP") == ratio and ratio.startswith("0.92x")
    assert table_field(shown, "DDP") == "190 ± 40 it/s (300 iterations)"
    assert json.loads(run_cli("db", "show", str(rid), "--db", str(path), "--json"))["ddp"] \
        == stored
    assert f"speed-up over DDP {ratio}" in _squeezed(run_cli("report", str(rid), "--db",
                                                               str(path)))
    assert "speed-up over DDP" not in run_cli("db", "show", str(other), "--db", str(path))
    with sqlite3.connect(path) as con:
        con.execute("alter table runs drop column ddp")
        con.execute("update meta set value = '12' where key = 'schema_version'")
    with Store(path) as s:
        assert s.schema_version == schema.SCHEMA_VERSION == 13 and s.run(rid)["ddp"] is None


def test_a_faster_trial_not_kept_is_shown_with_why(tmp_path):
    """Issue 65 items 5 and 6: the trials' best rose to 323 it/s, its confirm trials
    scored 300 and 270, the default (255) was kept, and nothing on the page or in `db
    show` said why."""
    from autotune.reports.report import page_html

    path = tmp_path / "f.db"
    default, fast = {"streams": 1}, {"streams": 4}
    with Store(path) as store:
        rid = store.start_run(job="tune:m", world=WORLD, backend="gloo", model_graph=model(CNN),
                              topology_graph=cluster(2), space_facts={}, unit="it/s")
        for n, (config, score) in enumerate([(default, 255.0), (fast, 323.0), (default, 256.0),
                                             (fast, 300.0), (fast, 270.0)]):
            store.add_trial(rid, number=n, technique="grid", config=config, iterations=3,
                            score=score)
        store.finish_run(rid, best_config=default, best_score=255.5, default_score=255.5)
        run, trials = store.run(rid), store.trials(rid)
    out = _squeezed(run_cli("report", str(rid), "--db", str(path)))
    assert "fastest trial #1 streams=4" in out and "323 it/s once" in out, out
    assert "298 it/s on average over its 3 trials" in out and "not kept" in out, out
    doc = json.loads(run_cli("report", str(rid), "--db", str(path), "--json"))
    assert doc["fastest_not_kept"]["at"] == 1 and doc["fastest_not_kept"]["trials"] == 3
    assert "Fastest trial: #1 streams=4" in page_html(run, trials)
    shown = _squeezed(run_cli("db", "show", str(rid), "--db", str(path)))  # item 5
    assert "│ fastest trial │ #1 streams=4, 323 it/s once" in shown and "not kept" in shown, shown
    doc = json.loads(run_cli("db", "show", str(rid), "--db", str(path), "--json"))
    assert doc["fastest_not_kept"]["at"] == 1 and abs(doc["fastest_not_kept"]["mean"] - 893 / 3) < 1e-9
