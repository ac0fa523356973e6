"""Hugging Face Transformers: a ``TrainerCallback`` that tunes a distributed ``Trainer``
run's gradient communication (docs/integrations.md, "Transformers Trainer").

::

    from autotune.integrations.transformers import AutotuneCallback

    trainer = Trainer(model=model, args=args, train_dataset=data)
    with AutotuneCallback(trainer, budget=60):   # adds itself to the trainer
        trainer.train()

The Trainer keeps everything it does (Accelerate's DDP wrap, samplers, gradient
accumulation through DDP's ``no_sync()``, clipping, the optimizer and scheduler,
checkpoints, logging). The DDP module is the trainer's ``model_wrapped`` (callbacks are
given the unwrapped ``model``), so the callback is made with the trainer:
``on_train_begin`` opens ``autotune.session(trainer.model_wrapped)`` (wrapped then, no
backward yet), ``on_step_end`` calls ``session.step()`` (once per optimizer step, after
accumulation) and ``on_train_end`` closes the run ``finished``.

The Trainer has no hook for an exception, so the callback is also the context manager
around ``trainer.train()``: an exception leaving the block closes the run with it
(``aborted`` for Ctrl-C or SIGTERM, ``failed`` otherwise) and goes on. Training that
starts outside the ``with`` block is a :class:`~autotune.runtime.errors.UsageError`, so
no run can be left ``running`` by an error.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from autotune.integrations.callback import CallbackResults, CallbackSession
from autotune.runtime.errors import UsageError

__all__ = ["AutotuneCallback"]


class AutotuneCallback(CallbackResults, TrainerCallback):
    """Tune the DDP communication of ``trainer`` (module docstring); made, it adds itself to
    the trainer's callbacks. ``budget``, ``db`` and ``options`` are
    :func:`autotune.session`'s keywords, checked here; ``samples_per_step`` defaults to
    ``per_device_train_batch_size * gradient_accumulation_steps`` (the samples one process
    trains per optimizer step), so scores are in samples/s; ``total_steps`` is the
    Trainer's ``state.max_steps`` unless given (docs/tuner.md, "What tuning may cost").
    One process without DDP: a
    warning and no tuning; FSDP or DeepSpeed: ``TypeError`` when training starts."""

    def __init__(self, trainer: Trainer, *, budget: int = 100,
                 db: str | os.PathLike[str] | None = None, **options: Any) -> None:
        if not isinstance(trainer, Trainer):
            raise TypeError(f"AutotuneCallback(trainer, ...) needs the transformers Trainer "
                            f"whose run it tunes, got {type(trainer).__name__}")
        if options.get("samples_per_step") is None:
            options["samples_per_step"] = (trainer.args.per_device_train_batch_size
                                           * trainer.args.gradient_accumulation_steps)
        self.trainer = trainer
        self.autotune = CallbackSession("Transformers Trainer",
                                       {"budget": budget, "db": db, **options})
        self._entered = False
        trainer.add_callback(self)

    # ------------------------------------------------- the block around trainer.train()
    def __enter__(self) -> AutotuneCallback:
        if self._entered:
            raise UsageError("this AutotuneCallback's `with` block is already open")
        if self not in self.trainer.callback_handler.callbacks:
            self.trainer.add_callback(self)
        self._entered = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: Any) -> None:
        """Close the run if training did not (an exception: closed with it); the exception
        goes on. The callback leaves the trainer."""
        try:
            if exc_type is not None and exc is None:
                exc = exc_type()
            self.autotune.finish(exc)
        finally:
            self._entered = False
            if self in self.trainer.callback_handler.callbacks:
                self.trainer.remove_callback(self)

    # ---------------------------------------------------------------- the Trainer's hooks
    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, **kwargs: Any) -> None:
        if not self._entered:
            raise UsageError(
                "autotune's AutotuneCallback: trainer.train() ran outside its `with` block. "
                "The Trainer has no hook for an exception, so write\n"
                "    with AutotuneCallback(trainer, ...):\n        trainer.train()\n"
                "so that an error closes the tuning run as failed instead of leaving it "
                "running")
        self.autotune.start(self.trainer.model_wrapped, "trainer.model_wrapped",
                           total_steps=state.max_steps)

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        self.autotune.step()

    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> None:
        self.autotune.finish(None)
