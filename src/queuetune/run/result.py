"""What ``queuetune run`` found, as data: each loader the program iterated, with its
report and recommendation, and the loaders left alone (:mod:`queuetune.program`
makes it; :func:`queuetune.terminal.print_program` prints it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.report import Report
from ..analysis.resumes import Span
from ..tune.headline import Headline
from ..tune.recommend import Recommendation


@dataclass
class LoaderResult:
    """One loader the program iterated: its label, where its trace was saved,
    the report, the recommendation and the headline."""

    label: str
    trace_path: Path
    report: Report
    recommendation: Recommendation
    headline: Headline
    #: Where the run resumed a stopped one: each epoch that spans a restart (see :mod:`queuetune.analysis.resumes`).
    resumes: list[Span] = field(default_factory=list)


@dataclass
class ProgramResult:
    """The program's exit code, what it iterated, and the loaders left alone."""

    exit_code: int
    out: Path
    loaders: list[LoaderResult] = field(default_factory=list)
    left_alone: dict[str, str] = field(default_factory=dict)
    #: The HTML report, when one was written.
    html: Path | None = None
    #: The JSON summary (each loader's headline, recommendation and report), when one was written.
    summary: Path | None = None
    #: SIGTERM came while the program ran or its report was written: the process is to end
    #: with status 143 (:data:`queuetune.run.endings.TERMINATED`).
    terminated: bool = False

    def to_dict(self) -> dict[str, Any]:
        """What the JSON summary holds: the exit code, and for each loader its label,
        trace file, headline, recommendation, report (without its time series)
        and the epochs that span a restart of the job."""
        return {
            "exit_code": self.exit_code,
            "loaders": [
                {
                    "label": loader.label,
                    "trace": str(loader.trace_path),
                    "headline": loader.headline.to_dict(),
                    "recommendation": loader.recommendation.to_dict(),
                    "report": loader.report.to_dict(series=False),
                    "resumes": [span.to_dict() for span in loader.resumes],
                }
                for loader in self.loaders
            ],
            "left_alone": dict(self.left_alone),
        }
