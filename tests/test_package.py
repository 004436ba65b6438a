"""The package as people install it: the sdist and wheel build, their metadata
asks for ranges of versions (never an exact one, which would replace a user's own
torch or Ray), and the wheel, installed into a new virtual environment with no
framework, runs the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import queuetune

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "traces" / "af51450-torch0.json"
FRAMEWORKS = ("torch", "keras", "tensorflow", "ray", "matplotlib")

pytestmark = pytest.mark.timeout(900)


def run(*argv: str | Path, cwd: Path | None = None) -> str:
    # Nothing on PYTHONPATH: the new venv must find only what was installed into it.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)
    assert result.returncode == 0, f"{argv} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, and the wheel built from it (``python -m build`` builds the wheel from the sdist)."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    return out


def test_the_sdist_and_wheel_carry_the_version_and_the_type_marker(dist: Path) -> None:
    version = queuetune.__version__
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    assert wheel.name == f"queuetune-{version}-py3-none-any.whl"
    assert sdist.name == f"queuetune-{version}.tar.gz"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(f"queuetune-{version}.dist-info/METADATA").decode()
    assert "queuetune/py.typed" in names
    assert f"queuetune-{version}.dist-info/licenses/LICENSE" in names
    assert f"\nVersion: {version}\n" in metadata
    assert "queuetune/frameworks/torch/watch.py" in names
    with tarfile.open(sdist) as t:
        members = t.getnames()
    assert f"queuetune-{version}/src/queuetune/py.typed" in members
    assert f"queuetune-{version}/README.md" in members


def requires_dist(wheel: Path) -> list[Requirement]:
    """The wheel's ``Requires-Dist`` lines, parsed."""
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = z.read(name).decode()
    return [Requirement(line.split(":", 1)[1]) for line in metadata.splitlines() if line.startswith("Requires-Dist:")]


def extra_of(requirement: Requirement) -> str | None:
    """The extra a requirement belongs to (``extra == "torch"`` in its marker), or None for the base."""
    marker = str(requirement.marker or "")
    return marker.split('extra == "', 1)[1].split('"', 1)[0] if 'extra == "' in marker else None


def test_the_wheel_asks_for_ranges_never_an_exact_version(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    requirements = requires_dist(wheel)
    extras = {extra_of(r) for r in requirements}
    assert {None, "torch", "keras", "tf", "ray", "plot", "tensorboard"} <= extras, extras
    for requirement in requirements:
        pinned = [
            s for s in requirement.specifier if s.operator == "===" or (s.operator == "==" and "*" not in s.version)
        ]
        assert not pinned, f"{requirement} (extra {extra_of(requirement)}) pins an exact version"
        if requirement.name != "types-psutil" and extra_of(requirement) != "all":
            assert any(s.operator == ">=" for s in requirement.specifier), f"{requirement} has no lower bound"
    # A user's CUDA build of a newer torch, or a newer Ray, stays as it is.
    torch = [r for r in requirements if r.name == "torch"]
    assert torch and all(r.specifier.contains(v) for r in torch for v in ("2.14.0+cu126", "2.15.0", "2.13.0"))
    ray = [r for r in requirements if r.name == "ray"]
    assert ray and all(r.specifier.contains("2.61.0") and "data" in r.extras for r in ray)


def test_the_constraints_pin_every_dependency_within_its_range() -> None:
    """constraints.txt, which scripts/setup installs with, pins exact versions, each
    one inside the range pyproject.toml gives users."""
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact version"
            pins[name.strip().lower()] = version.strip()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [Requirement(r) for r in project["dependencies"]]
    for name, group in project["optional-dependencies"].items():
        declared += [Requirement(r) for r in group if name != "all"]
    for requirement in declared:
        name = requirement.name.lower()
        assert name in pins, f"{requirement.name} has no exact version in constraints.txt"
        assert requirement.specifier.contains(Version(pins[name])), (
            f"constraints.txt's {name}=={pins[name]} is outside {requirement}"
        )
    assert pins["torch"] == "2.13.0"
    setup = (ROOT / "scripts" / "setup").read_text()
    assert "-c constraints.txt torch" in setup and '-c constraints.txt -e ".[$extras]"' in setup


def test_the_wheel_runs_in_a_new_venv_with_no_framework(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python, cli = venv / "bin" / "python", venv / "bin" / "queuetune"
    run(python, "-m", "pip", "install", "--quiet", wheel)
    found = run(
        python,
        "-c",
        "import importlib.util, sys; print([m for m in sys.argv[1:] if importlib.util.find_spec(m)])",
        *FRAMEWORKS,
    )
    assert found.strip() == "[]", f"a framework came with the wheel: {found}"
    # Run away from the checkout, so that only the installed package can be imported.
    away = tmp_path / "elsewhere"
    away.mkdir()

    assert run(cli, "--version", cwd=away).strip() == f"queuetune {queuetune.__version__}"

    table = json.loads(run(cli, "table", "--json", cwd=away))
    assert (table["unit"], len(table["batches"]), len(table["sizes"])) == ("GiB", 12, 6)
    assert table["values"][-1][-1] == 768  # batch 65536 at 1024x1024, as the article has it

    argv = ("estimate", "--shape", "224x224x3", "--batch", "32", "--framework", "torch", "--num-workers", "2")
    estimate = json.loads(run(cli, *argv, "--json", cwd=away))
    assert estimate["batch"]["nbytes"] == 224 * 224 * 3 * 32 * 4
    # 2 workers x 2, and the step's; the worker processes' own memory comes on top in total_bytes
    assert estimate["footprint"]["batches_bytes"] == (2 * 2 + 1) * estimate["batch"]["nbytes"]
    assert estimate["footprint"]["total_bytes"] > estimate["footprint"]["batches_bytes"]

    report = json.loads(run(cli, "report", TRACE, "--json", cwd=away))
    assert (report["produced_batches"], report["consumed_batches"]) == (4, 4)
    assert report["meta"]["framework"] == "torch"
    imported = run(
        python, "-c", "import queuetune, sys; print(sorted(set(sys.modules) & set(sys.argv[1:])))", *FRAMEWORKS
    )
    assert imported.strip() == "[]"
