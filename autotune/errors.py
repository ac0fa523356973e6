"""The base of every error autotune raises on purpose: ``except autotune.AutotuneError``.

Each concept has its own subclass, next to the code that raises it, and keeps a builtin
base too (``ValueError`` for bad input, ``RuntimeError`` for failures), so existing
``except ValueError`` / ``except RuntimeError`` clauses still work. Import-light: no torch.
"""

from __future__ import annotations

__all__ = ["AutotuneError", "ArgumentError"]


class AutotuneError(Exception):
    """Base class of autotune's errors."""


class ArgumentError(AutotuneError, ValueError):
    """An argument of a public call is out of its range; the message names the argument,
    what was given and what is allowed."""
