"""PyTorch Lightning: a ``Callback`` that tunes a ``Trainer(strategy="ddp")`` run's gradient
communication (docs/integrations.md, "Lightning").

::

    from autotune.integrations.lightning import AutotuneCallback

    trainer = L.Trainer(strategy="ddp", callbacks=[AutotuneCallback(budget=60)], ...)
    trainer.fit(model, loader)

Lightning keeps everything it does (DDP's wrap, samplers, ``accumulate_grad_batches``
through DDP's ``no_sync()``, precision, clipping, checkpoints, loggers). The callback
opens ``autotune.session(trainer.strategy.model)`` in ``on_train_start`` (DDP has wrapped
the model then, and no backward has run), calls ``session.step()`` in
``on_train_batch_end`` (an accumulation micro-batch is not counted as an iteration, a
batch skipped by returning None from ``training_step`` is passed over),
closes the run ``finished`` in ``on_train_end``, and in ``on_exception`` closes it with
the exception: ``aborted`` for Ctrl-C or SIGTERM, ``failed`` for an error, never left
``running``.

The package is ``lightning`` (``import lightning.pytorch``), the one Lightning's own
documentation installs and imports since 2.0; from 2.6 it installs ``pytorch-lightning``
beside it. The callback subclasses ``lightning.pytorch.Callback``; a
``pytorch_lightning.Trainer`` calls it too (Lightning calls callback hooks by name), given
in a list: ``callbacks=[AutotuneCallback(...)]``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch

from autotune.integrations.callback import CallbackResults, CallbackSession

__all__ = ["AutotuneCallback"]


class AutotuneCallback(CallbackResults, pl.Callback):
    """Tune the DDP communication of the ``Trainer`` this callback is given to (module
    docstring). ``budget``, ``db`` and ``options`` are :func:`autotune.session`'s keywords
    (``samples_per_step``: the per-process batch size times ``accumulate_grad_batches``,
    for a score in samples/s), checked here; ``total_steps`` is
    ``trainer.estimated_stepping_batches`` unless given (docs/tuner.md, "What tuning may
    cost"). One process without DDP: a warning and no
    tuning; a strategy other than DDP (FSDP, DeepSpeed): ``TypeError`` when training
    starts."""

    def __init__(self, *, budget: int = 100, db: str | os.PathLike[str] | None = None,
                 **options: Any) -> None:
        super().__init__()
        self.autotune = CallbackSession("Lightning", {"budget": budget, "db": db, **options})

    # ------------------------------------------------------------- Lightning's hooks
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.autotune.start(trainer.strategy.model, "trainer.strategy.model",
                           total_steps=trainer.estimated_stepping_batches)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        if pl_module.automatic_optimization and not _has_loss(outputs):
            return  # training_step returned None: Lightning skipped backward and the step
        self.autotune.step(_loss_of(outputs))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.autotune.finish(None)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        self.autotune.finish(exception)


def _has_loss(outputs: Any) -> bool:
    """Whether an automatically optimised batch had a loss (Lightning passes ``{}`` for a
    batch whose ``training_step`` returned None, and runs no backward for it)."""
    if isinstance(outputs, Mapping):
        return outputs.get("loss") is not None
    return outputs is not None


def _loss_of(outputs: Any) -> Any:
    """The batch's loss, for the loss test of a codec (None where ``training_step``
    returned no loss Lightning kept)."""
    if isinstance(outputs, Mapping):
        return outputs.get("loss")
    return outputs if isinstance(outputs, torch.Tensor) else None
