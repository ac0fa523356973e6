"""The integration examples, run as a user runs them: ``torchrun --standalone
--nproc-per-node 2 examples/train_<framework>.py`` on CPU (gloo), each training a real
small model on real data shipped with its packages, with the real framework. The
results store then holds a ``finished`` run (with its trials, where the job is told it is
long enough to pay for a search: ``--total-steps``), and an iteration is an
optimizer step: gradient-accumulation micro-steps (DDP's ``no_sync()``) are not counted.
An error inside training closes the run as ``failed``, never leaves it ``running``.

Each test skips, saying why, where its framework is not installed (``make test``
installs the extras: ``.[lightning,transformers,accelerate]``).
"""

from __future__ import annotations

# own world: the examples run as a user runs them, launcher included

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import zygote

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def needs(*modules: str) -> None:
    for module in modules:
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e "
                                           "'.[lightning,transformers,accelerate]')")


#: the launch lines of docs/integrations.md ("Launching"), for 2 processes on CPU
LAUNCHERS = {"torchrun": ["torchrun", "--standalone", "--nproc-per-node", "2"],
             "accelerate": ["accelerate", "launch", "--multi_gpu", "--num_processes", "2"]}


def launch(launcher: list[str], name: str, tmp_path: Path, *args: str,
           timeout: float = 240) -> subprocess.CompletedProcess:
    """``launcher examples/<name>.py args`` in ``tmp_path``, as a user runs it."""
    exe = Path(sys.executable).with_name(launcher[0])
    if not exe.exists():
        pytest.skip(f"{launcher[0]} is not installed beside this Python")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("AUTOTUNE_DB", None)
    return zygote.run([str(exe), *launcher[1:], str(ROOT / "examples" / f"{name}.py"),
                           *args], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env=env)


def run_example(name: str, tmp_path: Path, *args: str, launcher: str = "torchrun",
                ) -> tuple[int, str, Any, list[dict]]:
    """Run ``examples/<name>.py`` on 2 processes under ``launcher`` with a fresh store; its
    exit code, output, the one run stored and its trials."""
    db = tmp_path / f"{name}.db"
    proc = launch(LAUNCHERS[launcher], name, tmp_path, "--db", str(db), *args)
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


FRAMEWORKS = {"train_lightning": ("lightning.pytorch", "sklearn"),
              "train_hf_trainer": ("transformers", "accelerate")}


def docs_launch_lines() -> list[str]:
    """The launch lines of docs/integrations.md's "The examples and their tests"."""
    text = (ROOT / "docs" / "integrations.md").read_text()
    block = text.split("## The examples and their tests", 1)[1].split("```", 2)[1]
    return [line for line in block.splitlines() if line.strip()]


