"""Forked ranks look like fresh interpreters (autotune/forked.py): the same script run by
the rank launcher forked and fresh sees the same process and ends the same way, but for
what a fork cannot change (``/proc``'s view) and what must differ by rank (its random
generators); the launcher's exit functions stay the launcher's.

One launcher process (``LAUNCHER``) runs the job both ways: it imports torch by the
preload first, as ``autotune launch`` does, with a temporary folder of its own open.
"""

# own world: the launcher's way of starting ranks is what is tested

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

FACTS = str(Path(__file__).resolve().parent / "forked_facts.py")
RANKS = 4
LAUNCHER = """
import json, sys, tempfile
from pathlib import Path
from autotune import forked, ranks
from autotune.launch import plan_processes
out, ways = Path(sys.argv[2]), sys.argv[3:]
results = {}
with tempfile.TemporaryDirectory() as tmp:  # its clean-up is the launcher's, at exit
    assert forked.preload()
    for way in ways:
        procs = plan_processes([sys.argv[1], str(Path(tmp) / way)], workers=%d)
        job = ranks.run([p.as_rank() for p in procs], grace=30, timeout_s=120,
                        fork=way == "fork")
        results[way] = {"codes": [e.returncode for e in job.exits],
                        "lines": ["".join(e.lines) for e in job.exits],
                        "files": sorted(p.name for p in Path(tmp).iterdir() if p.name.startswith(way))}
        for r in range(%d):
            results[way].setdefault("facts", []).append(json.loads(Path(tmp, f"{way}.{r}.json").read_text()))
(out / "results.json").write_text(json.dumps(results))
""" % (RANKS, RANKS)


def _jobs(tmp_path: Path, *ways: str, ignore_sigint: bool = False) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", LAUNCHER, FACTS, str(tmp_path), *ways], capture_output=True,
        text=True, timeout=240, env={k: v for k, v in os.environ.items()
                                     if k not in ("OMP_NUM_THREADS", "AUTOTUNE_LAUNCH_FORK")},
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint
        else None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / "results.json").read_text())


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict:
    return _jobs(tmp_path_factory.mktemp("forked"), "fork", "fresh")


def test_a_forked_rank_sees_what_a_fresh_one_does(jobs):
    fork, fresh = jobs["fork"]["facts"], jobs["fresh"]["facts"]
    for r in range(RANKS):
        for key in ("name", "file", "path0", "path", "rank", "world_size", "signals",
                    "excepthook", "launcher_modules", "fds", "threads"):
            assert fork[r][key] == fresh[r][key], (r, key, fork[r][key], fresh[r][key])
        assert fork[r]["argv"][0] == fresh[r]["argv"][0] == FACTS
        assert [Path(a).name for a in (fork[r]["argv"][1], fresh[r]["argv"][1])] == ["fork", "fresh"]
        assert fork[r]["name"] == "__main__"
        assert fork[r]["signals"]["SIGINT"] == str(signal.default_int_handler)
    # the rank's OMP_NUM_THREADS (1, the launcher's default), though the launcher's torch
    # was loaded without it
    assert fork[0]["torch_threads"] == fresh[0]["torch_threads"] == 1, (fork[0], fresh[0])
    # nothing of the launcher's own packages is loaded before the script imports them
    assert fork[0]["launcher_modules"] == [], fork[0]["launcher_modules"]
    # each rank's generators are its own, as in fresh interpreters
    assert len({f["random"] for f in fork}) == len({f["numpy"] for f in fork}) == RANKS


def test_a_forked_rank_ends_as_python_does(jobs):
    """Exit codes (normal, ``sys.exit(3)``, an uncaught exception, ``sys.exit(message)``),
    what is printed (a traceback that starts at the script, the message), the output line
    left without a newline, the non-daemon thread joined, ``atexit`` and the script's
    ``weakref`` finalizer run."""
    assert jobs["fork"]["codes"] == jobs["fresh"]["codes"] == [0, 3, 1, 1], jobs
    assert jobs["fork"]["lines"] == jobs["fresh"]["lines"], jobs
    lines = jobs["fork"]["lines"]
    assert "ValueError: raised on purpose in forked_facts" in lines[2]
    assert lines[2].startswith("rank 2 wrote its factsTraceback (most recent call last):\n"
                               f'  File "{FACTS}"'), lines[2]
    assert "said on purpose in forked_facts" in lines[3]
    for way in ("fork", "fresh"):
        for r in range(RANKS):
            assert {f"{way}.{r}.thread", f"{way}.{r}.atexit", f"{way}.{r}.finalizer"} <= \
                set(jobs[way]["files"]), \
                (way, r, jobs[way]["files"])


def test_sigint_ignored_by_inheritance_stays_ignored_in_a_forked_rank(tmp_path):
    facts = _jobs(tmp_path, "fork", ignore_sigint=True)["fork"]["facts"]
    assert all(f["signals"]["SIGINT"] == str(signal.SIG_IGN) for f in facts), facts


def test_a_process_that_imported_torch_first_starts_fresh_ranks():
    """Only a launcher whose import of torch is the preload's forks (what torch left to
    run at exit is known there); this test process imported torch long before."""
    import torch  # noqa: F401

    from autotune import forked

    assert forked.preload() is False
