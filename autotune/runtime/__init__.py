"""The gradient-communication runtime: multi-stream Communication Service and Summation
Service on ``torch.distributed`` (BytePS, PHub, AIACC-Training), driven by a
:class:`~autotune.runtime.config.RuntimeConfig` (its own typed configuration; the runtime
knows nothing of tuning). See ``docs/runtime.md``.

Import cost: this package imports torch only when :class:`Runtime` (or
:class:`~autotune.runtime.ddp_hook.BucketTransport`, autotune inside DDP) is used; the pure
plan (:func:`make_plan`) and the errors import without it.
"""

from __future__ import annotations

from typing import Any

from .config import ConfigError
from .errors import PeerFailed, PeerStopped, RuntimeFault, ServerLost, UsageError
from .plan import Chunk, make_plan, summation_shares
from .world import WorldInfo

__all__ = ["BucketTransport", "Chunk", "ConfigError", "PeerFailed", "PeerStopped", "Runtime",
           "RuntimeFault", "ServerLost", "UsageError", "WorldInfo", "make_plan", "summation_shares"]


def __getattr__(name: str) -> Any:
    if name == "Runtime":
        from .core import Runtime
        return Runtime
    if name == "BucketTransport":
        from .ddp_hook import BucketTransport
        return BucketTransport
    raise AttributeError(f"module 'autotune.runtime' has no attribute {name!r}")