@pytest.mark.parametrize("line", docs_launch_lines(), ids=lambda x: x.split()[0])
def test_the_docs_launch_lines_run_as_written(tmp_path, line):
    """Each line as the docs write it, in a folder with the examples: a finished run of
    200 optimizer steps in ./autotune.db, tuned where 200 steps pay for a search's start
    on this machine, else with one line saying why (on a 2-core CPU machine none does)."""
    name = re.search(r"examples/(\w+)\.py", line).group(1)
    needs(*FRAMEWORKS.get(name, ("accelerate", "sklearn")))
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    argv = shlex.split(line)
    proc = launch([argv[0], *argv[1:argv.index(f"examples/{name}.py")]], name, tmp_path,
                  *argv[argv.index(f"examples/{name}.py") + 1:])
    out = proc.stdout + proc.stderr
    db = tmp_path / "autotune.db"
    assert db.exists(), f"{line}: stored nothing in ./autotune.db\n{out[-4000:]}"
    from autotune.store import Store

    with Store(db, create=False) as store:
        (run,) = store.runs()
        trials = store.trials(run["id"])
    assert proc.returncode == 0, out[-4000:]
    assert run["job"] == name and run["status"] == "finished" and run["best_config"], run
    assert run["unit"] == "samples/s" and all(t["score"] > 0 for t in trials), trials
    why = re.findall(r"affords no search|cannot pay for itself|nothing to win", out)
    # no search: said once, with what a search's start costs; else scored trials
    assert (len(why) == 1 and "to start a search" in out) if not trials else not why, \
        (why, out[-3000:])
    assert run["tuning_cost"]["total_steps"] == 200, run  # the framework's, or the user's
    assert re.search(r"iterations counted: 200 \((optimizer|synchronising) steps 200", out), \
        out[-3000:]
    # in a pipe, beside the framework's own tqdm bar (the Trainer's), each of autotune's
    # lines is a line of its own, not glued onto the bar's last state
    glued = [x for x in out.split("\n") if "tuning: " in x and not x.startswith("tuning: ")]
    assert not glued, glued[:3]


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
    # under Accelerate's own launcher, as docs/integrations.md starts it on CPU
    # a budget of 7 (3 trials at most) fits no GP, so the first trial does not wait for
    # that import (as a longer search's does, for as long as the machine takes): 11 steps
    # leave the warm-up and two whole trials, on a loaded machine too
    rc, out, run, trials = run_example("train_accelerate", tmp_path, "--steps", "11",
                                       "--budget", "7", "--accum", "4",
                                       "--total-steps", "100000", launcher="accelerate")
    assert rc == 0, out[-4000:]
    assert run["job"] == "train_accelerate" and run["status"] == "finished", run
    assert run["unit"] == "samples/s" and run["best_config"], run
    assert len(trials) >= 2 and all(t["score"] and t["score"] > 0 for t in trials), trials
    assert "kept configuration: streams=" in out
    # an iteration is an optimizer step: counting the micro-steps would say 44
    assert "iterations counted: 11 (synchronising steps 11, micro-steps 44)" in out, out[-3000:]


def test_accelerate_launch_without_multi_gpu_says_what_to_add(tmp_path):
    """On a machine without GPUs ``accelerate launch --num_processes 2`` starts one plain
    process; autotune says in one line to add ``--multi_gpu``, before any training."""
    needs("accelerate", "sklearn")
    proc = launch(["accelerate", "launch", "--num_processes", "2"], "train_accelerate",
                  tmp_path, "--steps", "4", "--db", str(tmp_path / "a.db"))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    line = next((x for x in out.splitlines() if "UsageError: " in x), "")
    assert "`accelerate launch` started one process" in line, out[-3000:]
    assert "add `--multi_gpu`" in line and "--num_processes 2" in line, line


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_ctrl_c_under_a_framework_launcher_aborts_the_run(tmp_path, launcher):
    """Ctrl-C in a terminal (SIGINT to the whole foreground process group) under torchrun
    or Accelerate's launcher: the ranks stop, the run is ``aborted`` and autotune says so
    in one line. What follows is the launcher's own (docs/store.md, "Statuses")."""
    needs("accelerate", "sklearn")
    exe = Path(sys.executable).with_name(LAUNCHERS[launcher][0])
    db = tmp_path / "c.db"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("AUTOTUNE_DB", None)
    proc = zygote.Popen(
        [str(exe), *LAUNCHERS[launcher][1:], str(ROOT / "examples" / "train_accelerate.py"),
         "--steps", "100000", "--budget", "100000", "--db", str(db)], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True)
    from autotune.store import Store, StoreError

    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no trial recorded"
        try:
            with Store(db, create=False) as s:
                runs = s.runs()
                if runs and len(s.trials(runs[0]["id"])) >= 2:
                    break
        except StoreError:
            pass
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=90)
    with Store(db, create=False) as s:
        (run,) = s.runs()
    assert run["status"] == "aborted" and run["finished"], out[-3000:]
    assert len(re.findall(r"^tuning: aborted", out, re.M)) == 1, out[-3000:]
