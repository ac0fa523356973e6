"""One process, no torchrun: the Lightning callback's options checked when it is made, the
callback where there is nothing to tune, and the callback under a one-process
``strategy="ddp"`` whose ``training_step`` skips batches by returning None (run by
test_integration_callbacks.py; prints one JSON line of what it saw).

    python tests/integrations/lightning_one_process.py DB
"""

from __future__ import annotations

import json
import sys
import warnings

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from autotune.integrations.lightning import AutotuneCallback

SKIPPED = (0, 3)  # batch indices whose training_step returns None (the first one included)


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.losses = 0  # batches that returned a loss (so ran backward)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor],
                      batch_idx: int) -> torch.Tensor | None:
        if batch_idx in SKIPPED:
            return None
        self.losses += 1
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(strategy: str, tuning: AutotuneCallback, max_steps: int) -> Tiny:
    torch.manual_seed(0)
    model = Tiny()
    trainer = pl.Trainer(accelerator="cpu", devices=1, strategy=strategy, max_steps=max_steps,
                         callbacks=[tuning], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer.fit(model, DataLoader(data, batch_size=4))
    return model


def main() -> None:
    db = sys.argv[1]
    seen: dict[str, object] = {}
    # the session's options are checked when the callback is made
    for bad in ({"budget": -1}, {"samples": 32}):
        try:
            AutotuneCallback(**bad)
        except Exception as e:  # noqa: BLE001 - reported to the test
            seen[f"made with {sorted(bad)[0]}"] = f"{type(e).__name__}: {e}"
    # no DDP, no process group: a warning, and training as ever
    untuned = AutotuneCallback(budget=5, db=db, verbose=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = fit("auto", untuned, max_steps=4)
    seen["untuned_warnings"] = [str(w.message) for w in caught if "autotune" in str(w.message)]
    seen["untuned_tuner"] = untuned.session is not None
    seen["untuned_losses"] = model.losses
    # one-process DDP: tuned (one worker keeps the default); skipped batches are passed over
    tuned = AutotuneCallback(budget=5, db=db, verbose=False, job="one_process")
    model = fit("ddp", tuned, max_steps=8)
    seen["losses"] = model.losses
    seen["iterations"] = tuned.session.iteration if tuned.session is not None else None
    seen["is_leader"] = tuned.is_leader
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
