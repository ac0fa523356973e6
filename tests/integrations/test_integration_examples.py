"""The integration examples, run as a user runs them: ``torchrun --standalone
--nproc-per-node 2 examples/train_<framework>.py`` on CPU (gloo), each training a real
small model on real data shipped with its packages, with the real framework. The
results store then holds a ``finished`` run with its trials, and an iteration is an
optimizer step: gradient-accumulation micro-steps (DDP's ``no_sync()``) are not counted.
An error inside training closes the run as ``failed``, never leaves it ``running``.

Each test skips, saying why, where its framework is not installed (``make test``
installs the extras: ``.[lightning,transformers,accelerate]``).
"""

from __future__ import annotations

# own world: the examples run as a user runs them, launcher included

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
WARMUP = 3  # autotune.session's default warm-up: iterations before the first trial
pytestmark = pytest.mark.slow


def needs(*modules: str) -> None:
    for module in modules:
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e "
                                           "'.[lightning,transformers,accelerate]')")


def run_example(name: str, tmp_path: Path, *args: str) -> tuple[int, str, Any, list[dict]]:
    """Run ``examples/<name>.py`` on 2 processes under torchrun with a fresh store; its exit
    code, output, the one run stored and its trials."""
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this Python")
    db = tmp_path / f"{name}.db"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("AUTOTUNE_DB", None)
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node", "2",
         str(ROOT / "examples" / f"{name}.py"), "--db", str(db), *args],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert db.exists(), f"{name} stored nothing in {db}:\n{out[-4000:]}"
    from autotune.store import Store

    store = Store(db, create=False)
    try:
        runs = store.runs()
        assert len(runs) == 1, (runs, out[-4000:])
        return proc.returncode, out, runs[0], store.trials(runs[0]["id"])
    finally:
        store.close()


def assert_tuned(name: str, rc: int, out: str, run: dict, trials: list[dict], steps: int) -> None:
    """A finished run of ``steps`` optimizer steps: trials scored in samples/s, and every
    iteration autotune counted was an optimizer step."""
    assert rc == 0, out[-4000:]
    assert run["job"] == name and run["status"] == "finished", run
    assert run["unit"] == "samples/s" and run["best_config"], run
    assert len(trials) >= 2 and all(t["score"] and t["score"] > 0 for t in trials), trials
    assert "kept configuration: streams=" in out
    # trials only run after the warm-up, one iteration per counted step; had the
    # micro-steps been counted, the budget of 40 would have been spent on them
    assert sum(t["iterations"] for t in trials) <= steps - WARMUP, trials


FRAMEWORKS = {"train_lightning": ("lightning.pytorch", "sklearn"),
              "train_hf_trainer": ("transformers", "accelerate")}


@pytest.mark.parametrize("example", sorted(FRAMEWORKS))
def test_example_tunes_ddp_and_records_a_finished_run(tmp_path, example):
    needs(*FRAMEWORKS[example])
    # a 16-step job affords no search (the next test): told it is long, it searches
    rc, out, run, trials = run_example(example, tmp_path, "--steps", "16",
                                       "--budget", "40", "--accum", "2",
                                       "--total-steps", "100000")
    assert_tuned(example, rc, out, run, trials, steps=16)
    assert run["tuning_cost"]["total_steps"] == 100000  # the user's value wins
    assert "iterations counted: 16 (optimizer steps 16)" in out, out[-3000:]


@pytest.mark.parametrize("example", sorted(FRAMEWORKS))
def test_an_error_in_training_closes_the_run_as_failed(tmp_path, example):
    needs(*FRAMEWORKS[example])
    rc, out, run, trials = run_example(example, tmp_path, "--steps", "16",
                                       "--budget", "40", "--fail-at", "8")
    assert rc != 0 and "--fail-at 8: an error inside training" in out, out[-4000:]
    # closed by Lightning's on_exception / the Trainer's with block, not left running
    assert run["status"] == "failed" and run["finished"] is not None, run
    # the framework told the session the job's length: 16 steps afford no search
    assert run["tuning_cost"]["total_steps"] == 16 and trials == [], run
    assert re.search(r"nothing to win|cannot pay for itself|affords no search", out), out[-3000:]


def test_accelerate_counts_the_synchronising_steps_not_the_micro_steps(tmp_path):
    needs("accelerate", "sklearn")
    rc, out, run, trials = run_example("train_accelerate", tmp_path, "--steps", "12",
                                       "--budget", "40", "--accum", "4",
                                       "--total-steps", "100000")
    assert_tuned("train_accelerate", rc, out, run, trials, steps=12)
    assert "iterations counted: 12 (synchronising steps 12, micro-steps 48)" in out, out[-3000:]
