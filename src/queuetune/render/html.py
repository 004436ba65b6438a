"""One self-contained HTML report of one or more loaders: per loader a
timeline (one lane per worker, each batch's build a bar; the consumer's lane
with its steps and waits), batches and bytes in flight over time with the
depth or budget, memory over time, the verdict, the recommendation, the
coverage and every measure of the report. Figures are inline SVG drawn by
matplotlib; nothing is fetched from anywhere."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis.coverage import Coverages
from ..analysis.report import section_of
from ..analysis.waits import MODERATE, Waits
from .measures import report_rows
from .text import findings, rows
from .timeline import timeline_svg

if TYPE_CHECKING:
    from ..analysis.ranks import RanksReport
    from ..analysis.report import Report
    from ..record.trace import Trace


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ccc; }
.headline { font-size: 1.15em; background: #f3f3f8; padding: .5em .8em; border-left: 4px solid #446; }
.verdict { font-size: 1.05em; } .recommendation { background: #eef6ee; padding: .5em .8em; }
table { border-collapse: collapse; font-size: .9em; } td, th { border: 1px solid #ddd; padding: .25em .6em; }
td:first-child { font-weight: 600; } figure { margin: 1em 0; } svg { max-width: 100%; height: auto; }
.note, figcaption { color: #555; font-size: .9em; }
code { font-family: ui-monospace, monospace; font-size: .92em; background: #f2f2f2; padding: 0 .25em; }
.ranks { display: grid; grid-template-columns: repeat(var(--ranks), minmax(0, 1fr)); gap: 1.5em; }
.ranks table { font-size: .8em; }
.measures td:first-child { white-space: nowrap; } .ranks .measures td:first-child { white-space: normal; }
"""


@dataclass(frozen=True)
class Section:
    """One loader in the report: its label, trace, report, recommendation and
    headline (in words; see :mod:`queuetune.tune.headline`)."""

    label: str
    trace: Trace
    report: Report
    recommendation: str | None = None
    headline: str | None = None


def html_report(sections: list[Section], title: str = "queuetune report", ranks: RanksReport | None = None) -> str:
    """The report as one HTML document (UTF-8, no external resources).

    >>> from queuetune.analysis.report import analyze
    >>> from queuetune.record.trace import Consumed, Produced, Trace
    >>> trace = Trace(produced=[Produced(0.0, 0.1, 8, worker="thread-1")], consumed=[Consumed(0.0, 0.1)], end=0.2)
    >>> page = html_report([Section("loader 1", trace, analyze(trace))])
    >>> page.startswith("<!DOCTYPE html>") and "loader 1" in page and "http" not in page.split("<svg")[0]
    True
    """
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
    ]
    if ranks is not None:
        parts.append(ranks_html(ranks))
    if not sections:
        parts.append("<p>No loader was watched.</p>")
    number = 0
    for group in _side_by_side(sections, ranks is not None):
        if len(group) > 1:
            parts.append(f'<div class="ranks" style="--ranks: {len(group)}">')
        for section in group:
            number += 1
            parts.append(_section(section, number))
        if len(group) > 1:
            parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _side_by_side(sections: list[Section], ranked: bool) -> list[list[Section]]:
    """Sections one by one; a launch's ranks of the same loader together, by rank."""
    if not ranked:
        return [[section] for section in sections]
    groups: dict[str, list[Section]] = {}
    for section in sections:
        groups.setdefault(section.trace.meta.name or section.label, []).append(section)
    return [sorted(group, key=lambda s: s.trace.meta.rank or 0) for group in groups.values()]


def _plural(unit: str) -> str:
    return unit + ("es" if unit.endswith("ch") else "s")


def _section(section: Section, number: int) -> str:
    report = section.report
    out = [f'<section id="loader-{number}"><h2>{_e(section.label)}</h2>']
    if section.headline:
        out.append(f'<p class="headline"><strong>{_code(section.headline)}</strong></p>')
    out.extend(_verdict(section_of(Waits, report)))
    if section.recommendation:
        out.append(f'<p class="recommendation">Recommendation: {_code(section.recommendation)}</p>')
    figure = timeline_svg(section.trace, report)
    if figure is None:
        out.append("<p class=\"note\">Figures need matplotlib: pip install 'queuetune[plot]'.</p>")
    else:
        out.append(f'<figure class="timeline">{figure}<figcaption>{_caption(section.trace)}</figcaption></figure>')
    out.extend(_coverage(section_of(Coverages, report)))
    out.append('<h3>Measures</h3><table class="measures">')
    for label, value in report_rows(report):
        out.append(f"<tr><td>{_e(label)}</td><td>{_code(value)}</td></tr>")
    out.append("</table></section>")
    return "\n".join(out)


