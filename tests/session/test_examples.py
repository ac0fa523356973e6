"""The README's examples run as written under ``autotune launch``: the native runtime
(examples/train_mlp.py) and DDP kept with autotune's comm hook (examples/train_ddp.py)
train, tune, record the run and print the kept configuration in human units; DDP with a
Summation Service server (its group the workers', ``autotune.workers_group()``).
A budget of 6 iterations (3 trials) reaches no GP fit, so its first trial waits for no
background import (autotune.tuning.preload). The examples pass ``--total-steps`` (by
default their ``--steps``) as ``total_steps``: 200 steps of these small models do not pay
for a search's start (docs/tuner.md, "What tuning may cost"), so the job is said to be
long (``--total-steps 100000``) and runs 200 of them."""

from __future__ import annotations

# own world: the examples run as a user runs them, launcher included

import os
import subprocess
import sys
from pathlib import Path

import pytest
import zygote

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


# each example once: train_ddp.py with a server (DDP on the workers' group), which covers
# its run without one (the same session behind the same comm hook, issue 59)
@pytest.mark.parametrize("example, servers", [("train_mlp", 0), ("train_ddp", 1)])
def test_example_tunes_and_records_the_run(example, servers, tmp_path):
    from autotune.store import Store

    db = tmp_path / "ex.db"
    cmd = [sys.executable, "-m", "autotune.cli", "launch", "--workers", "2", "--servers",
           str(servers), str(ROOT / "examples" / f"{example}.py"), "--steps", "200", "--budget", "6",
           "--total-steps", "100000",
           "--db", str(db)]
    proc = zygote.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "kept configuration: streams=" in out and "step  199" in out
    assert "chunk_bytes=" in out and "'chunk_bytes'" not in out  # units, not a raw dict
    (run,) = Store(db).runs()
    assert run["job"] == example and run["status"] == "finished"
    assert run["unit"] == "samples/s" and len(Store(db).trials(run["id"])) >= 2
