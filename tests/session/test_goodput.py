"""Goodput in real 2-worker jobs (issue 39): a codec with a known large error (random-k
at 5 % under error feedback, on a real classifier and real data) is rejected when lossy
trials are scored by goodput (failed, or cut short on its switch iteration; never kept),
natively and under DDP, with the reason and the measured efficiency in the store; scored
by throughput alone (the old behaviour), the same codec is scored like any other
configuration. Each job is a case of the shared 2-rank world (tests/worlds.py)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from autotune.tuning.efficiency import DROPPED

FAR_UNDER = DROPPED  # random-k 5 %'s efficiency is far under it (0.58 seen at the latest)


def _job(world, kind: str, score: str) -> dict:
    """The job in the shared 2-rank world (tests/worlds.py): what its leader saw."""
    leader, other = world(2).run("goodput_worker:job", kind=kind, score=score, timeout=300)
    assert other is None
    return leader


def _randomk(trials: list[dict]) -> list[dict]:
    return [t for t in trials if t["config"]["compression"] == "randomk"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["native", "ddp"])
def test_a_codec_with_a_large_error_is_rejected(world, kind):
    seen = _job(world, kind, "goodput")
    lossy = _randomk(seen["trials"])
    assert lossy, f"no random-k trial: {seen['trials']}"
    failed = [t for t in lossy if t["score"] is None]
    for t in lossy:
        # far under lossless; under COLLAPSED (0.5) where the codecs come early: the noise
        # scale grows as the loss falls, and the codecs now wait behind a lossless search
        assert t["efficiency"] is not None and t["efficiency"] < FAR_UNDER, t
        if t["score"] is None:
            assert "statistical efficiency" in t["error"], t
        else:  # scored by goodput (mostly cut short after its switch iteration; under a
            # loaded machine's timing, scored in full and never kept: the loss test's)
            assert t["score"] == pytest.approx(t["throughput"] * t["efficiency"]), t
    assert seen["best"]["compression"] == "none"
    assert seen["noise_scale"] is not None and seen["noise_scale"] > 0
    # lossless trials are scored as before: no efficiency
    lossless = [t for t in seen["trials"] if t["config"]["compression"] == "none"]
    assert lossless and all(t["score"] and t["efficiency"] is None for t in lossless)
    with sqlite3.connect(seen["db"]) as con:
        rows = con.execute("select config, score, error, efficiency from trials").fetchall()
    stored = [r for r in rows if json.loads(r[0])["compression"] == "randomk"]
    assert len(stored) == len(lossy) and all(r[3] < FAR_UNDER for r in stored)
    assert sum(r[1] is None and "statistical efficiency" in r[2] for r in stored) == len(failed)
    # the run says its scores are goodput: never ranked against throughput (issue 49)
    with sqlite3.connect(seen["db"]) as con:
        assert con.execute("select unit from runs").fetchall() == [("goodput samples/s",)]


@pytest.mark.slow
def test_scored_by_throughput_the_same_codec_is_not_rejected(world):
    seen = _job(world, "native", "throughput")
    lossy = _randomk(seen["trials"])
    assert lossy and any(t["score"] is not None for t in lossy), seen["trials"]
    assert all(t["efficiency"] is None for t in seen["trials"])
    assert seen["noise_scale"] is None  # nothing measured
    with sqlite3.connect(seen["db"]) as con:
        assert con.execute("select unit from runs").fetchall() == [("samples/s",)]


def test_the_loss_passed_to_step_reaches_the_leader_as_the_workers_mean(world):
    """Issue 62's loss test reads the loss the loop passes: each of 2 real workers passes
    its own; the session's iteration all-reduce gives every rank their mean."""
    leader, other = world(2).run("session_worker:loss_mean", timeout=120)
    for seen in (leader, other):
        assert seen["mean"] == pytest.approx(1.5)
        assert seen["one_missing"] is None and seen["nan"] is None
        assert "session.step(loss=...) takes the iteration's loss" in seen["error"]
        assert "not str" in seen["error"]
