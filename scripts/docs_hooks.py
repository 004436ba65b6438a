"""MkDocs hooks (mkdocs.yml names this file): the benchmarks' result files as
pages of the site link them.

The Markdown under docs/ links a result as ``../benchmarks/results/NAME``, which
GitHub follows from docs/; the site serves the same files at
``benchmarks/results/NAME`` (added here from the repository's folder, never
copied into docs/), and each such link is rewritten to that place, so a link
to a result that is gone fails the strict build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
PREFIX = "../benchmarks/results/"


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path in sorted(RESULTS.iterdir()):
        if path.is_file():
            files.append(File.generated(config, f"benchmarks/results/{path.name}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    depth = page.file.src_uri.count("/")
    return markdown.replace(f"]({PREFIX}", "](" + "../" * depth + "benchmarks/results/")
