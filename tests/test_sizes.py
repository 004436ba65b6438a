"""The sizes the code keeps to (issue 61): no unit passes its limit unless it is
listed in ``scripts/sizes.py``'s KNOWN, and no listed one grows."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("sizes", ROOT / "scripts" / "sizes.py")
assert spec is not None and spec.loader is not None
sizes = importlib.util.module_from_spec(spec)
sys.modules["sizes"] = sizes
spec.loader.exec_module(sizes)


def test_no_unit_passes_its_limit_or_grows_past_its_known_size():
    assert sizes.problems(sizes.units()) == []


def test_every_known_unit_is_still_over_its_limit():
    """A unit brought within its limit leaves KNOWN, so that it cannot grow back unseen."""
    over = {sizes.key(u) for u in sizes.units() if u.over}
    assert set(sizes.KNOWN) <= over, sorted(set(sizes.KNOWN) - over)


def tree(tmp_path: Path, body_lines: int, methods: int = 1) -> Path:
    """A repository of one module: a function of ``body_lines`` lines and a class of ``methods`` methods."""
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(body_lines))
    methods_text = "\n".join(f"    def m{i}(self):\n        return {i}\n" for i in range(methods))
    (package / "big.py").write_text(f"def f():\n{body}\n\n\nclass C:\n{methods_text}\n")
    return tmp_path


def test_a_new_function_over_its_limit_is_named(tmp_path):
    found = sizes.units(tree(tmp_path, body_lines=60))
    assert [u.size for u in found if u.name == "pkg.big.f"] == [61]
    assert sizes.problems(found) == ["function pkg.big.f: 61, over the limit of 60"]
    assert sizes.problems(sizes.units(tree(tmp_path / "fits", body_lines=59))) == []


def test_a_class_of_too_many_methods_is_named_and_its_methods_by_their_class(tmp_path):
    found = sizes.units(tree(tmp_path, body_lines=1, methods=21))
    assert "methods pkg.big.C: 21, over the limit of 20" in sizes.problems(found)
    assert "pkg.big.C.m20" in {u.name for u in found if u.kind == "function"}


def test_the_script_prints_the_largest_and_exits_0_where_the_sizes_hold():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sizes.py"), "--top", "3"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("module (limit 500): ")
    assert "function (limit 60): " in done.stdout and "benchmark (limit 300): " in done.stdout
