"""Issue 38 item 6, with real processes: a session that starts from the store says which
run its configuration came from (run id, job, when), in its output, its table and the
run it stores; ``autotune db show`` shows it. Run under ``autotune launch`` twice on one
store: a short tuning, then ``budget=0`` (the stored best kept untuned, scored over its
first training iterations after a warm-up), then a short tuning again (a warm start)."""

from __future__ import annotations

# own world: what the launcher prints of a job, twice on one store

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from autotune.schedule.schedule import SETTLED_SAMPLES
from autotune.store import Store
from autotune.store.origin import BUDGET_ZERO, NO_SEARCH, WARM_START, fmt_origin
from store_helpers import table_field
import zygote

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import autotune

    db, budget, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    short = len(sys.argv) > 4  # a job of known length, too short to pay for a search
    torch.manual_seed(0)
    # 1 MiB of gradients: their exposed communication stays clear of the "nothing to
    # win" floor (2% of a step) however much the tests beside it slow the step
    model = torch.nn.Sequential(torch.nn.Linear(8, 512), torch.nn.Tanh(),
                                torch.nn.Linear(512, 512), torch.nn.Linear(512, 1))
    with autotune.session(model, budget=budget, db=db, job="origin", warmup=1,
                          trial_iterations=2, seed=1, spend=0.05 if short else None,
                          total_steps=steps if short else None) as session:
        for step in range(steps):
            model(torch.randn(4, 8)).sum().backward()
            session.step()
            model.zero_grad()
""")


def _launch(script, db, budget: int, steps: int, *extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_PROGRESS"}
    env.update(OMP_NUM_THREADS="1", COLUMNS="200")
    proc = zygote.run([sys.executable, "-m", "autotune.cli", "launch", "--workers", "2",
                           str(script), str(db), str(budget), str(steps), *extra],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_a_configuration_from_the_store_says_which_run_it_came_from(tmp_path):
    script, db = tmp_path / "train.py", tmp_path / "o.db"
    script.write_text(SCRIPT)
    first_out = _launch(script, db, budget=8, steps=12)
    assert "from the store" not in first_out and "warm start:" not in first_out
    with Store(db) as store:
        first = store.run("latest")
    assert first["kept_from"] is None and first["best_config"]
    # budget 0: the stored best, kept untuned; said at the start, in the table, stored
    kept_out = _launch(script, db, budget=0, steps=1 + SETTLED_SAMPLES + 3)
    with Store(db) as store:
        kept = store.run("latest")
    assert kept["best_config"] == first["best_config"]
    # with how the stored best did against its own default there
    assert set(kept["kept_from"]) >= {"speedup", "beat_default"}
    assert {k: v for k, v in kept["kept_from"].items() if k not in ("speedup", "beat_default")} \
        == {"run": first["id"], "job": "origin", "distance": 0.0,
            "created": first["created"], "how": BUDGET_ZERO}
    said = fmt_origin(kept["kept_from"], how=False)
    assert f"[w0] budget 0: keeping the best configuration of {said} untuned" in kept_out
    assert table_field(kept_out, "from the store") == fmt_origin(kept["kept_from"])
    # scored over its first training iterations (after one warm-up): a figure, stored
    assert kept["best_iterations"] == SETTLED_SAMPLES and kept["best_score"] > 0
    assert f"{kept['best_iterations']} iterations" in table_field(kept_out, "throughput")
    # a short tuning again: it warm-starts from the store and says from which run first
    warm_out = _launch(script, db, budget=6, steps=10)
    line = re.search(r"\[w0\] warm start: trying the best configuration of run (\d+) \(job "
                     r"'origin', [\d: -]+\) first", warm_out)
    assert line and int(line.group(1)) in (first["id"], kept["id"]), warm_out
    with Store(db) as store:
        warm = store.run("latest")
    if warm["kept_from"] is not None:  # the stored best won again
        assert warm["kept_from"]["how"] == WARM_START
        assert warm["kept_from"]["run"] in (first["id"], kept["id"])
        assert warm["best_config"] == first["best_config"]
    else:
        assert warm["best_config"] != first["best_config"]
    # issue 65: a job too short for any search tries a stored best that beat its own run's
    # default (made so here: a loopback MLP's best rarely does by more than the noise),
    # confirms it against the default and says so; no warm-start line for a search that
    # never runs
    with sqlite3.connect(db) as con:
        con.execute("update runs set best_config = ?, best_score = 2.0, best_spread = 0.01,"
                    " best_iterations = 20, default_score = 1.0, default_spread = 0.01,"
                    " default_iterations = 20 where id = ?",
                    (json.dumps({**first["best_config"], "streams": 3}), first["id"]))
    short_out = _launch(script, db, 100, 1 + SETTLED_SAMPLES + 4, "short")
    assert "warm start:" not in short_out, short_out
    said = fmt_origin({**first, "run": first["id"]}, how=False)
    assert f"trying the stored best of {said}, 2.00x its default there, against the " \
           "default" in short_out, short_out
    with Store(db) as store:
        short = store.run("latest")
    if short["kept_from"] is not None:  # faster here too: kept, and stored as such
        assert short["kept_from"]["how"] == NO_SEARCH and short["kept_from"]["run"] == first["id"]
        assert short["best_config"]["streams"] == 3
    else:  # not faster here: back to the default, said
        assert "back to the default" in short_out, short_out
