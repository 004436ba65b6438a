"""What ``queuetune run`` found, as data: each loader the program iterated, with its
report and recommendation, and the loaders left alone (:mod:`queuetune.program`
makes it; :func:`queuetune.terminal.print_program` prints it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .analysis import Report
from .tune.headline import Headline
from .tune.recommend import Recommendation


@dataclass
class LoaderResult:
    """One loader the program iterated: its label, where its trace was saved,
    the report, the recommendation and the headline."""

    label: str
    trace_path: Path
    report: Report
    recommendation: Recommendation
    headline: Headline


@dataclass
class ProgramResult:
    """The program's exit code, what it iterated, and the loaders left alone."""

    exit_code: int
    out: Path
    loaders: list[LoaderResult] = field(default_factory=list)
    left_alone: dict[str, str] = field(default_factory=dict)
    #: The HTML report, when one was written.
    html: Path | None = None
