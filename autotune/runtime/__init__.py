"""The gradient-communication runtime: multi-stream Communication Service and Summation
Service on ``torch.distributed`` (BytePS, PHub, AIACC-Training), driven by a
:class:`~autotune.runtime.config.RuntimeConfig` (its own typed configuration; the runtime
knows nothing of tuning). See ``docs/runtime.md``.

Its layers, each a folder: :mod:`~autotune.runtime.control` (the control plane: the world,
joining, groups, the ``sync`` at an iteration boundary, reconfiguration, faults),
:mod:`~autotune.runtime.data` (the data plane: the plan, the Communication and Summation
Services, the stream threads, the gradient copies), :mod:`~autotune.runtime.codecs` (the
compression codecs) and :mod:`~autotune.runtime.ddp` (the DDP adapter: the comm hook). The
runtime's own configuration (:mod:`~autotune.runtime.config`), its errors and the
:class:`Runtime` that faces its users (:mod:`~autotune.runtime.core`) sit above them.

Import cost: this package imports torch only when :class:`Runtime` (or
:class:`~autotune.runtime.ddp.ddp_hook.CommHookState`, autotune inside DDP) is used; the pure
plan (:func:`make_plan`) and the errors import without it.
"""

from __future__ import annotations

from typing import Any

from autotune.runtime.config import ConfigError
from autotune.runtime.control.world import WorldInfo
from autotune.runtime.data.plan import Chunk, make_plan, summation_shares
from autotune.runtime.errors import PeerFailed, PeerStopped, RuntimeFault, ServerLost, UsageError

__all__ = ["CommHookState", "Chunk", "ConfigError", "PeerFailed", "PeerStopped", "Runtime",
           "RuntimeFault", "ServerLost", "UsageError", "WorldInfo", "make_plan", "summation_shares"]


def __getattr__(name: str) -> Any:
    if name == "Runtime":
        from autotune.runtime.core import Runtime
        return Runtime
    if name == "CommHookState":
        from autotune.runtime.ddp.ddp_hook import CommHookState
        return CommHookState
    raise AttributeError(f"module 'autotune.runtime' has no attribute {name!r}")
