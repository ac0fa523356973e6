"""docs/architecture.md matches the code where a test can tell (issue 52): every module
it names by path exists, and every ``Class.method`` it places in a module
(```Session._apply`` (``sessions/native.py``)``) is defined there."""

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


# ---------------------------------------------------------------------- imports
def _imports() -> dict[str, set[str]]:
    """Module -> the ``autotune`` modules it imports (module level or in a function;
    ``from pkg import name`` is the submodule ``pkg.name`` where that is one)."""
    mods = {}
    for f in (ROOT / "autotune").rglob("*.py"):
        name = f.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        mods[name.removesuffix(".__init__")] = f
    out: dict[str, set[str]] = {}
    for name, f in mods.items():
        package = name.split(".") if f.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{mod}.{alias.name}"
                    found.add(sub if sub in mods else mod)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        out[name] = {m for m in found if m in mods and m != name}
    return out


IMPORTS = _imports()


def _place(module: str, places: list[str]) -> str | None:
    """The diagram's place (``tuning/tuner.py``, ``runtime/``) that holds ``module``."""
    path = module.removeprefix("autotune.").replace(".", "/")
    held = [p for p in places if path + ".py" == p or (path + "/").startswith(p)
            or path == p.rstrip("/")]
    return max(held, key=len) if held else None


def test_the_arrows_it_draws_are_the_imports_the_code_has():
    block = DOC[DOC.index("```", DOC.index("`A ─> B`")) + 3:]
    block = block[:block.index("```")]
    drawn = set()
    for line in block.strip().splitlines():
        source, _, targets = line.partition("─>")
        drawn |= {(source.strip(), t.strip()) for t in targets.split(",")}
    places = sorted({p for arrow in drawn for p in arrow})
    assert len(drawn) > 10 and all(_place("autotune." + p.rstrip("/").removesuffix(".py")
                                          .replace("/", "."), places) for p in places)
    imported = {(a, b) for m, targets in IMPORTS.items() for t in targets
                if (a := _place(m, places)) and (b := _place(t, places)) and a != b}
    assert not drawn - imported, f"arrows with no import behind them: {sorted(drawn - imported)}"
    assert not imported - drawn, f"imports the diagram omits: {sorted(imported - drawn)}"


def test_no_module_imports_itself_back():
    import networkx as nx

    graph = nx.DiGraph((m, t) for m, targets in IMPORTS.items() for t in targets)
    assert graph.number_of_edges() > 300
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not circles, f"import circles: {circles}"


# ------------------------------------------------------------------ class sizes
#: Issue 60: no class over 300 lines. A class over it while it is split is listed with its
#: lines and may not grow (none now: SearchSpace came under 300 at the sixth session of
#: 2026-12-06, TrialSchedule at the seventh, its phases functions of their own modules).
MAX_CLASS_LINES = 300
OVER_FOR_NOW: dict[str, int] = {}


def test_no_class_is_over_300_lines_and_none_over_it_grows():
    sizes = {}
    for f in (ROOT / "autotune").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef):
                where = f"{f.relative_to(ROOT).as_posix()}:{node.name}"
                sizes[where] = node.end_lineno - node.lineno + 1
    assert len(sizes) > 100  # the package is read
    over = {c: n for c, n in sizes.items() if n > OVER_FOR_NOW.get(c, MAX_CLASS_LINES)}
    assert all(sizes.get(c, 0) > MAX_CLASS_LINES for c in OVER_FOR_NOW), \
        "a class listed as over the bound is under it now: take it off the list"
    assert not over, f"classes over {MAX_CLASS_LINES} lines (or grown past their bound): {over}"
