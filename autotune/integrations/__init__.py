"""autotune inside the training frameworks: the callbacks that tune a DDP run's
communication without touching the training loop (docs/integrations.md).

- :mod:`autotune.integrations.lightning`: ``AutotuneCallback`` for a PyTorch Lightning
  ``Trainer(strategy="ddp")`` (the ``lightning`` package, ``import lightning.pytorch``);
- :mod:`autotune.integrations.transformers`: ``AutotuneCallback`` for the Hugging Face
  ``Trainer`` (a ``TrainerCallback`` that is also the context manager around
  ``trainer.train()`` that closes the run on an error);
- Accelerate needs no module: ``autotune.session(accelerator.prepare(model))`` and one
  ``session.step()`` inside ``accelerator.accumulate()`` (docs/integrations.md);
- :mod:`autotune.integrations.callback`: what the callbacks share, framework-free: one
  :func:`autotune.session` of the framework's DDP module, opened, stepped and closed from
  the framework's hooks.

Each framework module imports its framework when it is imported (install the extra:
``pip install 'autotune[lightning]'``, ``'autotune[transformers]'``); nothing here is
imported by ``import autotune``.
"""
