"""The base of every error autotune raises on purpose: ``except autotune.AutotuneError``.

Each concept has its own subclass, next to the code that raises it, and keeps a builtin
base too (``ValueError`` for bad input, ``RuntimeError`` for failures), so existing
``except ValueError`` / ``except RuntimeError`` clauses still work. Import-light: no torch.
"""

from __future__ import annotations

__all__ = ["AutotuneError"]


class AutotuneError(Exception):
    """Base class of autotune's errors."""
