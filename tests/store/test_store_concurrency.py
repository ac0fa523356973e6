"""Eight real processes write one results store at once: no "database is locked", no
lost row."""

from __future__ import annotations

import multiprocessing as mp
import queue
import sqlite3

import pytest

from store_helpers import write_worker

WORKERS, RUNS, TRIALS = 8, 3, 20


def _context() -> mp.context.BaseContext:
    return mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


@pytest.mark.timeout(300)
def test_eight_processes_write_without_locks_or_loss(tmp_path):
    path = str(tmp_path / "shared.db")  # does not exist yet: all eight create it at once
    ctx = _context()
    barrier = ctx.Barrier(WORKERS)
    errors = ctx.Queue()
    procs = [ctx.Process(target=write_worker, args=(path, w, RUNS, TRIALS, barrier, errors))
             for w in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    failures = []
    while True:
        try:
            failures.append(errors.get(timeout=0.5))
        except queue.Empty:
            break
    for p in procs:
        if p.is_alive():
            p.kill()
    assert not failures, "\n".join(failures)
    assert [p.exitcode for p in procs] == [0] * WORKERS

    con = sqlite3.connect(path)
    try:
        assert con.execute("select count(*) from runs").fetchone()[0] == WORKERS * RUNS
        assert con.execute("select count(*) from trials").fetchone()[0] == WORKERS * RUNS * TRIALS
        assert con.execute("select count(*) from runs where status = 'finished'").fetchone()[0] \
            == WORKERS * RUNS
        # every run has exactly its own trials, indices 0..TRIALS-1, with its worker's scores
        rows = con.execute(
            "select r.job, t.run, count(*), min(t.number), max(t.number), "
            "min(t.score), max(t.score) from trials t join runs r on r.id = t.run group by t.run"
        ).fetchall()
        assert len(rows) == WORKERS * RUNS
        for job, _, n, lo, hi, smin, smax in rows:
            w = int(job[1:])
            assert (n, lo, hi) == (TRIALS, 0, TRIALS - 1)
            assert w * 1000 <= smin <= smax < w * 1000 + 1000
        assert con.execute("pragma journal_mode").fetchone()[0] == "wal"
        # two distinct model graphs and three distinct clusters, each stored once
        assert con.execute("select count(*) from graphs").fetchone()[0] == 5
    finally:
        con.close()
