"""Real processes write one results store at once: eight on an SQLite file (no "database
is locked"), sixteen on a PostgreSQL database (jobs on many machines sharing one store).
No trial is lost or duplicated, and every run is closed with its true status."""

from __future__ import annotations

import multiprocessing as mp
import queue

import pytest

from autotune.store import Store
from store_helpers import closing_status, write_worker

RUNS, TRIALS = 3, 20


def _context() -> mp.context.BaseContext:
    return mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("database, workers", [("sqlite", 8), ("postgresql", 16)])
def test_concurrent_writers_lose_nothing_and_close_every_run(tmp_path, request, database, workers):
    if database == "sqlite":  # does not exist yet: all of them create it at once
        target = str(tmp_path / "shared.db")
    else:  # an empty database: all of them make the schema at once
        target = request.getfixturevalue("postgres").database()
    ctx = _context()
    barrier = ctx.Barrier(workers)
    errors = ctx.Queue()
    procs = [ctx.Process(target=write_worker, args=(target, w, RUNS, TRIALS, barrier, errors))
             for w in range(workers)]
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
    assert [p.exitcode for p in procs] == [0] * workers

    with Store(target, create=False) as store:
        read = store.connection.tuples
        assert read("select count(*) from runs")[0][0] == workers * RUNS
        assert read("select count(*) from trials")[0][0] == workers * RUNS * TRIALS
        # every run closed as its writer closed it, none left running
        runs = read("select job, id, status, finished from runs order by id")
        by_job: dict[str, list[str]] = {}
        for job, _, status, finished in runs:
            assert finished is not None, (job, status)
            by_job.setdefault(job, []).append(status)
        assert by_job == {f"w{w}": [closing_status(w, r) for r in range(RUNS)]
                          for w in range(workers)}
        # every run has exactly its own trials, numbers 0..TRIALS-1 once each, with its
        # worker's scores
        rows = read(
            "select r.job, t.run, count(*), count(distinct t.number), min(t.number), "
            "max(t.number), min(t.score), max(t.score) from trials t join runs r "
            "on r.id = t.run group by r.job, t.run")
        assert len(rows) == workers * RUNS
        for job, _, n, distinct, lo, hi, smin, smax in rows:
            w = int(job[1:])
            assert (n, distinct, lo, hi) == (TRIALS, TRIALS, 0, TRIALS - 1)
            assert w * 1000 <= smin <= smax < w * 1000 + 1000
        if database == "sqlite":
            assert read("pragma journal_mode")[0][0] == "wal"
        # two distinct model graphs and three distinct clusters, each stored once
        assert read("select count(*) from graphs")[0][0] == 5
