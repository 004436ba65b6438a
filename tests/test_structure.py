"""The package's shape: a map of layers that every import keeps to (those only a
type checker reads, and the package ``__init__`` each import runs, counted), no
import cycle, and each framework's setting names in its own folder alone."""

from __future__ import annotations

import ast
import fnmatch
import os
from pathlib import Path
from typing import get_args

import pytest

from queuetune.frameworks import FRAMEWORKS
from queuetune.frameworks.base import FrameworkName

#: The source to check: this checkout's, or another copy's (QUEUETUNE_SRC; see test_new_framework.py).
SRC = Path(os.environ.get("QUEUETUNE_SRC") or Path(__file__).resolve().parents[1] / "src")
PACKAGE = "queuetune"

#: The layers, lowest first, each a folder of the package: a module imports
#: modules of its own layer or lower ones. The modules at the package's top are
#: its face (:data:`FACE`), the highest layer. A framework's folder holds two:
#: what queuetune knows of it (its spec, its tensors) with the specs, and how it
#: is watched (``watch.py``, ``stateful.py``) with the adapters.
FOLDERS: list[str] = [
    "common",  # units, JSON, cores, import hooks, what a launcher says
    "record",  # the trace and the recorder that fills it; bytes, fingerprints, /proc, matching
    "model",  # the queue model
    "frameworks",  # what queuetune knows of each framework (spec.py, tensors.py)
    "analysis",  # what a trace says: the report, memory by cause, ranks, resumes
    "estimate",  # estimates before anything runs
    "frameworks:watch",  # how each framework's loaders are watched (watch.py, stateful.py)
    "prefetch",  # queuetune's own prefetcher
    "probing",  # the probe of a watched loader, the session of a program
    "tune",  # recommendations and the tuner
    "run",  # queuetune run below its presentation: running, endings, its result
    "render",  # presentation: each format's output, returned
    "sinks",  # what writes as a program runs
    "",  # the face: the API, the command line, the demo, the program runner
]
FACE = ("", "__main__", "api", "terminal", "cli", "demo", "program")
#: The face's own folders: the command line, a module a group of commands.
FACE_FOLDERS = ("cli",)
#: The framework modules in the adapters' layer.
WATCHING = ("adapters", "watch", "watched", "stateful")
#: Imports the source names only as strings: the adapter registry imports each
#: framework's ``watch.py`` by name.
DYNAMIC = {"queuetune.frameworks.adapters": "queuetune.frameworks.*.watch"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def layer_of(name: str) -> int:
    """The index in :data:`FOLDERS` of the folder ``name`` lies in (its layer)."""
    local = name.removeprefix(PACKAGE).removeprefix(".")
    parts = local.split(".")
    if local in FACE or parts[0] in FACE_FOLDERS:
        return FOLDERS.index("")
    if parts[0] == "frameworks" and parts[-1] in WATCHING:
        return FOLDERS.index("frameworks:watch")
    if len(parts) > 1 or is_package(name):
        if parts[0] in FOLDERS:
            return FOLDERS.index(parts[0])
    raise LookupError(f"{name} is in no layer: at the package's top but not its face, or in an unknown folder")


def imports_of(name: str) -> set[str]:
    """The queuetune modules importing ``name`` runs: what it imports anywhere (at
    its top, inside functions, for the type checker alone), and the packages whose
    ``__init__`` each such import runs first."""
    found: set[str] = set()
    base = name if is_package(name) else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")[: len(base.split(".")) - node.level + 1]
                target = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            # `from package import module` imports the module; `from module import name`, the module
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    if name in DYNAMIC:
        found.update(m for m in MODULES if fnmatch.fnmatchcase(m, DYNAMIC[name]))
    runs = set()
    for module in found:
        parts = module.split(".")
        runs.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}  # itself and its packages
    return {m for m in runs if m in MODULES and m not in own}


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
    assert "queuetune.frameworks" in GRAPH["queuetune.estimate.memory"]
    assert "queuetune.terminal" in GRAPH["queuetune.api"]  # imported inside a method
    # `from ..prefetch.shm.files import PoolFiles` runs the packages' __init__ first
    assert {"queuetune.prefetch", "queuetune.prefetch.shm", "queuetune.prefetch.shm.files"} <= GRAPH[
        "queuetune.render.text"
    ]
    # the Prefetcher knows tensors through the registry alone
    shm = [name for name in MODULES if name.startswith("queuetune.prefetch.shm")]
    assert len(shm) > 1
    assert not [m for name in shm for m in GRAPH[name] if m.startswith("queuetune.frameworks.")]
    assert "queuetune.analysis.report" in GRAPH["queuetune.probing.probe"]  # for the type checker alone
    assert "queuetune.frameworks.keras.watch" in GRAPH["queuetune.frameworks.adapters"]  # by name


