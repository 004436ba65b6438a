"""Figures drawn with matplotlib (an optional dependency), returned for the caller
to save (``figure.savefig(path)``: the format follows the file name's extension):
the seed table as a heatmap, a report's batches and bytes in flight over time,
the tuner's prediction against its trials."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from queuetune.analysis.in_flight import InFlight
from queuetune.analysis.report import section_of
from queuetune.analysis.timing import Timings
from queuetune.common.units import format_number

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from queuetune.analysis.report import Report
    from queuetune.tune import TuneResult

__all__ = ["plot_in_flight", "plot_table", "plot_tune"]


def plot_table(table: dict[str, Any]) -> Figure:
    """``table`` (from :func:`queuetune.estimate.memory.seed_table`) as a heatmap.

    The colour scale is logarithmic because the values span several orders of
    magnitude. Needs matplotlib: ``pip install 'queuetune[plot]'``.

    >>> import tempfile, pathlib
    >>> from queuetune.estimate.memory import seed_table
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "table.png"
    >>> plot_table(seed_table()).savefig(out)
    >>> out.read_bytes()[:4]
    b'\\x89PNG'
    """
    Figure = _figure_class()
    from matplotlib.colors import LogNorm

    values = table["values"]
    sizes, batches = table["sizes"], table["batches"]
    figure = Figure(figsize=(1.4 * len(sizes) + 2.5, 0.45 * len(batches) + 2))
    axes = figure.add_subplot()
    image = axes.imshow(values, cmap="viridis", norm=LogNorm(), aspect="auto")
    axes.set_xticks(range(len(sizes)), [f"{size}x{size}" for size in sizes])
    axes.set_yticks(range(len(batches)), [str(batch) for batch in batches])
    axes.set_xlabel("image size")
    axes.set_ylabel("batch size")
    axes.set_title(f"{table['dtype']} input batch, {table['channels']} channel(s), {table['unit']}")
    low, high = cast(float, image.norm.vmin), cast(float, image.norm.vmax)  # set by LogNorm from the values
    middle = (low * high) ** 0.5
    for row, row_values in enumerate(values):
        for column, value in enumerate(row_values):
            colour = "black" if value > middle else "white"
            axes.text(column, row, format_number(value), ha="center", va="center", fontsize=7, color=colour)
    figure.colorbar(image, ax=axes, label=table["unit"])
    figure.tight_layout()
    return figure


def plot_in_flight(report: Report) -> Figure:
    """A report's batches (left axis) and MiB (right axis) in flight over time.

    >>> import tempfile, pathlib
    >>> from queuetune.analysis.report import analyze
    >>> from queuetune.record.trace import Trace, Produced, Consumed
    >>> r = analyze(Trace(produced=[Produced(0, 1, 2**20)], consumed=[Consumed(0, 1)], end=2))
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "flight.png"
    >>> plot_in_flight(r).savefig(out)
    >>> out.read_bytes()[:4]
    b'\\x89PNG'
    """
    Figure = _figure_class()
    in_flight = section_of(InFlight, report)
    series = in_flight.series
    figure = Figure(figsize=(10, 4))
    axes = figure.add_subplot()
    other = axes.twinx()
    # The batches' line in front of the bytes' area, both axes to one scale (a batch of
    # the median size level with its bytes): batches of one size leave the area's top
    # under the line, both visible.
    axes.set_zorder(other.get_zorder() + 1)
    axes.patch.set_visible(False)
    mib = [b / 2**20 for b in series["bytes"]]
    other.fill_between(
        series["t"], mib, step="post", color="tab:orange", alpha=0.3, lw=0, label="MiB in flight (right)"
    )
    axes.step(series["t"], series["batches"], where="post", color="tab:blue", lw=1.5, label="batches in flight (left)")
    axes.set_xlabel("seconds since the first batch was built")
    axes.set_ylabel("batches in flight", color="tab:blue")
    other.set_ylabel("MiB in flight", color="tab:orange")
    batch = section_of(Timings, report).batch_bytes.median
    peak = max([0.0, *series["batches"], *((b / batch) for b in series["bytes"] if batch)])
    top = peak * 1.15 + 0.5
    axes.set_ylim(0, top)
    other.set_ylim(0, top * batch / 2**20 if batch else None)
    handles, labels = axes.get_legend_handles_labels()
    more, more_labels = other.get_legend_handles_labels()
    # To the right of the plot, past its right axis: clear of the data.
    axes.legend(
        handles + more,
        labels + more_labels,
        loc="upper left",
        bbox_to_anchor=(1.1, 1.0),
        borderaxespad=0.0,
        fontsize=8,
        frameon=False,
    )
    name = report.meta.name or report.meta.type or report.meta.loader or "loader"
    axes.set_title(f"{name}: peak {in_flight.peak_in_flight_batches} batches in flight")
    figure.tight_layout()
    return figure


def _figure_class() -> type[Figure]:
    """matplotlib's Figure on an Agg canvas: no pyplot, so the caller's backend is left alone."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(f"plotting needs matplotlib: pip install 'queuetune[plot]' ({exc})") from None

    class AggFigure(Figure):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            FigureCanvasAgg(self)

    return AggFigure


def plot_tune(result: TuneResult) -> Figure:
    """Throughput (top) and peak in-flight memory (bottom) against depth:
    the model's prediction as lines, the measured trials as points."""
    Figure = _figure_class()
    figure = Figure(figsize=(8, 6))
    rate, memory = figure.subplots(2, 1, sharex=True)
    by_workers: dict[int, list[Any]] = {}
    for p in result.predictions:
        by_workers.setdefault(p.workers, []).append(p)
    for workers, rows in sorted(by_workers.items()):
        rows = sorted(rows, key=lambda r: r.depth)
        depths = [r.depth for r in rows]
        rate.plot(depths, [r.throughput for r in rows], label=f"predicted, {workers} worker(s)")
        memory.plot(depths, [r.peak_built_bytes / 2**20 for r in rows], label=f"predicted, {workers} worker(s)")
    measured = result.trials
    rate.scatter(
        [t.depth for t in measured], [t.throughput for t in measured], color="black", s=12, label="measured trials"
    )
    memory.scatter(
        [t.depth for t in measured],
        [t.peak_in_flight_bytes / 2**20 for t in measured],
        color="black",
        s=12,
        label="measured trials",
    )
    if result.chosen is not None:
        for axes in (rate, memory):
            axes.axvline(result.chosen.depth, color="tab:green", linestyle="--", label="chosen")
    rate.set_ylabel("batches / s")
    memory.set_ylabel("peak MiB in flight")
    memory.set_xlabel("depth (batches being built or ready)")
    rate.set_title(f"queuetune tune: {result.framework}")
    rate.legend(fontsize=7)
    memory.legend(fontsize=7)
    figure.tight_layout()
    return figure
