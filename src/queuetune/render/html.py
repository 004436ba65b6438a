"""One self-contained HTML report of one or more loaders: per loader a
timeline (one lane per worker, each batch's build a bar; the consumer's lane
with its steps and waits), batches and bytes in flight over time with the
depth or budget, memory over time, the verdict, the recommendation, the
coverage and every measure of the report. Figures are inline SVG drawn by
matplotlib; nothing is fetched from anywhere."""

from __future__ import annotations

import html
import io
import re
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..analysis.report import MODERATE
from ..common.units import format_bytes
from ..record.matching import Span, match, releases_of, runs_of
from .text import findings, report_rows, rows

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..analysis.ranks import RanksReport
    from ..analysis.report import Report
    from ..record.trace import Trace

#: Lanes drawn one per worker; the workers after these share the last lane.
MAX_LANES = 16
#: Bars drawn as vectors up to this many; more are drawn as an image inside the SVG.
MAX_VECTOR_BARS = 4000

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
    if report.input_bound_fraction is not None:
        out.append(
            f'<p class="verdict">Steady state: the consumer waited for input '
            f"{report.input_bound_fraction:.1%} of the time: <strong>{_e(report.verdict)}</strong>."
            f"{_handover(report)}</p>"
        )
    if section.recommendation:
        out.append(f'<p class="recommendation">Recommendation: {_code(section.recommendation)}</p>')
    figure = timeline_svg(section.trace, report)
    if figure is None:
        out.append("<p class=\"note\">Figures need matplotlib: pip install 'queuetune[plot]'.</p>")
    else:
        out.append(f'<figure class="timeline">{figure}<figcaption>{_caption(section.trace)}</figcaption></figure>')
    if report.coverage:
        out.append("<h3>Coverage</h3><table><tr><th>run</th><th>epoch</th><th>consumed</th>")
        out.append("<th>more than once</th><th>never</th></tr>")
        for cov in report.coverage:
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
        for cause in dict.fromkeys(cov.cause for cov in report.coverage if cov.cause):
            out.append(f'<p class="note">Coverage: {_code(cause)}.</p>')
        for cov in report.coverage:
            if cov.partial:
                out.append(
                    f'<p class="note">Coverage partial in run {cov.run} epoch {cov.epoch}: '
                    f"{cov.unkeyed} of {cov.batches} batches not keyed, left out of its counts.</p>"
                )
    out.append('<h3>Measures</h3><table class="measures">')
    for label, value in report_rows(report):
        out.append(f"<tr><td>{_e(label)}</td><td>{_code(value)}</td></tr>")
    out.append("</table></section>")
    return "\n".join(out)


def timeline_svg(trace: Trace, report: Report) -> str | None:
    """The timeline as inline SVG: lanes, in flight, memory (None without matplotlib)."""
    try:
        from matplotlib import rc_context
    except ImportError:
        return None
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "queuetune"}):
        figure = timeline_figure(trace, report)
        if figure is None:
            return None
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def timeline_figure(trace: Trace, report: Report) -> Figure | None:
    """The timeline as a matplotlib figure (None without matplotlib): a lane per
    worker and the consumer's lane, batches and bytes in flight with the depth,
    memory; each panel's legend to its right, clear of the data. The consumer's
    lane is drawn per pixel column, a column's height split by the share of its
    time spent on each of :data:`CONSUMER` (:func:`consumer_shares`)."""
    try:
        from matplotlib.backends.backend_svg import FigureCanvasSVG
        from matplotlib.figure import Figure
    except ImportError:
        return None
    names = worker_lanes(trace)
    lanes = list(dict.fromkeys(names.values()))
    height_lanes = 0.35 * (len(lanes) + 2) + 0.8
    figure = Figure(figsize=(11, height_lanes + 4.4))
    FigureCanvasSVG(figure)
    grid = figure.add_gridspec(3, 1, height_ratios=[height_lanes, 2.2, 1.6])
    lane_axes = figure.add_subplot(grid[0])
    flight = figure.add_subplot(grid[1], sharex=lane_axes)
    memory = figure.add_subplot(grid[2], sharex=lane_axes)
    span = max(trace.end - trace.start, 1e-6)
    lane_axes.set_xlim(-0.01 * span, 1.01 * span)
    shown = _draw_lanes(lane_axes, trace, names, lanes)
    _draw_in_flight(flight, trace, report)
    _draw_memory(memory, trace, report)
    memory.set_xlabel("seconds since the loader was watched")
    figure.tight_layout()
    # Now that the layout is fixed: one column of the consumer's lane per pixel of
    # the lane's width, as a browser shows the SVG at its natural size (96 px an inch).
    left, right = lane_axes.get_xlim()
    columns = max(1, round(lane_axes.get_position().width * figure.get_figwidth() * 96))
    edges = np.linspace(left, right, columns + 1)
    _draw_consumer(lane_axes, consumer_shares(trace, edges + trace.start), edges, shown)
    lane_axes.set_xlim(left, right)
    return figure


