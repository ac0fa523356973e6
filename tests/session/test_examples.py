"""The README's DDP example runs as written: ``autotune launch`` of examples/train_ddp.py
(DDP kept, autotune's comm hook) trains, tunes, records the run and prints what it kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_train_ddp_example_tunes_ddp_and_records_the_run(tmp_path):
    from autotune.store import Store

    db = tmp_path / "ex.db"
    cmd = [sys.executable, "-m", "autotune.cli", "launch", "--workers", "2",
           str(ROOT / "examples" / "train_ddp.py"), "--steps", "24", "--budget", "10",
           "--db", str(db)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "kept configuration: streams=" in out and "step   23" in out
    (run,) = Store(db).runs()
    assert run["job"] == "train_ddp" and run["status"] == "finished"
    assert run["unit"] == "samples/s" and len(Store(db).trials(run["id"])) >= 2
