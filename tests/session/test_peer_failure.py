"""Issue 28, a failing peer: worker 1's own code raises inside the session
(tests/peer_fail_worker.py, 3 workers, real processes under ``autotune launch``, gloo).
Workers 0 (the leader) and 2, the survivors, each print one line that names rank 1 and
its cause, no traceback, nothing that says the tuning is ``done`` or what it ``kept``;
they exit non-zero, the run is stored as ``failed``, and the launcher blames rank 1
(whichever rank exits first). Through ``autotune.session(model)``: since issue 59 it is
the one session behind DDP's comm hook that ``autotune.session(ddp_model)`` is, so one way
in tests both (the worker still takes ``ddp`` for a run by hand)."""

from __future__ import annotations

# own world: a rank fails on purpose: the world breaks

import os
import subprocess
import sys
from pathlib import Path

import pytest
import zygote

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "peer_fail_worker.py"
pytestmark = pytest.mark.slow


def _runs(db: Path) -> list[dict]:
    from autotune.store import Store

    with Store(db, create=False) as s:
        return s.runs()


def test_the_survivor_names_the_failing_rank_in_one_line(tmp_path):
    mode = "native"
    db = tmp_path / "x.db"
    env = dict(os.environ, OMP_NUM_THREADS="1", AUTOTUNE_PROGRESS="lines",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = zygote.run([sys.executable, "-m", "autotune.launch", "-n", "3", "--grace", "60",
                           str(WORKER), mode, str(db)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log
    for tag in ("[w0] ", "[w2] "):
        survivor = [line[len(tag):] for line in proc.stdout.splitlines()
                    if line.startswith(tag)]
        named = [line for line in survivor if "rank 1" in line and "RuntimeError: boom" in line]
        assert len(named) == 1, log
        assert named[0].startswith("autotune: rank 1"), named
        assert not any("Traceback" in line for line in survivor), log
        assert not any(" done" in line or "kept" in line for line in survivor), log
    assert "finished" not in log, log
    (run,) = _runs(db)
    assert run["status"] == "failed", run
    # the launcher still blames the rank that failed first, with its own traceback
    assert "autotune launch: rank 1 (worker) failed" in proc.stderr, log
