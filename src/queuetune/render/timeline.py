"""The timeline of one loader, drawn with matplotlib: one lane per worker (each
batch's build a bar), the consumer's lane with its steps and waits, batches and
bytes in flight over time with the depth or budget, and memory over time by
cause (:func:`timeline_figure`; :func:`timeline_svg` for the HTML report)."""

from __future__ import annotations

import io
import textwrap
from typing import TYPE_CHECKING, Any

import numpy as np

from ..analysis.in_flight import InFlight
from ..analysis.memory import Memory
from ..analysis.report import section_of
from ..analysis.timing import Timings
from ..common.units import format_bytes
from ..record.matching import Span, match, releases_of, runs_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..analysis.memory import MemoryUse
    from ..analysis.report import Report
    from ..record.trace import Trace

#: Lanes drawn one per worker; the workers after these share the last lane.
MAX_LANES = 16
#: Bars drawn as vectors up to this many; more are drawn as an image inside the SVG.
MAX_VECTOR_BARS = 4000


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
    _draw_in_flight(flight, trace, section_of(InFlight, report), section_of(Timings, report).batch_bytes.median)
    _draw_memory(memory, trace, section_of(Memory, report).memory)
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


def _draw_in_flight(axes: Any, trace: Trace, in_flight: InFlight, batch: float | None) -> None:
    """Batches and bytes in flight over time, with the depth or budget (``batch``: the median batch's bytes)."""
    series = in_flight.series
    offset = in_flight.series_start or 0.0
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


def _draw_memory(axes: Any, trace: Trace, use: MemoryUse | None) -> None:
    axes.set_title("memory", fontsize=10, loc="left")
    if not trace.memory:
        axes.text(0.5, 0.5, "memory was not sampled", ha="center", va="center", transform=axes.transAxes)
        axes.set_yticks([])
        return
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
