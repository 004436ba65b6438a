"""The package as people install it: the sdist and wheel build, and the wheel,
installed into a new virtual environment with no framework, runs the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

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
    assert (
        estimate["footprint"]["total_bytes"] == (2 * 2 + 1) * estimate["batch"]["nbytes"]
    )  # 2 workers x 2, the step's

    report = json.loads(run(cli, "report", TRACE, "--json", cwd=away))
    assert (report["produced_batches"], report["consumed_batches"]) == (4, 4)
    assert report["meta"]["framework"] == "torch"
    imported = run(
        python, "-c", "import queuetune, sys; print(sorted(set(sys.modules) & set(sys.argv[1:])))", *FRAMEWORKS
    )
    assert imported.strip() == "[]"
