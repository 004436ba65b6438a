"""One self-contained HTML report of one or more loaders: per loader a
timeline (one lane per worker, each batch's build a bar; the consumer's lane
with its steps and waits), batches and bytes in flight over time with the
depth or budget, memory over time, the verdict, the recommendation, the
coverage and every measure of the report. Figures are inline SVG drawn by
matplotlib; nothing is fetched from anywhere."""

from __future__ import annotations

import html
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..units import format_bytes
from .text import findings, report_rows, rows, worker_name

if TYPE_CHECKING:
    from ..analysis import Report
    from ..ranks import RanksReport
    from ..trace import Trace

#: Lanes drawn one per worker; the workers after these share the last lane.
MAX_LANES = 16
#: Bars drawn as vectors up to this many; more are drawn as an image inside the SVG.
MAX_VECTOR_BARS = 4000

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ccc; }
.verdict { font-size: 1.05em; } .recommendation { background: #eef6ee; padding: .5em .8em; }
table { border-collapse: collapse; font-size: .9em; } td, th { border: 1px solid #ddd; padding: .25em .6em; }
td:first-child { font-weight: 600; } figure { margin: 1em 0; } svg { max-width: 100%; height: auto; }
.note { color: #666; font-size: .9em; }
.ranks { display: grid; grid-template-columns: repeat(var(--ranks), minmax(0, 1fr)); gap: 1.5em; }
.ranks table { font-size: .8em; }
"""


@dataclass(frozen=True)
class Section:
    """One loader in the report: its label, trace, report and recommendation (in words)."""

    label: str
    trace: Trace
    report: Report
    recommendation: str | None = None


def html_report(sections: list[Section], title: str = "queuetune report", ranks: RanksReport | None = None) -> str:
    """The report as one HTML document (UTF-8, no external resources).

    >>> from queuetune.analysis import analyze
    >>> from queuetune.trace import Consumed, Produced, Trace
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
    if report.input_bound_fraction is not None:
        out.append(
            f'<p class="verdict">Steady state: the consumer waited for input '
            f"{report.input_bound_fraction:.1%} of the time: <strong>{_e(report.verdict)}</strong>.</p>"
        )
    if section.recommendation:
        out.append(f'<p class="recommendation">Recommendation: {_e(section.recommendation)}</p>')
    figure = timeline_svg(section.trace, report)
    if figure is None:
        out.append("<p class=\"note\">Figures need matplotlib: pip install 'queuetune[plot]'.</p>")
    else:
        out.append(f'<figure class="timeline">{figure}</figure>')
    if report.coverage:
        out.append("<h3>Coverage</h3><table><tr><th>run</th><th>epoch</th><th>consumed</th>")
        out.append("<th>more than once</th><th>never</th></tr>")
        for cov in report.coverage:
            total = "" if cov.total is None else f" of {cov.total}"
            never = "-" if cov.never_count is None else str(cov.never_count)
            out.append(
                f"<tr><td>{cov.run}</td><td>{cov.epoch}</td><td>{cov.consumed}{total} {_e(_plural(cov.unit))}</td>"
                f"<td>{len(cov.duplicates)}</td><td>{never}</td></tr>"
            )
        out.append("</table>")
        for cause in dict.fromkeys(cov.cause for cov in report.coverage if cov.cause):
            out.append(f'<p class="note">Coverage: {_e(cause)}.</p>')
    out.append("<h3>Measures</h3><table>")
    for label, value in report_rows(report):
        out.append(f"<tr><td>{_e(label)}</td><td>{_e(value)}</td></tr>")
    out.append("</table></section>")
    return "\n".join(out)


def timeline_svg(trace: Trace, report: Report) -> str | None:
    """The timeline as inline SVG: lanes, in flight, memory (None without matplotlib)."""
    try:
        from matplotlib import rc_context
        from matplotlib.backends.backend_svg import FigureCanvasSVG
        from matplotlib.figure import Figure
    except ImportError:
        return None
    lanes = _lanes(trace)
    height_lanes = 0.35 * (len(lanes) + 1) + 0.8
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "queuetune"}):
        figure = Figure(figsize=(11, height_lanes + 4.4))
        FigureCanvasSVG(figure)
        grid = figure.add_gridspec(3, 1, height_ratios=[height_lanes, 2.2, 1.6])
        lane_axes = figure.add_subplot(grid[0])
        flight = figure.add_subplot(grid[1], sharex=lane_axes)
        memory = figure.add_subplot(grid[2], sharex=lane_axes)
        _draw_lanes(lane_axes, trace, lanes)
        _draw_in_flight(flight, trace, report)
        _draw_memory(memory, trace)
        memory.set_xlabel("seconds since the loader was watched")
        figure.tight_layout()
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _lanes(trace: Trace) -> list[str]:
    first: dict[str, float] = {}
    for p in trace.produced:
        first.setdefault(p.worker, p.start)
    return sorted(first, key=lambda w: first[w])


def _draw_lanes(axes: Any, trace: Trace, lanes: list[str]) -> None:
    t0 = trace.start
    shown = lanes[: MAX_LANES - 1] if len(lanes) > MAX_LANES else lanes
    row = {worker: i + 1 for i, worker in enumerate(shown)}
    extra = len(lanes) - len(shown)
    bars: dict[int, list[tuple[float, float]]] = {}
    for p in trace.produced:
        bars.setdefault(row.get(p.worker, len(shown) + 1), []).append((p.start - t0, max(p.end - p.start, 1e-6)))
    raster = len(trace.produced) + 2 * len(trace.consumed) > MAX_VECTOR_BARS
    for y, spans in bars.items():
        axes.broken_barh(spans, (y - 0.4, 0.8), color="tab:blue", rasterized=raster)
    waits = [(c.requested - t0, max(c.consumed - c.requested, 1e-6)) for c in trace.consumed]
    steps = [
        (c.consumed - t0, max(n.requested - c.consumed, 1e-6))
        for c, n in zip(trace.consumed, trace.consumed[1:])
        if n.run == c.run
    ]
    axes.broken_barh(steps, (-0.4, 0.8), color="tab:green", rasterized=raster)
    axes.broken_barh(waits, (-0.4, 0.8), color="tab:red", rasterized=raster)
    labels = ["consumer (green: step, red: wait)", *[worker_name(w) for w in shown]]
    if extra:
        labels.append(f"{extra + 1} more workers")
    axes.set_yticks(range(len(labels)), labels, fontsize=8)
    axes.set_ylim(len(labels) - 0.5, -0.5)
    axes.set_title("builds per worker (blue) and the consumer", fontsize=10, loc="left")


def _draw_in_flight(axes: Any, trace: Trace, report: Report) -> None:
    series = report.series
    offset = report.series_start or 0.0
    times = [t + offset for t in series["t"]]
    axes.step(times, series["batches"], where="post", color="tab:blue", label="batches in flight")
    axes.set_ylabel("batches", color="tab:blue")
    depth = trace.meta.depth
    depths = [(m.t - trace.start, m.value) for m in trace.marks if m.kind == "depth"]
    if depths:
        axes.step(
            [t for t, _ in depths] + [trace.end - trace.start],
            [v for _, v in depths] + [depths[-1][1]],
            where="post",
            color="tab:blue",
            linestyle="--",
            alpha=0.6,
            label="depth (adaptive)",
        )
    elif depth:
        axes.axhline(depth, color="tab:blue", linestyle="--", alpha=0.6, label=f"depth {depth}")
    other = axes.twinx()
    budget = (trace.meta.settings or {}).get("max_bytes")
    budget = budget if isinstance(budget, int) and budget > 0 else None
    unit, scale = _unit(max([0, *series["bytes"], budget or 0]))
    other.step(times, [b / scale for b in series["bytes"]], where="post", color="tab:orange", alpha=0.7)
    other.set_ylabel(unit, color="tab:orange")
    if budget is not None:
        other.axhline(budget / scale, color="tab:orange", linestyle=":", label=f"budget {format_bytes(budget)}")
        other.legend(loc="upper right", fontsize=7)
    axes.legend(loc="upper left", fontsize=7)
    axes.set_title("built and not yet released: batches (blue) and bytes (orange)", fontsize=10, loc="left")


def _unit(peak: float) -> tuple[str, float]:
    """The binary unit that shows ``peak`` bytes best, and its size.

    >>> _unit(3 * 2**20), _unit(100)
    (('MiB', 1048576), ('B', 1))
    """
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if peak >= size:
            return unit, size
    return "B", 1


def _draw_memory(axes: Any, trace: Trace) -> None:
    if not trace.memory:
        axes.text(0.5, 0.5, "memory was not sampled", ha="center", va="center", transform=axes.transAxes)
        return
    t = [m.t - trace.start for m in trace.memory]
    axes.plot(t, [m.rss / 2**20 for m in trace.memory], color="tab:purple", label="process RSS")
    if any(m.children for m in trace.memory):
        axes.plot(t, [m.children / 2**20 for m in trace.memory], color="tab:gray", label="workers' unique memory")
    axes.set_ylabel("MiB")
    axes.legend(loc="upper left", fontsize=7)
    axes.set_title("memory", fontsize=10, loc="left")


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def ranks_html(report: RanksReport) -> str:
    """The table and the findings as an HTML fragment."""
    escape = html.escape
    head = "".join(f"<th>{c}</th>" for c in ("rank", "loader", "batches/s", "input wait", "median step", "verdict"))
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows(report))
    items = "".join(f"<li>{escape(line)}</li>" for line in findings(report))
    title = f"{report.world_size} ranks" + (f" of job {escape(report.job)}" if report.job else "")
    return (
        f'<section id="ranks"><h2>{title}</h2><table><tr>{head}</tr>{body}</table>'
        + (f"<ul>{items}</ul>" if items else "")
        + "</section>"
    )
