"""The integration callbacks in one process, with the real frameworks: what is checked
when a callback is made, what happens where there is nothing to tune, batches Lightning
skips, and the misuse the Transformers callback refuses. (Tuning on two processes under
torchrun: test_integration_examples.)
"""

from __future__ import annotations

# own world: Lightning run in a process of its own, with no launcher, is what is tested

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import zygote

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def test_importing_the_integrations_package_imports_no_framework():
    code = ("import sys, autotune, autotune.integrations; "
            "print(sorted(m for m in ('torch', 'lightning', 'transformers', 'accelerate') "
            "if m in sys.modules))")
    out = zygote.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]", out


def test_session_options_are_checked_when_the_callback_is_made():
    from autotune.errors import ArgumentError
    from autotune.integrations.callback import check_options
    from autotune.runtime.config import ConfigError

    with pytest.raises(TypeError, match="'budgett' \\(did you mean 'budget'\\?\\); the "
                                        "options are: budget, total_steps, spend, db"):
        check_options({"budgett": 5})
    with pytest.raises(ArgumentError, match="budget must be"):
        check_options({"budget": -1})
    # a knob's name is checked now, not once training starts (its value needs the job)
    with pytest.raises(ConfigError, match="cannot fix 'chunk': .*did you mean 'chunk_bytes'"):
        check_options({"fixed": {"chunk": 1 << 20}})
    with pytest.raises(ConfigError, match="compression='topk'.*allow_lossy=True"):
        check_options({"fixed": {"compression": ["none", "topk"]}})
    assert check_options({"fixed": {"compression": "topk"}, "allow_lossy": True})
    assert check_options({"budget": 5, "fixed": None}) == {"budget": 5, "fixed": None}


MISTAKES = {
    "session": "import torch, autotune\n"
               "autotune.session(torch.nn.Linear(2, 2), fixed={'chunk': 1 << 20})\n",
    "lightning": "from autotune.integrations.lightning import AutotuneCallback\n"
                 "AutotuneCallback(budgett=5)\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("where", sorted(MISTAKES))
def test_a_mistake_made_alike_on_every_rank_is_printed_once(tmp_path, where):
    """Under torchrun with 2 processes, a misspelled knob (``autotune.session``) or
    callback option (Lightning's callback) fails on both ranks before anything starts;
    rank 0 prints it, with its "did you mean", and rank 1 prints nothing of it."""
    if where == "lightning":
        pytest.importorskip("lightning.pytorch", reason="lightning is not installed")
    torchrun = Path(sys.executable).with_name("torchrun")
    script = tmp_path / "mistake.py"
    # rank 0 makes its mistake last: had rank 1 printed its own, it would have by then
    script.write_text("import os, time\nif os.environ['RANK'] == '0':\n    time.sleep(2)\n"
                      + MISTAKES[where])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = zygote.run([str(torchrun), "--standalone", "--nproc-per-node", "2",
                           "--tee", "3", str(script)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    said = "did you mean 'chunk_bytes'" if where == "session" else "did you mean 'budget'"
    assert out.count(said) == 1, out[-4000:]
    # torchrun's --tee prefixes each line with the rank that wrote it
    assert [line for line in out.splitlines() if said in line][0].startswith("[default0]"), out


@pytest.mark.slow
def test_lightning_checks_options_warns_without_ddp_and_passes_over_skipped_batches(tmp_path):
    pytest.importorskip("lightning.pytorch", reason="lightning is not installed")
    db = tmp_path / "t.db"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("AUTOTUNE_DB", None)
    proc = zygote.run([sys.executable, str(HERE / "lightning_one_process.py"), str(db)],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["made with budget"].startswith("ArgumentError: budget must be"), seen
    assert seen["made with samples"].startswith("TypeError: unknown autotune.session option(s) "
                                                "'samples'"), seen
    # no DDP in one process: one warning saying so, training as ever, nothing stored
    (warning,) = seen["untuned_warnings"]
    assert "not DistributedDataParallel and this is one process" in warning
    assert not seen["untuned_tuner"] and seen["untuned_losses"] == 2
    # one-process DDP: the batches whose training_step returned None (the first one
    # included, before any backward) are not iterations, and the run is finished
    assert seen["is_leader"] and seen["iterations"] == seen["losses"] == 6, seen
    from autotune.store import Store

    store = Store(db, create=False)
    try:
        (run,) = store.runs()
        assert run["job"] == "one_process" and run["status"] == "finished", run
    finally:
        store.close()


@pytest.mark.slow
def test_hf_trainer_outside_the_with_block_is_a_usage_error(tmp_path):
    pytest.importorskip("transformers", reason="transformers is not installed")
    pytest.importorskip("accelerate", reason="accelerate is not installed")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from autotune.integrations.transformers import AutotuneCallback
    from autotune.runtime.errors import UsageError

    with pytest.raises(TypeError, match="needs the transformers Trainer"):
        AutotuneCallback(object())
    model = GPT2LMHeadModel(GPT2Config(vocab_size=16, n_positions=8, n_embd=8, n_layer=1,
                                       n_head=1))
    ids = torch.randint(0, 16, (8, 8))
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4,
                             gradient_accumulation_steps=3, report_to="none",
                             save_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    tuning = AutotuneCallback(trainer, budget=5, db=tmp_path / "t.db")
    assert tuning in trainer.callback_handler.callbacks
    assert tuning.autotune.options["samples_per_step"] == 4 * 3  # batch x accumulation
    with pytest.raises(UsageError, match="with AutotuneCallback"):
        trainer.train()
    assert trainer.state.global_step == 0  # refused before any step
    # inside the block: one process and no DDP, so a warning and training untuned; the
    # callback leaves the trainer at the end of the block
    with warnings.catch_warnings(record=True) as seen, tuning:
        warnings.simplefilter("always")
        trainer.train()
    assert trainer.state.global_step == 2
    assert any("nothing to tune" in str(w.message) for w in seen), [str(w.message) for w in seen]
    assert tuning not in trainer.callback_handler.callbacks and tuning.session is None
