"""The terminal's format: each of queuetune's results as rich tables and lines of
text, returned for the caller to print (:mod:`queuetune.terminal` prints them):
a probe's report, a batch and a loader's footprint, the seed table, several
ranks side by side, the demo, the tuner's trials and decision, what
``queuetune run`` found, and ``queuetune doctor``'s lines."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from ..common.units import format_bytes, format_number, format_seconds
from ..estimate.memory import BatchSpec, Footprint
from ..prefetch.shm.files import PoolFiles
from .explain import explain
from .measures import report_rows, shown_seconds

if TYPE_CHECKING:
    from ..analysis.ranks import RanksReport
    from ..analysis.report import Report
    from ..estimate.experiment import DemoResult
    from ..record.trace import TraceMeta
    from ..run.result import ProgramResult
    from ..tune import TuneResult


# --- a probe's report -------------------------------------------------------------------


def report_table(report: Report) -> Table:
    """The report as a rich Table: one row per measure."""
    table = Table(title=_title(report.meta), show_header=False, title_justify="left")
    table.add_column("measure", style="bold")
    table.add_column("value")
    for label, value in report_rows(report):
        table.add_row(label, value)
    return table


def _title(meta: TraceMeta) -> str:
    settings = meta.settings or {}
    described = ", ".join(f"{k}={v}" for k, v in settings.items())
    name = meta.name or meta.type or meta.loader or "loader"
    if meta.rank is not None:
        name = f"rank {meta.rank} of {meta.world_size}: {name}"
    return f"queuetune: {name} ({meta.framework or '?'}{', ' + described if described else ''})"


def worker_name(worker: str) -> str:
    """A trace's worker in words: ``thread-7`` is thread 7, a pid a process.

    >>> worker_name("thread-7"), worker_name("4121"), worker_name("")
    ('thread 7', 'process 4121', "the consumer's thread")
    """
    if worker.startswith("thread-"):
        return f"thread {worker[7:]}"
    return f"process {worker}" if worker else "the consumer's thread"


# --- the estimate: a batch, a footprint, the seed table -------------------------------


def seed_table_view(table: dict[str, Any]) -> Table:
    """The table of :func:`queuetune.estimate.memory.seed_table`, values as the article prints them.

    >>> from queuetune.estimate.memory import seed_table
    >>> seed_table_view(seed_table()).row_count
    12
    """
    title = f"{table['dtype']}, {table['channels']} channel(s), {table['unit']} per batch"
    view = Table(title=title)
    view.add_column("batch", justify="right", no_wrap=True)
    for size in table["sizes"]:
        view.add_column(f"{size}x{size}", justify="right", no_wrap=True)
    for batch, row in zip(table["batches"], table["values"]):
        view.add_row(str(batch), *(format_number(value) for value in row))
    return view


def batch_table(spec: BatchSpec) -> Table:
    """One row per input (and labels) of a batch, with a total row.

    >>> batch_table(BatchSpec.single("2x2", 3)).row_count
    2
    """
    view = Table(title=f"batch of {spec.batch_size}", show_footer=False)
    view.add_column("item")
    view.add_column("shape", no_wrap=True)
    view.add_column("dtype")
    view.add_column("bytes", justify="right", no_wrap=True)
    view.add_column("size", justify="right", no_wrap=True)
    lines = spec.lines()
    for index, (name, shape, dtype, nbytes) in enumerate(lines):
        view.add_row(
            name,
            "x".join(map(str, shape)),
            dtype,
            f"{nbytes:,}",
            format_bytes(nbytes),
            end_section=index == len(lines) - 1,
        )
    total = spec.nbytes
    view.add_row("total", "", "", f"{total:,}", format_bytes(total), style="bold")
    return view


def footprint_table(fp: Footprint) -> Table:
    """One row per line of a footprint (batches, bytes, why) and a total row.

    >>> from queuetune.estimate.memory import footprint
    >>> footprint_table(footprint(100, "tfdata", buffer=2)).row_count
    3
    """
    settings = ", ".join(f"{name}={value}" for name, value in fp.settings.items())
    title = f"footprint: {fp.framework}" + (f" ({settings})" if settings else "")
    view = Table(title=title)
    view.add_column("item")
    view.add_column("batches", justify="right", no_wrap=True)
    view.add_column("bytes", justify="right", no_wrap=True)
    view.add_column("size", justify="right", no_wrap=True)
    view.add_column("why")
    for index, line in enumerate(fp.lines):
        view.add_row(
            line.label,
            f"{line.batches:g}",
            f"{line.bytes:,}",
            format_bytes(line.bytes),
            line.explanation,
            end_section=index == len(fp.lines) - 1,
        )
    total = fp.total_bytes
    view.add_row("total", f"{fp.total_batches:g}", f"{total:,}", format_bytes(total), "", style="bold")
    return view


# --- several ranks ---------------------------------------------------------------------


def ranks_table(report: RanksReport) -> Table:
    """One row per rank and loader."""
    table = Table(title=f"queuetune: {report.world_size} ranks" + (f" of job {report.job}" if report.job else ""))
    for column in ("rank", "loader", "batches/s", "input wait (steady)", "median step", "verdict"):
        table.add_column(column, justify="right" if column in ("rank", "batches/s") else "left")
    for row in rows(report):
        table.add_row(*row)
    return table


def rows(report: RanksReport) -> list[tuple[str, ...]]:
    """The table's cells, as text."""
    out: list[tuple[str, ...]] = []
    for rank in report.ranks:
        for loader in rank.loaders:
            rate = "-" if loader.batches_per_second is None else f"{loader.batches_per_second:.1f}"
            wait = "-"
            if loader.input_wait_fraction is not None and loader.input_wait_seconds is not None:
                wait = f"{loader.input_wait_fraction:.1%} ({format_seconds(loader.input_wait_seconds)})"
            step = shown_seconds(loader.step_median_seconds)
            out.append((str(rank.rank), loader.loader, rate, wait, step, loader.verdict))
    return out


