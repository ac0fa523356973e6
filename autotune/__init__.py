"""autotune: auto-tuned gradient communication for data-parallel PyTorch.

The public API::

    with autotune.session(model, budget=100) as tuner:   # tune while training
        ...
    autotune.Tuner(space, budget=100)                     # the tuner alone (ask/tell)
    autotune.SearchSpace.build(k_max=2)                   # the tunable parameters

Names are loaded lazily, so ``import autotune`` (and the CLI) does not import torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "session": "autotune.session",
    "Session": "autotune.session",
    "DDPSession": "autotune.session",
    "Tuner": "autotune.tuning.tuner",
    "Trial": "autotune.tuning.tuner",
    "SearchSpace": "autotune.tuning.space",
    "Config": "autotune.tuning.space",
    "ConfigError": "autotune.tuning.space",
    "AutotuneError": "autotune.errors",
    "ArgumentError": "autotune.errors",
    "TrialSchedule": "autotune.tuning.schedule",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        module = importlib.import_module(_EXPORTS[name])
        value = getattr(module, name)
        # Importing ``autotune.session`` binds the submodule as ``autotune.session``;
        # the function must win, or a second ``autotune.session(...)`` calls a module.
        globals()[name] = value
        return value
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
