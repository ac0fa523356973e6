"""The rank launcher's failure policy (:func:`autotune.ranks.run`) with real processes
(plain Python, no torch): a stopped rank (SIGSTOP) does not hold the job for the whole
grace period, and it takes its SIGTERM when stopped."""

from __future__ import annotations

import os
import sys
import time

import pytest

from autotune.ranks import Rank, pid_alive, run

# waits for SIGTERM (recorded in a file), stopping itself first if asked
WAITER = """
import os, signal, sys, time
def term(*_):
    open(sys.argv[1], "w").write("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("ready", flush=True)
if sys.argv[2] == "stop":
    os.kill(os.getpid(), signal.SIGSTOP)
time.sleep(600)
"""
FAILS = "import time; time.sleep(1.0); raise SystemExit(3)"


def _rank(i: int, argv: list[str]) -> Rank:
    return Rank(i, "worker", [sys.executable, "-c", *argv], dict(os.environ), f"w{i}")


def test_a_stopped_rank_ends_the_grace_period_and_takes_its_sigterm(tmp_path) -> None:
    marks = [tmp_path / "w1", tmp_path / "w2"]
    t0 = time.monotonic()
    out = run([_rank(0, [FAILS]), _rank(1, [WAITER, str(marks[0]), "stop"])],
              grace=60, term_s=30)
    took = time.monotonic() - t0
    assert out.failed is not None and out.failed.rank.rank == 0 and out.failed.returncode == 3
    assert out.stopped_early and out.exits[1].returncode is None
    # neither the 60 s grace nor the 30 s before SIGKILL: the stopped rank was seen as
    # such, then continued with its SIGTERM pending, and handled it
    assert took < 25, took
    assert marks[0].read_text() == "SIGTERM"
    assert not pid_alive(out.exits[1].pid)


def test_a_running_rank_still_gets_its_grace_period(tmp_path) -> None:
    mark = tmp_path / "w1"
    grace = 3.0
    t0 = time.monotonic()
    out = run([_rank(0, [FAILS]), _rank(1, [WAITER, str(mark), "run"])], grace=grace)
    took = time.monotonic() - t0
    assert out.stopped_early and out.exits[1].returncode is None
    assert took >= 1.0 + grace  # the failure after 1 s, then the whole grace period
    assert mark.read_text() == "SIGTERM"



def test_on_started_runs_once_every_rank_is_started_and_what_it_raises_stops_them(
        tmp_path) -> None:
    """``autotune launch`` hosts its rendezvous store in ``on_started``, after the ranks
    started: they run while it does, and a store that cannot be hosted stops them rather
    than leaving them waiting for it."""
    marks = [tmp_path / "w0", tmp_path / "w1"]
    lines: list[str] = []
    ready: list[int] = []

    def started() -> None:  # both ranks answer while it runs: they were started first
        deadline = time.monotonic() + 30
        while sum("ready" in x for x in lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        ready.append(sum("ready" in x for x in lines))
        raise RuntimeError("no store here")

    with pytest.raises(RuntimeError, match="no store here"):
        run([_rank(i, [WAITER, str(marks[i]), "run"]) for i in range(2)], grace=60,
            term_s=30, emit=lines.append, on_started=started)
    assert ready == [2]
    assert [m.read_text() for m in marks] == ["SIGTERM", "SIGTERM"]  # stopped, not left
