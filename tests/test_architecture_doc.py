"""docs/architecture.md matches the code where a test can tell (issue 52): every module
it names by path exists, and every ``Class.method`` it places in a module
(```Session._apply`` (``sessions/core.py``)``) is defined there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()


MODULES = [p.relative_to(ROOT).as_posix() for p in (ROOT / "autotune").rglob("*.py")]


def _module(path: str) -> Path:
    """A path as the doc writes it: from the repository, from ``autotune/``, or within a
    package its row is about (``search/base.py`` for ``autotune/tuning/search/base.py``),
    where that names one module."""
    for candidate in (ROOT / path, ROOT / "autotune" / path):
        if candidate.exists():
            return candidate
    within = [m for m in MODULES if m.endswith("/" + path)]
    return ROOT / within[0] if len(within) == 1 else ROOT / "autotune" / path


def test_every_module_path_it_names_exists():
    named = set(re.findall(r"`([a-z_]+(?:/[a-z_]+)*/[a-z_]+\.py)`", DOC))
    assert len(named) > 30, named  # the doc is read
    missing = sorted(p for p in named if not _module(p).exists())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_method_it_places_is_defined_there():
    placed = re.findall(r"`(\w+)\.(\w+)`\s*\(`([a-z_/]+\.py)`\)", DOC)
    assert placed, "no `Class.method` (`module.py`) in the doc"
    wrong = []
    for cls, method, path in placed:
        tree = ast.parse(_module(path).read_text()) if _module(path).exists() else None
        defined = tree is not None and any(
            isinstance(node, ast.ClassDef) and any(
                isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == method
                for f in node.body)
            for node in ast.walk(tree))
        if not defined:
            wrong.append(f"{cls}.{method} is not defined in {path}")
    assert not wrong, wrong
