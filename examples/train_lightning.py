"""PyTorch Lightning with autotune: a classifier of scikit-learn's bundled handwritten
digits (1,797 real 8x8 scans, no download) under ``Trainer(strategy="ddp")``; DDP's
communication is tuned by one callback. The one new line is marked.

    torchrun --standalone --nproc-per-node 2 examples/train_lightning.py --steps 200

Lightning builds DDP, samples, accumulates (``--accum``: through DDP's ``no_sync()``, not
counted as iterations) and steps the optimizer as ever; ``AutotuneCallback`` opens the
session when training starts, steps it after each batch and closes the run when training
ends, or with the exception that stopped it (``--fail-at N``: rank 0 raises an error at
step N, and the run is stored as ``failed``).
"""

from __future__ import annotations

import argparse
import os

import lightning.pytorch as pl
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from autotune.integrations.lightning import AutotuneCallback
from digits import classifier, digits  # examples/ is on the script's path


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps")
    p.add_argument("--budget", type=int, default=60, help="iterations spent on trials")
    p.add_argument("--total-steps", type=int, default=None,
                   help="the job's length autotune sizes its search to (default: Lightning's count, --steps)")
    p.add_argument("--db", default=None, help="results store (default ./autotune.db)")
    p.add_argument("--batch", type=int, default=32, help="batch size per process")
    p.add_argument("--accum", type=int, default=1, help="batches per optimizer step")
    p.add_argument("--fail-at", type=int, default=None, metavar="STEP",
                   help="rank 0 raises an error in training_step at this optimizer step")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


class DigitClassifier(pl.LightningModule):
    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.net = classifier()
        self.fail_at = fail_at

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.global_step == self.fail_at and self.global_rank == 0:
            raise RuntimeError(f"--fail-at {self.fail_at}: an error inside training")
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        if self.global_rank == 0 and batch_idx % 50 == 0:
            print(f"step {self.global_step:4d}  loss {loss.item():.4f}", flush=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    pl.seed_everything(args.seed, verbose=False)
    dataset = digits()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    # the one new line: the callback that tunes DDP's communication
    tuning = AutotuneCallback(budget=args.budget, db=args.db, job="train_lightning",
                              total_steps=args.total_steps,
                              samples_per_step=args.batch * args.accum)
    trainer = pl.Trainer(
        accelerator="cpu", devices=local, num_nodes=int(os.environ.get("WORLD_SIZE", 1)) // local,
        strategy="ddp", max_steps=args.steps, accumulate_grad_batches=args.accum,
        callbacks=[tuning], logger=False, enable_checkpointing=False,
        enable_model_summary=False)  # its progress bar stays
    model = DigitClassifier(args.fail_at)
    trainer.fit(model, DataLoader(dataset, batch_size=args.batch, shuffle=True, drop_last=True))

    if trainer.global_rank == 0:
        from autotune.units import fmt_config

        with torch.no_grad():
            x, y = dataset.tensors
            accuracy = (model.net(x).argmax(1) == y).float().mean().item()
        print(f"accuracy on all {len(y)} digits: {accuracy:.3f}", flush=True)
        if tuning.session is None:  # one process without DDP: nothing was tuned
            print(f"not tuned: {tuning.autotune.inactive}", flush=True)
            return
        print(f"kept configuration: {fmt_config(tuning.best)}", flush=True)
        print(f"iterations counted: {tuning.session.iteration} (optimizer steps "
              f"{trainer.global_step})", flush=True)


if __name__ == "__main__":
    main()
