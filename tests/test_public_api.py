"""The public API, listed (issue 61): what ``import queuetune`` exports, every
name the API reference documents (docs/reference.md; by its own name, so that
a module may move to another folder), the command line's commands and flags,
and the trace format's version. The listing is ``tests/public_api.txt``; a
move inside the package must leave it as it is.

Where the API changes on purpose, write the listing again and review the diff:
``.venv/bin/python tests/test_public_api.py --write``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LISTING = ROOT / "tests" / "public_api.txt"


def resolve(path: str) -> object:
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ImportError(path)


def described(path: str, obj: object) -> list[str]:
    """One line for ``obj`` (its kind and signature), and one for each public method of a class."""
    if inspect.ismodule(obj):
        return [f"{path}: module"]
    if inspect.isclass(obj):
        lines = [f"{path}: class{_signature(obj)}"]
        for name, member in sorted(vars(obj).items()):
            if name.startswith("_") and name != "__init__":
                continue
            if inspect.isfunction(member) or isinstance(member, classmethod | staticmethod):
                lines.append(f"{path}.{name}{_signature(getattr(obj, name))}")
            elif isinstance(member, property):
                lines.append(f"{path}.{name}: property")
        return lines
    if callable(obj):
        return [f"{path}{_signature(obj)}"]
    return [f"{path}: {type(obj).__name__}"]


def _signature(obj: object) -> str:
    try:
        text = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    return re.sub(r" at 0x[0-9a-f]+", "", text)


def documented() -> list[str]:
    """The names the API reference renders (``::: path`` lines)."""
    text = (ROOT / "docs" / "reference.md").read_text()
    return re.findall(r"^::: ([\w.]+)", text, flags=re.MULTILINE)


def cli_lines() -> list[str]:
    from queuetune.cli import build_parser

    parser = build_parser()
    lines = [f"queuetune {' '.join(sorted(_flags(parser)))}"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in sorted(action.choices.items()):
                lines.append(f"queuetune {name} {' '.join(sorted(_flags(sub)))}")
    return lines


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        found.append("/".join(action.option_strings) if action.option_strings else f"<{action.dest}>")
    return found


def listing() -> str:
    import queuetune
    from queuetune.record import trace

    lines = [f"trace format {trace.FORMAT!r} version {trace.VERSION}"]
    for name in sorted(queuetune.__all__):
        lines += described(f"queuetune.{name}", getattr(queuetune, name))
    for path in documented():
        obj = resolve(path)
        if inspect.ismodule(obj):
            public = getattr(obj, "__all__", None) or [n for n in vars(obj) if not n.startswith("_")]
            own = [n for n in public if getattr(getattr(obj, n), "__module__", None) == obj.__name__]
            for name in sorted(own):
                lines += described(f"{path.rpartition('.')[2]}.{name}", getattr(obj, name))
        else:
            lines += described(getattr(obj, "__qualname__", path), obj)
    lines += cli_lines()
    return "\n".join(lines) + "\n"


def test_the_public_api_is_as_listed():
    assert listing() == LISTING.read_text(), "the public API changed: see this module's text"


def test_the_listing_would_see_a_name_gone():
    import queuetune

    assert "queuetune.report(" in LISTING.read_text()
    assert described("queuetune.report", queuetune.report) != described("queuetune.watch", queuetune.watch)
    assert "queuetune run " in LISTING.read_text() and "--resume" in LISTING.read_text()


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        LISTING.write_text(listing())
    else:
        print(listing(), end="")