def test_a_cycle_would_be_found():
    GRAPH["queuetune.record.trace"].add("queuetune.analysis.report")
    try:
        assert any(c[0] == "queuetune.record.trace" for c in cycles())
    finally:
        GRAPH["queuetune.record.trace"].discard("queuetune.analysis.report")


def test_no_import_cycles():
    assert cycles() == []


def test_nothing_below_presentation_imports_it():
    presentation = layer_of("queuetune.render")
    assert presentation == FOLDERS.index("render")
    below = [m for m in MODULES if layer_of(m) < presentation]
    assert [m for m in below if any(i.startswith("queuetune.render") for i in GRAPH[m])] == []


def test_every_module_has_one_layer():
    assert {name: layer_of(name) for name in MODULES}  # LookupError names one in none
    top = [m for m in MODULES if m.count(".") == 1 and not is_package(m)]
    # the rest lies in the layers' folders
    assert top == [f"{PACKAGE}.{m}" for m in sorted(FACE[1:]) if m not in FACE_FOLDERS]
    assert layer_of("queuetune.frameworks.keras") == layer_of("queuetune.frameworks.keras.spec")
    assert layer_of("queuetune.frameworks.keras.watch") > layer_of("queuetune.record.recorder")


def upward_imports(name: str) -> list[str]:
    return sorted(m for m in GRAPH[name] if layer_of(m) > layer_of(name))


def test_an_upward_import_would_be_found():
    GRAPH["queuetune.probing.probe"].add("queuetune.render.text")
    try:
        assert upward_imports("queuetune.probing.probe") == ["queuetune.render.text"]
    finally:
        GRAPH["queuetune.probing.probe"].discard("queuetune.render.text")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_keep_to_the_layers(name):
    assert upward_imports(name) == []


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


def test_the_registry_holds_each_framework_name_once():
    assert sorted(FRAMEWORKS) == sorted(get_args(FrameworkName))


def setting_homes() -> dict[str, set[str]]:
    """Each framework setting's name, and the folders of the frameworks that have it."""
    homes: dict[str, set[str]] = {}
    for spec in FRAMEWORKS.values():
        home = type(spec).__module__.rpartition(".")[0]
        names = {spec.depth_knob, spec.workers_knob, *spec.tuned_knobs, *(spec.estimate_settings or ())}
        for setting in names - {None}:
            homes.setdefault(setting, set()).add(home)
    return homes


def strings_in(name: str) -> list[tuple[int, str]]:
    """The string constants of a module's code (docstrings left out), with their lines."""
    tree = ast.parse(MODULES[name].read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


#: Names of framework settings that are also queuetune's own words ("workers": the
#: queue model's and the Prefetcher's), and modules that may name any setting: the
#: frameworks' shared helpers, and the demo, which runs the article's Keras
#: experiment and prints it (its JSON keys are Keras's settings).
OWN_WORDS = {"workers"}
ANY_SETTING = ("queuetune.frameworks.base", "queuetune.demo", "queuetune.estimate.experiment", "queuetune.render.text")


def settings_outside_their_folders(homes: dict[str, set[str]]) -> list[str]:
    found = []
    for name in (m for m in MODULES if m not in ANY_SETTING):
        for line, text in strings_in(name):
            owners = homes.get(text) if text not in OWN_WORDS else None
            if owners and not any(name == home or name.startswith(home + ".") for home in owners):
                found.append(f"{MODULES[name].relative_to(SRC)}:{line}: {text!r}")
    return found


def test_a_setting_name_outside_its_folder_would_be_found():
    assert setting_homes()["num_workers"] == {"queuetune.frameworks.torch"}
    # The Prefetcher's own setting, were it a toy framework's: named outside the toy's folder.
    found = settings_outside_their_folders({"max_bytes": {"queuetune.frameworks.toy"}})
    assert any(f.startswith("queuetune/prefetch/recording.py:") and f.endswith("'max_bytes'") for f in found)


def test_each_frameworks_setting_names_stay_in_its_folder():
    assert settings_outside_their_folders(setting_homes()) == []
