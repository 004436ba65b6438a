"""Adding a framework touches its own folder, the registry and the frameworks'
names (``FrameworkName``), nothing else: a toy loader kind, added to a copy of the
package, is recognised, watched, estimated (with a flag of its own on ``queuetune
estimate``) and keeps the package's shape."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import assert_nothing_left_running

SRC = Path(__file__).resolve().parents[1] / "src"
TESTS = Path(__file__).resolve().parent

SPEC = '''"""What queuetune knows of the toy loader, without importing it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base import Framework, Lines, Setting, has_base


@dataclass(frozen=True)
class Toy(Framework):
    """A loader that reads ``toy_depth`` batches ahead with one thread."""

    def recognises(self, loader: Any) -> bool:
        return has_base(loader, "ToyLoader", "toyloader")

    def depth(self, settings: dict[str, Any]) -> int:
        return int(settings.get("toy_depth", 2))

    def read_ahead(self, settings: dict[str, Any], batch_bytes: int) -> tuple[dict[str, Any], Lines, int]:
        resolved = {"toy_depth": int(settings.get("toy_depth", 2))}
        depth = self.depth(resolved)
        return resolved, [("read ahead", depth, f"toy_depth={depth}")], depth

    def settings_of(self, loader: Any) -> dict[str, Any]:
        return {"toy_depth": loader.toy_depth}


TOY = Toy(
    "toy", depth_knob="toy_depth", settings=(Setting("toy_depth", "positive", "batches it reads ahead (default 2)"),)
)
'''

WATCH = '''"""The toy loader's adapter: each batch counted as its iterator returns it."""

from __future__ import annotations

import dataclasses
from typing import Any

from ...record.nbytes import nbytes
from ...record.recorder import Recorder, clock
from ...record.records import MetaFields
from ...record.trace import TraceMeta
from ..base import Adapter


class WatchedToy:
    def __init__(self, loader: Any, recorder: Recorder) -> None:
        self.loader, self.recorder = loader, recorder

    def __iter__(self) -> Any:
        for seq, batch in enumerate(self.loader):
            now = clock()
            self.recorder.produced(now, now, nbytes(batch), None, seq)
            self.recorder.consumed(now, now, nbytes=nbytes(batch), key=seq)
            yield batch


@dataclasses.dataclass(frozen=True)
class ToyAdapter(Adapter):
    def describe(self, loader: Any) -> MetaFields:
        settings = self.spec.settings_of(loader)
        return {"framework": self.spec.name, "loader": "toy", "settings": settings, "depth": self.spec.depth(settings)}

    def watch(self, loader: Any, meta: TraceMeta, sample_memory: bool, key: Any = None) -> tuple[Any, Recorder]:
        recorder = Recorder(meta, sample_memory=sample_memory)
        recorder.consumer = "iterator"
        return WatchedToy(loader, recorder), recorder


ADAPTERS: dict[str, type[Adapter]] = {"toy": ToyAdapter}
'''

LOADER = """class ToyLoader:
    toy_depth = 3

    def __iter__(self):
        return iter([b"ab", b"cd", b"ef"])
"""

USE = """import json, queuetune, toyloader
from queuetune.frameworks import detect
loader = queuetune.watch(toyloader.ToyLoader())
batches = list(loader)
probe = queuetune.probe_of(loader)
trace = probe.trace()
probe.close()
print(json.dumps({"framework": detect(toyloader.ToyLoader()).name, "batches": len(batches),
                  "meta": trace.meta.framework, "depth": trace.meta.depth,
                  "consumed": probe.report().consumed_batches}))
"""


@pytest.fixture(scope="module")
def with_toy(tmp_path_factory):
    """A copy of the package with the toy framework added: its folder, two lines in
    the registry and its name among the frameworks' names."""
    root = tmp_path_factory.mktemp("toy")
    package = root / "src" / "queuetune"
    shutil.copytree(SRC / "queuetune", package, ignore=shutil.ignore_patterns("__pycache__"))
    folder = package / "frameworks" / "toy"
    folder.mkdir()
    (folder / "__init__.py").write_text('"""A toy loader kind."""\n')
    (folder / "spec.py").write_text(SPEC)
    (folder / "watch.py").write_text(WATCH)
    registry = package / "frameworks" / "__init__.py"
    text = registry.read_text()
    text = text.replace("from .torch.spec import TORCH\n", "from .torch.spec import TORCH\nfrom .toy.spec import TOY\n")
    text = text.replace("NONE, PYTHON, QUEUETUNE)", "TOY, NONE, PYTHON, QUEUETUNE)")
    assert "TOY, NONE" in text
    registry.write_text(text)
    base = package / "frameworks" / "base.py"
    text = base.read_text().replace('"python", "queuetune"]', '"python", "queuetune", "toy"]')
    assert '"toy"]' in text
    base.write_text(text)
    (root / "toyloader.py").write_text(LOADER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    return root, env


def _changed(root: Path) -> list[str]:
    """The files of the copy that differ from the package's own, or are new."""
    changed = []
    for path in sorted((root / "src" / "queuetune").rglob("*.py")):
        original = SRC / path.relative_to(root / "src")
        if not original.exists() or original.read_bytes() != path.read_bytes():
            changed.append(str(path.relative_to(root / "src")))
    return changed


def test_the_toy_touches_only_its_folder_and_the_registry(with_toy):
    root, _ = with_toy
    assert _changed(root) == [
        "queuetune/frameworks/__init__.py",
        "queuetune/frameworks/base.py",
        "queuetune/frameworks/toy/__init__.py",
        "queuetune/frameworks/toy/spec.py",
        "queuetune/frameworks/toy/watch.py",
    ]


@pytest.mark.timeout(120)
def test_the_toy_is_recognised_and_watched(with_toy):
    root, env = with_toy
    done = subprocess.run([sys.executable, "-c", USE], env=env, cwd=root, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"framework": "toy", "batches": 3, "meta": "toy", "depth": 3, "consumed": 3}
    assert_nothing_left_running(threads=False)


@pytest.mark.timeout(120)
def test_the_toy_has_its_estimate_and_its_flag(with_toy):
    root, env = with_toy
    args = ["-m", "queuetune", "estimate", "--shape", "4", "--batch", "2", "--framework", "toy", "--toy-depth", "5"]
    done = subprocess.run(
        [sys.executable, *args, "--json"], env=env, cwd=root, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    footprint = json.loads(done.stdout)["footprint"]
    assert footprint["framework"] == "toy" and footprint["depth"] == 5
    helped = subprocess.run(
        [sys.executable, "-m", "queuetune", "estimate", "--help"],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert "toy: batches it reads ahead (default 2)" in helped.stdout
    assert_nothing_left_running(threads=False)


@pytest.mark.timeout(300)
def test_the_toy_keeps_the_packages_shape(with_toy):
    root, env = with_toy
    env = {**env, "QUEUETUNE_SRC": str(root / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TESTS / "test_structure.py")],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "passed" in done.stdout
    assert_nothing_left_running(threads=False)