def _verdict(waits: Waits) -> list[str]:
    """The steady state's verdict, where it is known."""
    if waits.input_bound_fraction is None:
        return []
    return [
        f'<p class="verdict">Steady state: the consumer waited for input '
        f"{waits.input_bound_fraction:.1%} of the time: <strong>{_e(waits.verdict)}</strong>."
        f"{_handover(waits)}</p>"
    ]


def _coverage(coverages: Coverages) -> list[str]:
    """Each epoch's coverage as a table row, then its causes and the epochs counted in part."""
    if not coverages.coverage:
        return []
    out = ["<h3>Coverage</h3><table><tr><th>run</th><th>epoch</th><th>consumed</th>"]
    out.append("<th>more than once</th><th>never</th></tr>")
    for cov in coverages.coverage:
        total = "" if cov.total is None else f" of {cov.total}"
        never = "-" if cov.never_count is None else str(cov.never_count)
        if cov.cut_short:
            reached = "" if cov.not_reached is None else f": {cov.not_reached} not reached"
            never = f"epoch cut short after {cov.batches} batches{reached}"
        elif cov.resumed_after is not None:
            here = "" if cov.not_reached is None else f": {cov.not_reached} not consumed in this run"
            never = f"resumed after {cov.resumed_after} batches handed over before the restart{here}"
        out.append(
            f"<tr><td>{cov.run}</td><td>{cov.epoch}</td><td>{cov.consumed}{total} {_e(_plural(cov.unit))}</td>"
            f"<td>{len(cov.duplicates)}</td><td>{never}</td></tr>"
        )
    out.append("</table>")
    for cause in dict.fromkeys(cov.cause for cov in coverages.coverage if cov.cause):
        out.append(f'<p class="note">Coverage: {_code(cause)}.</p>')
    for cov in coverages.coverage:
        if cov.partial:
            out.append(
                f'<p class="note">Coverage partial in run {cov.run} epoch {cov.epoch}: '
                f"{cov.unkeyed} of {cov.batches} batches not keyed, left out of its counts.</p>"
            )
    return out


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _code(text: Any) -> str:
    """Escaped text, with what notes and advice mark as code (between backticks) in ``<code>``.

    >>> _code("run `queuetune tune` <now>")
    'run <code>queuetune tune</code> &lt;now&gt;'
    """
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


def _handover(waits: Waits) -> str:
    """The sentence on the waits for batches already built, where they are 5 % of the steady state or more
    (where a wait for builds would be moderately input-bound)."""
    handed, steady = waits.steady_handover_seconds, waits.steady_seconds
    if not waits.handover_seen or not handed or not steady or handed / steady < MODERATE:
        return ""
    return (
        f" It also waited {handed / steady:.1%} of the time for the hand-over of batches already built "
        "(the pipe, unpickling, a copy), which more workers or a deeper queue do not shorten."
    )


def _caption(trace: Trace) -> str:
    """What the figure shows, in words: the lanes, the consumer's shares, in flight and the depth."""
    depth = any(m.kind == "depth" for m in trace.marks) or bool(trace.meta.depth)
    return (
        "Top: a lane per worker, each blue bar a batch being built; workers are numbered within each run "
        "in the order of their first batch, so one started afresh each epoch keeps its lane. The consumer's "
        "lane is drawn per pixel, each column split by the share of its time spent waiting for a batch not "
        "yet built (red), waiting for the hand-over of one already built (light red) and in the step (green): "
        "a run that waits 0.2 % of its time shows almost no red, one that waits 31 % a third. Middle: batches "
        "(blue line, left) and bytes (orange area, right) built and not yet released, the batch the step "
        "holds included"
        + (
            "; the dashed line is the depth, the most batches the loader's settings let it build ahead "
            "(a Prefetcher's as it adapts)"
            if depth
            else ""
        )
        + ". Bottom: memory: where the loader's real memory was read (the PSS of the consumer and its "
        "workers, and the shared memory none of them maps), stacked by cause; the consumer's RSS as a line."
    )


def ranks_html(report: RanksReport) -> str:
    """The table and the findings as an HTML fragment."""
    escape = html.escape
    head = "".join(f"<th>{c}</th>" for c in ("rank", "loader", "batches/s", "input wait", "median step", "verdict"))
    body = "".join("<tr>" + "".join(f"<td>{_code(cell)}</td>" for cell in row) + "</tr>" for row in rows(report))
    items = "".join(f"<li>{_code(line)}</li>" for line in findings(report))
    title = f"{report.world_size} ranks" + (f" of job {escape(report.job)}" if report.job else "")
    return (
        f'<section id="ranks"><h2>{title}</h2><table><tr>{head}</tr>{body}</table>'
        + (f"<ul>{items}</ul>" if items else "")
        + "</section>"
    )
