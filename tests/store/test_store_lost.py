"""A shared store lost mid-run (issue 49), with real processes and a real PostgreSQL
server: a 2-worker job records in the shared store, the database host goes away while
it tunes, and the job goes on recording in ``./autotune.db`` as a run that continues
the shared one, its trials so far included. Once the server is back, ``autotune db
import`` brings the run in and closes the shared run as ``abandoned``, saying why;
importing again copies nothing."""

from __future__ import annotations

# own world: a PostgreSQL server of its own, halted mid-run

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.store import Store, StoreError
from postgres_server import PostgresServer
import zygote

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _trials(url: str) -> int:
    try:
        with Store(url, create=False) as s:
            runs = s.runs()
            return len(s.trials(runs[0]["id"])) if runs else 0
    except StoreError:
        return 0


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return zygote.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_store_lost_mid_run_goes_on_locally_and_comes_back_by_import(tmp_path):
    reason = PostgresServer.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with PostgresServer() as server:
        url = server.database()
        job = zygote.Popen(
            [sys.executable, "-m", "autotune.cli", "launch", "--workers", "2",
             str(ROOT / "examples" / "train_mlp.py"), "--steps", "300", "--budget", "150",
             # said to be long, so that 300 steps of this small MLP search (a job of 300
             # affords none: a search's start costs more than 5% of it)
             "--total-steps", "100000", "--db", url], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
        deadline = time.monotonic() + 90
        while (seen := _trials(url)) < 2:
            assert job.poll() is None, job.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "no trials in the shared store"
            time.sleep(0.2)
        server.halt()  # the database host is gone while the job tunes
        out, _ = job.communicate(timeout=180)
        assert job.returncode == 0, out[-3000:]
        assert "this run goes on in autotune.db as run 1" in out, out[-3000:]
        assert "autotune db import autotune.db --db" in out, out[-3000:]
        with Store(tmp_path / "autotune.db", create=False) as local:
            (run,) = local.runs()
            kept_locally = len(local.trials(run["id"]))
        assert run["status"] == "finished" and kept_locally >= seen, (run, seen)
        assert run["continues"]["run"] == 1 and run["continues"]["store"].startswith(
            "postgresql://")

        server.resume()
        done = _cli("db", "import", "autotune.db", "--db", url, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        # (PostgreSQL skips the key values it had cached when it was halted)
        new = re.search(r"run 1 -> run (\d+) in postgresql://", done.stdout)
        assert new and "run 1 there, whose store was lost, closed as abandoned" \
            in done.stdout, done.stdout
        with Store(url, create=False) as shared:
            imported, lost = shared.runs()
            assert lost["status"] == "abandoned" and lost["finished"], lost
            assert "store was lost mid-run" in lost["cause"], lost["cause"]
            assert lost["cause"].endswith(f"imported as run {new.group(1)}"), lost["cause"]
            assert imported["status"] == "finished" and imported["continues"]["run"] == 1
            assert len(shared.trials(imported["id"])) == kept_locally
            assert shared.graph(imported["model_fp"]).number_of_nodes() > 0
        again = _cli("db", "import", "autotune.db", "--db", url, "--json", cwd=tmp_path)
        assert json.loads(again.stdout) == [{"source_id": 1, "run_id": None, "closed": None}]
