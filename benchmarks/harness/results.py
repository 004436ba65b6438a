"""What every benchmark says of its run: the machine, the versions, the commit; its table's
lines; the results written."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def machine() -> str:
    """Architecture, cores and processor model."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores" + (f" ({model})" if model else "")


def package_versions(*packages: str) -> dict[str, str]:
    """Python's version and each installed distribution's, by its name on the
    package index (``pillow``, ``torch``...), in the order given. A package
    that is importable but not installed (``PYTHONPATH=src``) gives its module's
    ``__version__`` with "(not installed)"; one that is neither, "absent".

    >>> package_versions("no-such-package-here")["no-such-package-here"]
    'absent'
    """
    import importlib
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version()}
    for name in packages:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            try:
                module = importlib.import_module({"pillow": "PIL"}.get(name, name).replace("-", "_"))
            except ImportError:
                versions[name] = "absent"
            else:
                versions[name] = f"{getattr(module, '__version__', '?')} (not installed)"
    return versions


def commit() -> dict[str, Any]:
    """The commit the benchmark ran at, and whether tracked files had changes
    beside it, where git can tell (nothing where it cannot: a copy without
    ``.git``, no git)."""
    root = Path(__file__).resolve().parents[2]

    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(["git", *argv], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if not head:
        return {}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": head.strip(), **({} if status is None else {"commit_dirty": bool(status.strip())})}


def preamble(title: str, result: dict[str, Any]) -> list[str]:
    """A benchmark table's first lines: what ran, the versions, the machine and the date."""
    return [
        title,
        "versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()),
        f"machine: {result['machine']}; date: {result['date']}; took {result['seconds']:.0f} s",
        "",
    ]


def mib(value: float | None) -> str:
    """Bytes in MiB, one decimal, for a table ("n/a" for None)."""
    return "n/a" if value is None else f"{value / 2**20:.1f} MiB"


def target_lines(checks: list[dict[str, Any]]) -> list[str]:
    """A benchmark table's closing "Targets:" lines: each check's status (met,
    MISSED, or n/a where ``met`` is None), what it asks and its ``value``."""
    lines = ["Targets:"]
    for check in checks:
        status = "n/a   " if check["met"] is None else "met   " if check["met"] else "MISSED"
        value = check["value"]
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        lines.append(f"  {status} {check['target']}: {shown}")
    return lines


def publish(result: dict[str, Any], text: str, stem: str, as_json: bool, out: Path | None) -> None:
    """Print the table (or the JSON with ``as_json``); with ``out``, write
    ``<stem>.json`` and ``<stem>.txt`` into that folder as well, replacing the
    run before (git keeps the history; a file's name carries no run's story).
    The JSON gets the date (UTC) and the commit where the benchmark gave none."""
    stamp = {"date": datetime.now(UTC).isoformat(timespec="seconds"), **commit()}
    result = {**result, **{key: value for key, value in stamp.items() if key not in result}}
    print(json.dumps(result, indent=2) if as_json else text)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / f"{stem}.txt").write_text(text + "\n")
