"""Collection rules for the whole tree (``src/queuetune`` is collected for its doctests).

A framework's watcher imports its framework at the top, so its doctests cannot
even be collected without it, and the plots' doctests draw with matplotlib:
without the package they need, a module's doctests are reported as skipped, so
that the suite runs with any subset of the extras installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FRAMEWORK_MODULES = {
    Path("src/queuetune/frameworks/keras/watch.py"): "keras",
    Path("src/queuetune/frameworks/torch/watch.py"): "torch",
    Path("src/queuetune/frameworks/torch/watched.py"): "torch",
    Path("src/queuetune/frameworks/torch/stateful.py"): "torchdata",
    Path("src/queuetune/frameworks/ray/watch.py"): "ray",
    Path("src/queuetune/render/plot.py"): "matplotlib",
}
ROOT = Path(__file__).parent


class NeedsFramework(pytest.File):
    """Stands for a module whose framework is not installed: collecting it is a skip."""

    framework = ""

    def collect(self) -> Iterator[Any]:
        where = self.path.resolve().relative_to(ROOT.resolve())
        pytest.skip(f"{self.framework} is not installed: the doctests of {where} need it")
        yield  # a generator, as collect() must be


def missing_framework(path: Path) -> str | None:
    """The framework ``path`` needs and this environment lacks, if any."""
    try:
        framework = FRAMEWORK_MODULES.get(path.resolve().relative_to(ROOT.resolve()))
    except ValueError:
        return None
    if framework is None or importlib.util.find_spec(framework) is not None:
        return None
    return framework


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Iterator[Any]:
    collected = yield
    framework = missing_framework(file_path)
    if framework is None:
        return collected
    stand_in = NeedsFramework.from_parent(parent, path=file_path)
    stand_in.framework = framework
    return [stand_in]
