"""The README and the docs as a newcomer reads them: a README of at most 300
lines whose first screen says what queuetune answers and how to start, that
links every page of the site; every results file and every ``file.py:LINE``
they cite still there and still pointing at what it names. (The site itself is
built in strict mode by scripts/test.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
RESULTS = ROOT / "benchmarks" / "results"
#: ``name.py:LINE``, as queuetune run's labels print it (``dataloader 1 (train_torchvision.py:89)``).
LINE_REF = re.compile(r"\b([\w/.-]+\.py):(\d+)\b")
#: A results file named by its path, or a glob of them (``ray_tune*.txt``).
RESULT_REF = re.compile(r"benchmarks/results/([\w.*-]+)")
#: A loop over a loader: what such a label names.
ITERATES = re.compile(r"^\s*(async\s+)?for\s.+\sin\s.+:")


def texts() -> dict[str, str]:
    return {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in [README, *DOCS]}


def test_the_readme_is_short_and_its_first_screen_says_how_to_start():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines"
    first = "\n".join(lines[:45])
    for wanted in (
        "which side is the bottleneck",  # what it answers
        "docs/images/report.png",  # the HTML report's picture
        "pip install 'queuetune[torch]'",
        "[keras]",
        "[ray]",
        "queuetune run train.py",
        "Bottleneck: loading",  # how to read the headline
    ):
        assert wanted in first, f"{wanted!r} is not on the README's first screen"
    text = "\n".join(lines)
    develop = text[text.index("## Develop") :]
    assert "scripts/demo" in develop and "scripts/test" in develop


def test_the_readme_links_every_page_of_the_docs():
    text = README.read_text(encoding="utf-8")
    for page in DOCS:
        assert f"(docs/{page.name})" in text or f"(docs/{page.name}#" in text, f"README.md has no link to {page.name}"


def test_every_results_file_cited_exists():
    missing = []
    for name, text in texts().items():
        for cited in set(RESULT_REF.findall(text)):
            cited = cited.rstrip(".")
            if cited in ("", "NAME.txt") or cited.endswith("/"):
                continue
            if not (list(RESULTS.glob(cited)) if "*" in cited else (RESULTS / cited).is_file()):
                missing.append(f"{name}: benchmarks/results/{cited}")
    assert missing == []


def repository_file(name: str) -> Path | None:
    """The repository's file called ``name`` (a path, or a bare name found in one place)."""
    if (ROOT / name).is_file():
        return ROOT / name
    folders = ("examples", "src", "benchmarks", "scripts", "tests")
    found = [p for folder in folders for p in (ROOT / folder).rglob(Path(name).name)]
    return found[0] if len(found) == 1 else None


def test_every_file_line_reference_points_at_a_loop_over_a_loader():
    checked, wrong = 0, []
    for name, text in texts().items():
        for file, line in LINE_REF.findall(text):
            path = repository_file(file)
            if path is None:  # a script of the reader's (train.py), not one of the repository's
                continue
            lines = path.read_text(encoding="utf-8").splitlines()
            number = int(line)
            checked += 1
            if not (number <= len(lines) and ITERATES.match(lines[number - 1])):
                shown = lines[number - 1].strip() if number <= len(lines) else "past the end"
                wrong.append(f"{name}: {file}:{line} is {shown!r}, not the loop that iterates the loader")
    assert wrong == []
    assert checked >= 1  # docs/pytorch.md's label of examples/train_torchvision.py


@pytest.mark.parametrize("line", ["for inputs, labels in loader:", "    for x in ds.iter_batches():"])
def test_a_loop_is_what_a_label_names(line):
    assert ITERATES.match(line)


def test_the_benchmarks_readme_lists_every_benchmark():
    listed = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    scripts |= {p.name for p in (ROOT / "benchmarks").glob("*.sh")}
    assert {s for s in scripts if f"`{s}`" not in listed} == set()
    # Each results file belongs to a benchmark the list names.
    stems = {p.name.split(".")[0] for p in RESULTS.iterdir()}
    assert {s for s in stems if s not in listed} == set()
