"""The store is the data layer, the commands that read it sit above it (issue 42).

``autotune/store/`` imports no click and nothing from ``autotune/reports/`` (nor
``autotune.cli``), and there is no import cycle among the modules of the two packages.
The import graph is read with :mod:`ast` from every ``import autotune...`` and ``from
autotune... import`` statement, at module level and inside functions alike (an import
inside a function closes a circle just as well, only later); imports under ``if
TYPE_CHECKING:`` never run and are left out. No module imports another's private name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import autotune

ROOT = Path(autotune.__file__).resolve().parent
PACKAGES = ("store", "reports")


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the checked packages, by dotted name."""
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).glob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(path: Path, name: str) -> list[tuple[str, list[str], int]]:
    """``(module, names, line)`` of every import that runs in the file, wherever it is
    (``names``: what a ``from`` import takes, ``[]`` for ``import x``); relative imports
    resolved against ``name``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, list[str], int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend((a.name, [], node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, [a.name for a in node.names], node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def graph() -> dict[str, set[str]]:
    """Module -> the checked modules it imports (``from pkg import mod`` goes to ``mod``)."""
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for module, names, _ in imports(path, name):
            subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in mods]
            targets = subs or ([module] if module in mods else [])
            if len(subs) < len(names) and module in mods:
                targets.append(module)  # names of the package itself, too
            edges[name].update(t for t in targets if t != name)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def test_the_cycle_finder_finds_a_circle_through_a_function_level_import(tmp_path):
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nimport click\n"
                 "if TYPE_CHECKING:\n    from autotune.store.db import Store\n"
                 "def f():\n    from autotune.reports.report import summarize\n")
    assert [(m, n) for m, n, _ in imports(f, "autotune.store.m")] == [
        ("typing", ["TYPE_CHECKING"]), ("click", []), ("autotune.reports.report", ["summarize"])]


def test_the_graph_sees_both_packages_and_their_imports():
    edges = graph()
    assert {"autotune.store.db", "autotune.reports.db_command", "autotune.reports.report",
            "autotune.reports.common", "autotune.store.optuna_export"} <= set(edges)
    assert "autotune.store.summary" in edges["autotune.store.optuna_export"]
    assert "autotune.store.summary" in edges["autotune.reports.report"]
    assert "autotune.reports.common" in edges["autotune.reports.report"]
    assert "autotune.store.optuna_export" in edges["autotune.reports.db_command"]  # inside a function


def test_no_import_cycle_among_store_and_reports():
    assert cycles(graph()) == []


def test_the_store_imports_no_click_no_reports_and_no_cli():
    bad = []
    for name, path in modules().items():
        if not name.startswith("autotune.store"):
            continue
        for module, _, line in imports(path, name):
            top = module.split(".")
            if (top[0] == "click" or module == "autotune.cli"
                    or module.startswith(("autotune.reports", "autotune.cli."))):
                bad.append(f"{path.relative_to(ROOT.parent)}:{line}: {module}")
    assert bad == []


def test_no_module_imports_a_private_name_of_another():
    bad = []
    for name, path in modules().items():
        for module, names, line in imports(path, name):
            if module.startswith("autotune"):
                bad += [f"{path.relative_to(ROOT.parent)}:{line}: {module}.{n}"
                        for n in names if n.startswith("_") and not n.startswith("__")]
    assert bad == []
