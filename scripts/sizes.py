"""The sizes the code keeps to, and the largest units: modules in src/ of at most
500 lines, classes of at most 250 lines and 20 methods, functions of at most 60
lines, benchmark scripts of at most 300 lines.

Run: .venv/bin/python scripts/sizes.py [--top N]

Units still over a limit are listed in :data:`KNOWN` with the size they had when
the limit came: they may shrink, never grow, and a unit not listed may not pass
a limit (``tests/test_sizes.py`` holds the code to that). Exit status 1 where a
unit is over its limit and not known, or a known one grew.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMITS = {"module": 500, "class": 250, "methods": 20, "function": 60, "benchmark": 300}

#: Units over their limit, by name, with the size each had when it was listed (lines, or methods).
KNOWN: dict[str, int] = {}


@dataclass(frozen=True)
class Unit:
    """One measured unit: its ``kind`` (a key of :data:`LIMITS`), ``name`` and ``size``."""

    kind: str
    name: str
    size: int

    @property
    def limit(self) -> int:
        return LIMITS[self.kind]

    @property
    def over(self) -> bool:
        return self.size > self.limit


def units(root: Path = ROOT) -> list[Unit]:
    """Every module, class and function of ``src/`` and every benchmark script, measured."""
    found: list[Unit] = []
    for path in sorted((root / "src").rglob("*.py")):
        name = path.relative_to(root / "src").with_suffix("").as_posix().replace("/", ".")
        text = path.read_text()
        found.append(Unit("module", name, len(text.splitlines())))
        found.extend(_defs(ast.parse(text), name))
    for path in sorted((root / "benchmarks").glob("*.py")):
        found.append(Unit("benchmark", path.relative_to(root).as_posix(), len(path.read_text().splitlines())))
    return found


def _defs(node: ast.AST, prefix: str) -> list[Unit]:
    """The classes and functions in ``node``, named by where they are (``module.Class.method``)."""
    found: list[Unit] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            name = f"{prefix}.{child.name}"
            found.append(Unit("class", name, _lines(child)))
            methods = [n for n in child.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            found.append(Unit("methods", name, len(methods)))
            found.extend(_defs(child, name))
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}.{child.name}"
            found.append(Unit("function", name, _lines(child)))
            found.extend(_defs(child, name))
        else:
            found.extend(_defs(child, prefix))
    return found


def _lines(node: ast.AST) -> int:
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])  # type: ignore[attr-defined]
    return int(node.end_lineno or start) - start + 1  # type: ignore[attr-defined]


def key(unit: Unit) -> str:
    """The name :data:`KNOWN` lists a unit by."""
    return f"{unit.kind}:{unit.name}"


def problems(found: list[Unit]) -> list[str]:
    """What breaks the sizes: a unit over its limit and not known, or a known one that grew."""
    said = []
    for unit in found:
        if not unit.over:
            continue
        known = KNOWN.get(key(unit))
        if known is None:
            said.append(f"{unit.kind} {unit.name}: {unit.size}, over the limit of {unit.limit}")
        elif unit.size > known:
            said.append(f"{unit.kind} {unit.name}: {unit.size}, grew from {known} (the limit is {unit.limit})")
    return said


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=10, help="the largest units of each kind shown (default 10)")
    parser.add_argument("--known", action="store_true", help="print KNOWN as it stands now, and exit")
    args = parser.parse_args()
    found = units()
    if args.known:
        for unit in sorted((u for u in found if u.over), key=key):
            print(f'    "{key(unit)}": {unit.size},')
        return 0
    for kind, limit in LIMITS.items():
        of_kind = sorted((u for u in found if u.kind == kind), key=lambda u: -u.size)
        over = sum(u.over for u in of_kind)
        print(f"{kind} (limit {limit}): {len(of_kind)} measured, {over} over")
        for unit in of_kind[: args.top]:
            print(f"  {unit.size:>5}  {unit.name}{'  over' if unit.over else ''}")
    said = problems(found)
    for line in said:
        print(f"problem: {line}", file=sys.stderr)
    return 1 if said else 0


if __name__ == "__main__":
    sys.exit(main())
