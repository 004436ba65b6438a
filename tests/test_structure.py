"""The package's shape: no import cycles, a data layer that imports no presentation,
and framework names branched on in the frameworks registry alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "queuetune"
#: Recording, analysis, the estimate and the model: they must not import presentation.
DATA = ("trace", "recorder", "analysis", "memory", "model", "units", "nbytes", "jsonio")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def imports_of(name: str) -> set[str]:
    """The queuetune modules ``name`` imports, at its top or inside functions (not
    those only a type checker reads)."""
    found: set[str] = set()
    base = name if is_package(name) else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if type_checking_only(child):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    anchor = base.split(".")[: len(base.split(".")) - child.level + 1]
                    target = ".".join([*anchor, *([child.module] if child.module else [])])
                else:
                    target = child.module or ""
                # `from package import module` imports the module; `from module import name`, the module
                for alias in child.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in MODULES else target)
            visit(child)

    visit(ast.parse(MODULES[name].read_text()))
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imports_of(name) for name in MODULES}


def reachable(start: str) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for nxt in GRAPH[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def cycles() -> list[list[str]]:
    """Every import cycle, each as the path from a module back to itself (one per module)."""
    found = []
    for start in MODULES:
        parents: dict[str, str] = {}
        stack = [start]
        while stack:
            here = stack.pop()
            for nxt in sorted(GRAPH[here]):
                if nxt == start:
                    path = [here]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    found.append([start, *reversed(path[:-1]), start])
                    stack.clear()
                    break
                if nxt not in parents:
                    parents[nxt] = here
                    stack.append(nxt)
    return found


def test_the_import_graph_sees_the_package():
    assert len(MODULES) > 30
    assert "queuetune.frameworks" in GRAPH["queuetune.memory"]
    assert "queuetune.frameworks.keras.watch" in GRAPH["queuetune.probe"]  # imported inside a function


def test_a_cycle_would_be_found():
    GRAPH["queuetune.trace"].add("queuetune.analysis")
    try:
        assert any(c[0] == "queuetune.trace" for c in cycles())
    finally:
        GRAPH["queuetune.trace"].discard("queuetune.analysis")


def test_no_import_cycles():
    assert cycles() == []


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.split(".")[1:2] and m.split(".")[1] in DATA))
def test_the_data_layer_imports_no_presentation(name):
    assert not [m for m in reachable(name) if m.startswith("queuetune.render")]


def framework_branches(name: str) -> list[str]:
    """Comparisons of something called ``framework`` with a name: branches on a framework."""
    found = []
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = any("framework" in ast.unparse(side) for side in sides)
        literal = any(
            (isinstance(side, ast.Constant) and isinstance(side.value, str))
            or (
                isinstance(side, (ast.Tuple, ast.List, ast.Set)) and all(isinstance(e, ast.Constant) for e in side.elts)
            )
            for side in sides
        )
        if named and literal:
            found.append(f"{MODULES[name].name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_frameworks_branch_on_a_framework_name():
    outside = [m for m in MODULES if not m.startswith("queuetune.frameworks")]
    assert [b for m in outside for b in framework_branches(m)] == []
