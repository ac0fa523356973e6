"""Hugging Face Trainer with autotune: a small GPT-2, built from its config (no weights
downloaded), learns the bytes of the Python Language Reference that ships with Python
(``pydoc_data.topics``: real English text and grammar, no dataset download); DDP's
communication is tuned by one callback. The new lines are marked.

    torchrun --standalone --nproc-per-node 2 examples/train_hf_trainer.py --steps 200

The Trainer builds DDP (through Accelerate), samples, accumulates (``--accum``: through
DDP's ``no_sync()``; autotune counts optimizer steps) and steps the optimizer as ever.
``AutotuneCallback(trainer, ...)`` adds itself to the trainer and is the ``with`` block
around ``trainer.train()``, so an error closes the tuning run as ``failed`` (``--fail-at N``:
rank 0 raises one after step N).
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is fetched from a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import (  # noqa: E402
    GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainerControl, TrainerState,
    TrainingArguments)

from autotune.integrations.transformers import AutotuneCallback  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps")
    p.add_argument("--budget", type=int, default=60, help="iterations spent on trials")
    p.add_argument("--total-steps", type=int, default=None,
                   help="the job's length autotune sizes its search to (default: the Trainer's max_steps, --steps)")
    p.add_argument("--db", default=None, help="results store (default ./autotune.db)")
    p.add_argument("--batch", type=int, default=8, help="sequences per process and micro-batch")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--block", type=int, default=64, help="bytes per sequence")
    p.add_argument("--fail-at", type=int, default=None, metavar="STEP",
                   help="rank 0 raises an error after this optimizer step")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


class ReferenceBytes(Dataset):
    """The Python Language Reference's text (``pydoc_data.topics``) as UTF-8 bytes, cut
    into sequences of ``block`` bytes: a byte-level language-model corpus of ~450 KB."""

    def __init__(self, block: int) -> None:
        try:
            from pydoc_data.topics import topics
        except ImportError as e:  # a Python built without its documentation data
            raise SystemExit(f"this Python has no pydoc_data.topics ({e}): the text this "
                             "example trains on ships with CPython") from None
        text = "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")
        n = len(text) // block
        self.blocks = torch.tensor(list(text[:n * block]), dtype=torch.long).view(n, block)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


class FailAt(TrainerCallback):
    """``--fail-at``: an error inside training, on rank 0, after optimizer step ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: object) -> None:
        if state.global_step == self.step and state.is_world_process_zero:
            raise RuntimeError(f"--fail-at {self.step}: an error inside training")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    data = ReferenceBytes(args.block)
    config = GPT2Config(vocab_size=256, n_positions=args.block, n_embd=64, n_layer=2,
                        n_head=2, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory(prefix="hf-trainer-") as out:
        targs = TrainingArguments(
            output_dir=out, max_steps=args.steps, per_device_train_batch_size=args.batch,
            gradient_accumulation_steps=args.accum, learning_rate=1e-3, warmup_steps=0,
            logging_steps=max(1, args.steps // 4), save_strategy="no", report_to="none",
            use_cpu=True, ddp_find_unused_parameters=False,
            seed=args.seed, dataloader_num_workers=0)  # its progress bar stays
        trainer = Trainer(model=model, args=targs, train_dataset=data,
                          callbacks=[FailAt(args.fail_at)] if args.fail_at is not None else None)
        # new lines: the callback that tunes DDP's communication, around train()
        with AutotuneCallback(trainer, budget=args.budget, db=args.db,
                              job="train_hf_trainer", total_steps=args.total_steps) as tuning:
            result = trainer.train()

    if trainer.is_world_process_zero():
        from autotune.units import fmt_config

        print(f"training loss {result.training_loss:.4f} (bytes: ln 256 = 5.545 at random)",
              flush=True)
        if tuning.session is None:  # one process: no DDP, nothing was tuned
            print(f"not tuned: {tuning.autotune.inactive}", flush=True)
            return
        print(f"kept configuration: {fmt_config(tuning.best)}", flush=True)
        print(f"iterations counted: {tuning.session.iteration} (optimizer steps "
              f"{trainer.state.global_step})", flush=True)


if __name__ == "__main__":
    main()