#: The consumer's time, as its lane shows it (bottom up), with each part's colour:
#: waiting for a batch not yet built, waiting for the hand-over of a batch already
#: built (the pipe, unpickling, a copy), and its step (the time it kept a batch).
CONSUMER = {
    "waiting for a batch not yet built": "tab:red",
    "waiting for the hand-over of a batch already built": "#ff9896",
    "step (the model has the batch)": "tab:green",
}
_BUILD_COLOUR = "tab:blue"
#: Where each panel's legend starts, in the panel's width: past its right axis.
_LEGEND_X = 1.075


def consumer_shares(trace: Trace, edges: Any) -> dict[str, Any]:
    """For each interval between consecutive ``edges`` (times on the trace's clock),
    the share of it the consumer spent on each part of :data:`CONSUMER`, as arrays
    of ``len(edges) - 1`` fractions (together at most 1; the rest, outside any
    run, is left blank). A request's wait is split at the end of its batch's
    build (where the build was seen apart from the request): before it the
    consumer waited for the build, after it for the hand-over. The shares are
    exact time averages, so a run that waits 0.2 % of its time has 0.2 % of its
    lane red however thin each wait is.

    >>> from queuetune.record.trace import Consumed, Mark, Produced, Trace
    >>> t = Trace(produced=[Produced(0.0, 0.5, 1, key=0)], consumed=[Consumed(0.0, 1.0, key=0)],
    ...           marks=[Mark(0.0, "run_begin", 0), Mark(2.0, "run_end", 0)], end=2.0)
    >>> [share.round(2).tolist() for share in consumer_shares(t, [0.0, 0.5, 1.0, 2.0]).values()]
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    edges = np.asarray(edges, dtype=float)
    runs = runs_of(trace)
    releases = releases_of(trace.consumed, runs, trace.end)
    matches = match(trace, runs).consumed
    starved, handed, steps = [], [], []
    for c, j, release in zip(trace.consumed, matches, releases):
        requested, consumed = c.requested, max(c.consumed, c.requested)
        built = trace.produced[j].end if j is not None else consumed
        split = min(max(built, requested), consumed)
        starved.append((requested, split))
        handed.append((split, consumed))
        if release is not None:
            steps.append((consumed, max(release, consumed)))
    widths = np.maximum(np.diff(edges), 1e-12)
    shares = [_time_in(spans, edges) / widths for spans in (starved, handed, steps)]
    total = np.maximum(1.0, shares[0] + shares[1] + shares[2])  # overlapping records never exceed the lane
    return {name: np.clip(share / total, 0.0, 1.0) for name, share in zip(CONSUMER, shares)}


def _time_in(spans: list[tuple[float, float]], edges: Any) -> Any:
    """The time the (non-overlapping) ``spans`` cover between consecutive ``edges``."""
    if not spans:
        return np.zeros(len(edges) - 1)
    ordered = np.array(sorted(spans), dtype=float)
    begins, lengths = ordered[:, 0], np.maximum(ordered[:, 1] - ordered[:, 0], 0.0)
    before = np.concatenate([[0.0], np.cumsum(lengths)])
    # Time covered up to each edge: every span that began before it, the last one in part.
    k = np.searchsorted(begins, edges, side="right")
    last = np.maximum(k - 1, 0)
    partial = np.where(k > 0, np.clip(edges - begins[last], 0.0, lengths[last]), 0.0)
    covered = before[last] * (k > 0) + partial
    return np.diff(covered)


def worker_lanes(trace: Trace) -> dict[str, str]:
    """Each worker of the trace and the name of its lane, lanes in the order they
    first build: within each run, the workers that first build in it are numbered
    in the order of their first batch (``worker 0``, ``worker 1``; threads
    ``thread 0``...; a Ray worker ``worker 0 on node a``), and the same number in
    every run is the same lane, so two workers started afresh each epoch are two
    lanes, not four. A worker's pid or thread id names none of them.

    >>> from queuetune.record.trace import Mark, Produced, Trace
    >>> marks = [Mark(0.0, "run_begin", 0), Mark(1.0, "run_end", 0), Mark(2.0, "run_begin", 1)]
    >>> pids = ["901", "902", "901", "944", "943"]
    >>> trace = Trace(produced=[Produced(t, t + 0.1, 8, worker=w) for t, w in zip([0, 0.1, 0.5, 2, 2.1], pids)],
    ...               marks=marks, end=3.0)
    >>> worker_lanes(trace)
    {'901': 'worker 0', '902': 'worker 1', '944': 'worker 0', '943': 'worker 1'}
    """
    first: dict[str, float] = {}
    for p in trace.produced:
        first[p.worker] = min(first.get(p.worker, p.start), p.start)
    spans = sorted(runs_of(trace).values())
    numbered: dict[tuple[int, str], int] = {}
    names: dict[str, str] = {}
    for worker in sorted(first, key=lambda w: first[w]):
        run = _run_at(spans, first[worker])
        kind, name = _kind(worker)
        number = numbered[run, kind] = numbered.get((run, kind), -1) + 1
        names[worker] = name.format(number)
    return names


def _run_at(spans: list[Span], t: float) -> int:
    """The run a build at ``t`` serves: the run under way, else the next to begin, else the last."""
    for i, span in enumerate(spans):
        if t <= span.end:
            return i
    return max(len(spans) - 1, 0)


def _kind(worker: str) -> tuple[str, str]:
    """What a worker is, and the pattern of its name (``{}``: its number)."""
    if not worker:
        return "consumer", "the consumer's thread"
    if worker.startswith("thread-"):
        return "thread", "thread {}"
    node, colon, _ = worker.rpartition(":")
    if colon:
        return f"node {node}", "worker {} on node " + node.replace("{", "{{").replace("}", "}}")
    return "process", "worker {}"


def _draw_lanes(axes: Any, trace: Trace, names: dict[str, str], lanes: list[str]) -> list[str]:
    """The workers' builds, a lane each; returns the lanes' labels, the consumer's first."""
    t0 = trace.start
    shown = lanes[: MAX_LANES - 1] if len(lanes) > MAX_LANES else lanes
    row = {lane: i + 1 for i, lane in enumerate(shown)}
    extra = len(lanes) - len(shown)
    bars: dict[int, list[tuple[float, float]]] = {}
    for p in trace.produced:
        y = row.get(names[p.worker], len(shown) + 1)
        bars.setdefault(y, []).append((p.start - t0, max(p.end - p.start, 1e-6)))
    raster = len(trace.produced) > MAX_VECTOR_BARS
    # A thin white edge tells back-to-back builds apart, where a build is a few pixels
    # wide (the lanes are some 650 pixels wide); narrower, the edge would hide it.
    builds = sorted(p.end - p.start for p in trace.produced)
    wide = bool(builds) and builds[len(builds) // 2] * 650 / max(trace.end - trace.start, 1e-9) > 4
    edges = {"edgecolor": "white", "linewidth": 0.5} if wide else {"linewidth": 0}
    for y, spans in bars.items():
        axes.broken_barh(spans, (y - 0.4, 0.8), color=_BUILD_COLOUR, rasterized=raster, **edges)
    labels = ["consumer", *shown]
    if extra:
        labels.append(f"{extra + 1} more workers")
    axes.set_yticks(range(len(labels)), labels, fontsize=8)
    axes.set_ylim(len(labels) - 0.5, -0.5)
    title = "builds, a lane per worker, and the consumer"
    workers = len(names)
    if workers > len(lanes):
        title += f" ({workers} workers in {len(lanes)} lanes: the same number in each run shares a lane)"
    axes.set_title(title, fontsize=10, loc="left")
    return labels


def _draw_consumer(axes: Any, shares: dict[str, Any], edges: Any, labels: list[str]) -> None:
    """The consumer's lane (row 0, bottom up): per column, its shares of :data:`CONSUMER`."""
    from matplotlib.patches import Patch

    bottom = np.full(len(edges) - 1, 0.4)  # the lane's bottom: y grows downwards
    handles = [Patch(color=_BUILD_COLOUR, label="a worker building a batch")]
    for name, colour in CONSUMER.items():
        share = shares[name]
        top = bottom - 0.8 * share
        if share.any():
            axes.fill_between(
                edges, np.append(bottom, bottom[-1]), np.append(top, top[-1]), step="post", color=colour, lw=0
            )
            handles.append(Patch(color=colour, label=_wrap(f"consumer: {name}")))
        bottom = top
    axes.legend(handles=handles, **_legend_style())
    axes.set_yticks(range(len(labels)), labels, fontsize=8)


def _draw_in_flight(axes: Any, trace: Trace, report: Report) -> None:
    series = report.series
    offset = report.series_start or 0.0
    times = [t + offset for t in series["t"]]
    end = trace.end - trace.start
    other = axes.twinx()
    # The batches' line in front of the bytes' area: the twin is drawn first, and the
    # area stays visible where the two coincide (batches of one size).
    axes.set_zorder(other.get_zorder() + 1)
    axes.patch.set_visible(False)
    budget = (trace.meta.settings or {}).get("max_bytes")
    budget = budget if isinstance(budget, int) and budget > 0 else None
    unit, scale = _unit(max([0, *series["bytes"], budget or 0]))
    scaled = [b / scale for b in series["bytes"]]
    other.fill_between(
        times, scaled, step="post", color="tab:orange", alpha=0.3, lw=0, label=f"{unit} in flight (right)"
    )
    other.set_ylabel(unit, color="tab:orange")
    other.set_ylim(bottom=0)
    if budget is not None:
        label = f"budget (max_bytes): {format_bytes(budget)}"
        other.axhline(budget / scale, color="tab:orange", linestyle=":", label=label)
    axes.step(times, series["batches"], where="post", color="tab:blue", lw=1.5, label="batches in flight (left)")
    axes.set_ylabel("batches", color="tab:blue")
    depths = [(m.t - trace.start, m.value) for m in trace.marks if m.kind == "depth"]
    depth = trace.meta.depth
    if depths:
        axes.step(
            [t for t, _ in depths] + [end],
            [v for _, v in depths] + [depths[-1][1]],
            where="post",
            color="tab:blue",
            linestyle="--",
            alpha=0.7,
            label=_wrap("depth: the most batches the Prefetcher let itself build ahead, as it adapted"),
        )
    elif depth:
        axes.axhline(
            depth,
            color="tab:blue",
            linestyle="--",
            alpha=0.7,
            label=_wrap(f"depth {depth}: the most batches the settings let the loader build ahead"),
        )
    # The two axes to one scale, a batch of the median size on the left level with its
    # bytes on the right: the bytes' area then meets the batches' line where batches are
    # of one size, and stands above or below it where they are larger or smaller.
    peak = max([0, *series["batches"], depth or 0, *(v for _, v in depths)])
    batch = report.batch_bytes.median
    if batch:
        peak = max(peak, *(b / batch for b in series["bytes"]), (budget or 0) / batch)
    top = peak * 1.15 + 0.5
    axes.set_ylim(0, top)
    if batch:
        other.set_ylim(0, top * batch / scale)
    handles, labels = axes.get_legend_handles_labels()
    more, more_labels = other.get_legend_handles_labels()
    axes.legend(handles + more, labels + more_labels, **_legend_style())
    axes.set_title("in flight: built and not yet released by the consumer", fontsize=10, loc="left")


def _unit(peak: float) -> tuple[str, float]:
    """The binary unit that shows ``peak`` bytes best, and its size.

    >>> _unit(3 * 2**20), _unit(100)
    (('MiB', 1048576), ('B', 1))
    """
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if peak >= size:
            return unit, size
    return "B", 1


#: The memory panel's causes, bottom to top, with their colours.
CAUSES = (
    ("consumer", "the consumer (and pages workers share with it)", "#c7c7c7"),
    ("worker_baseline", "workers' baseline", "#9edae5"),
    ("worker_growth", "workers' growth since", "#e377c2"),
    ("shared_beyond", "shared memory beyond in flight", "#bcbd22"),
    ("in_flight", "batches in flight (the queue)", "#ff7f0e"),
)


def _draw_memory(axes: Any, trace: Trace, report: Report) -> None:
    axes.set_title("memory", fontsize=10, loc="left")
    if not trace.memory:
        axes.text(0.5, 0.5, "memory was not sampled", ha="center", va="center", transform=axes.transAxes)
        axes.set_yticks([])
        return
    use = report.memory
    if use is not None and len(use.series) >= 2:
        # The tree's real memory (PSS and its shared memory), stacked by cause.
        axes.set_title("memory as the kernel counts it, by cause", fontsize=10, loc="left")
        when = [c.t for c in use.series]
        layers = [[getattr(c, name) / 2**20 for c in use.series] for name, _, _ in CAUSES]
        axes.stackplot(
            when,
            layers,
            labels=[label for _, label, _ in CAUSES],
            colors=[colour for _, _, colour in CAUSES],
            step="post",
            alpha=0.85,
        )
    t = [m.t - trace.start for m in trace.memory]
    axes.plot(t, [m.rss / 2**20 for m in trace.memory], color="tab:purple", label="the process's RSS")
    if any(m.children for m in trace.memory):
        axes.plot(t, [m.children / 2**20 for m in trace.memory], color="tab:gray", label="workers' unique memory")
    axes.set_ylabel("MiB")
    axes.set_ylim(bottom=0)
    axes.legend(**_legend_style())


def _legend_style() -> dict[str, Any]:
    """Every panel's legend: to the right of the panel, past its right axis, clear of the data."""
    return {
        "loc": "upper left",
        "bbox_to_anchor": (_LEGEND_X, 1.0),
        "borderaxespad": 0.0,
        "fontsize": 8,
        "frameon": False,
    }


def _wrap(label: str, width: int = 34) -> str:
    """A legend's label on lines of at most ``width`` characters."""
    return "\n".join(textwrap.wrap(label, width, break_on_hyphens=False)) or label


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _code(text: Any) -> str:
    """Escaped text, with what notes and advice mark as code (between backticks) in ``<code>``.

    >>> _code("run `queuetune tune` <now>")
    'run <code>queuetune tune</code> &lt;now&gt;'
    """
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


def _handover(report: Report) -> str:
    """The sentence on the waits for batches already built, where they are 5 % of the steady state or more
    (where a wait for builds would be moderately input-bound)."""
    handed, steady = report.steady_handover_seconds, report.steady_seconds
    if not report.handover_seen or not handed or not steady or handed / steady < MODERATE:
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