def findings(report: RanksReport) -> list[str]:
    """The merged report's sentences: missing ranks, stragglers, coverage, order."""
    lines = []
    if report.missing_ranks:
        missing = ", ".join(map(str, report.missing_ranks))
        lines.append(f"no trace of rank {missing} (of {report.world_size}): the report covers the others")
    for loader in report.loaders:
        if loader.straggler is not None:
            lines.append(f"{loader.loader}: straggler: {loader.straggler.text}")
        for cov in loader.coverage:
            where = f"{loader.loader}: run {cov.run} epoch {cov.epoch}"
            if cov.seen_by_several:
                shown = ", ".join(map(str, cov.examples[:10])) + (" …" if cov.seen_by_several > 10 else "")
                text = f"{where}: {cov.seen_by_several} of {cov.items} samples read by more than one rank ({shown})"
                lines.append(text + (f"; {cov.cause}" if cov.cause else ""))
            else:
                lines.append(f"{where}: {cov.items} samples, each read by one rank")
        if loader.same_order_ranks:
            ranks = ", ".join(map(str, loader.same_order_ranks))
            lines.append(
                f"{loader.loader}: rank {ranks}: every epoch came in the same shuffled order: "
                "call sampler.set_epoch(epoch) before each epoch"
            )
        lines.extend(f"{loader.loader}: {note}" for note in loader.notes)
    return lines


def demo_text(result: DemoResult) -> list[RenderableType]:
    """The article's experiment as the article told it: the setting, what reached
    the model against what the loader built, the footprint, the article's
    figures, one sentence of advice."""
    out: list[RenderableType] = [
        f"queuetune demo: Keras {result.keras} ({result.backend} backend), "
        f"{result.model} ({result.step_ms:g} ms a step), batch {result.batch_size}, predict(steps={result.steps}); "
        f"one batch = {format_bytes(result.batch_bytes)}"
    ]
    table = Table()
    table.add_column("loader")
    for column in (
        "reached the model",
        "built by the loader",
        "never used",
        "peak in flight",
        "estimated",
        "first batch",
        "input wait",
    ):
        table.add_column(column, justify="right")
    for run in result.runs:
        fraction = run.input_bound_fraction
        first = run.first_batch_seconds
        table.add_row(
            run.label,
            f"{run.consumed_samples} ({run.consumed_batches})",
            f"{run.produced_samples} ({run.produced_batches})",
            f"{run.read_ahead_batches}",
            f"{run.peak_in_flight_batches} ({format_bytes(run.peak_in_flight_bytes)})",
            f"{run.estimated_batches} ({format_bytes(run.estimated_footprint_bytes)})",
            shown_seconds(first),
            "-" if fraction is None else f"{fraction:.0%}",
        )
    out.append(table)
    article = result.article
    built = ", ".join(f"{v} at {k}" for k, v in article.built_samples.items())
    out.append(
        "samples (batches); peak in flight = built and not yet released by the model, "
        "estimated = queuetune estimate for those settings; input wait = of the steady "
        "state, after the first batch"
    )
    out.append(
        f"The article ({article.source}): {article.reached_model_samples} samples reached "
        f"the model; the generator built {built}."
    )
    out.append(f"Advice: {result.advice}")
    return out


def tune_text(result: TuneResult) -> list[RenderableType]:
    """The tuner's trials as a table, its decision and the reasons (:func:`.explain.explain`)."""
    table = Table(title=f"queuetune tune: {result.framework}", title_justify="left")
    table.add_column("setting")
    for column in ("batches/s", "predicted", "peak in flight", "peak RSS", "input wait", "trials"):
        table.add_column(column, justify="right")
    for c in result.candidates:
        mark = " *" if result.chosen is not None and c.settings == result.chosen.settings else ""
        table.add_row(
            c.label() + (" (default)" if c.is_default else "") + mark,
            f"{c.throughput:.1f}",
            "-" if c.predicted_throughput is None else f"{c.predicted_throughput:.1f}",
            f"{c.peak_in_flight_batches} ({format_bytes(c.peak_in_flight_bytes)})",
            "-" if c.peak_rss_bytes is None else format_bytes(c.peak_rss_bytes),
            "-" if c.input_bound_fraction is None else f"{c.input_bound_fraction:.0%}",
            str(c.trials),
        )
    out: list[RenderableType] = [table, *explain(result)]
    if result.chosen is not None:
        out.append(f"Use: {result.kwargs()}")
    return out


#: What ``queuetune run`` watches, for the line that says none was seen.
WATCHED_KINDS = (
    "torch DataLoader, Keras PyDataset or generator in fit/evaluate/predict, tf.data Dataset, Ray Data Dataset, "
    "queuetune Prefetcher"
)


def program_text(result: ProgramResult) -> list[RenderableType]:
    """What ``queuetune run`` found: each loader's report with its verdict and
    recommendation, where its trace went, and the loaders left alone (tables,
    and lines of text)."""
    out: list[RenderableType] = []
    for loader in result.loaders:
        out.append(Text(loader.headline.text(), style="bold"))
        out.append(report_table(loader.report))
        out.append(f"recommendation: {loader.recommendation.text()}")
        out.append(f"trace: {loader.trace_path}")
        out.append("")
    out.extend(f"queuetune: left alone a {kind}: {why}" for kind, why in result.left_alone.items())
    if result.html is not None:
        out.append(f"HTML report: {result.html}")
    if result.summary is not None:
        out.append(f"JSON summary: {result.summary}")
    if not result.loaders:
        out.append(f"queuetune: no loader was iterated (watched: {WATCHED_KINDS})")
    return out


def ranks_text(report: RanksReport) -> list[RenderableType]:
    """The table of several ranks, then its :func:`findings`."""
    return [ranks_table(report), *findings(report)]


# --- queuetune doctor ------------------------------------------------------------------


def shm_lines(found: list[PoolFiles], removed: list[PoolFiles], dry_run: bool) -> list[str]:
    """A line per pool of shared-memory files, then a summary.

    >>> live = PoolFiles("queuetune-7-ab-", 7, ("queuetune-7-ab-lock",), 0, orphaned=False)
    >>> gone = PoolFiles("queuetune-9-cd-", 9, ("queuetune-9-cd-1", "queuetune-9-cd-lock"), 2 << 20, orphaned=True)
    >>> print("\\n".join(shm_lines([live, gone], [gone], dry_run=False)))
    pid 7 (queuetune-7-ab-*): 1 file, 0 B, in use
    pid 9 (queuetune-9-cd-*): 2 files, 2.0 MiB, orphaned: removed
    removed 2 files (2.0 MiB) of 1 orphaned pool
    """
    gone = {pool.prefix for pool in removed}
    lines = []
    for pool in found:
        state = "in use"
        if pool.orphaned:
            state = "orphaned: would remove" if dry_run else "orphaned: removed"
            if not dry_run and pool.prefix not in gone:
                state = "orphaned: removed meanwhile by another process"
        count = len(pool.files)
        lines.append(
            f"pid {pool.owner} ({pool.prefix}*): {count} file{'s' * (count != 1)}, {format_bytes(pool.nbytes)}, {state}"
        )
    orphans = [pool for pool in found if pool.orphaned] if dry_run else removed
    if not orphans:
        lines.append("no orphaned shared-memory files")
        return lines
    files = sum(len(pool.files) for pool in orphans)
    size = format_bytes(sum(pool.nbytes for pool in orphans))
    verb = "would remove" if dry_run else "removed"
    lines.append(f"{verb} {files} files ({size}) of {len(orphans)} orphaned pool{'s' * (len(orphans) != 1)}")
    return lines
