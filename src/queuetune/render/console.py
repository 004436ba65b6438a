"""Console rendering of a probe's report."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from ..units import format_bytes

if TYPE_CHECKING:
    from ..analysis import Coverage, Report, Start, Timing
    from ..experiment import DemoResult
    from ..program_result import ProgramResult
    from ..trace import TraceMeta
    from ..tune import TuneResult


def print_report(report: Report, console: Console | None = None) -> None:
    """Print ``report`` as one table with a title naming the loader."""
    console = console or Console()
    console.print(report_table(report))


def report_table(report: Report) -> Table:
    """The report as a rich Table: one row per measure."""
    table = Table(title=_title(report.meta), show_header=False, title_justify="left")
    table.add_column("measure", style="bold")
    table.add_column("value")
    for label, value in report_rows(report):
        table.add_row(label, value)
    return table


def report_rows(report: Report) -> list[tuple[str, str]]:
    """(label, value) rows, in reading order."""
    rows = [("produced (built)", f"{report.produced_batches} batches")]
    if report.consumed_batches is not None:
        rows.append(("consumed (reached the model)", f"{report.consumed_batches} batches"))
        rows.append(
            (
                "read-ahead at the end (never used)",
                f"{report.read_ahead_batches} batches, {format_bytes(report.read_ahead_bytes or 0)}",
            )
        )
    rows.append(
        (
            "peak in flight (built, not released)",
            f"{report.peak_in_flight_batches} batches, {format_bytes(report.peak_in_flight_bytes)}",
        )
    )
    if report.peak_pool_bytes is not None:
        rows.append(("shared-memory pool (peak)", f"{format_bytes(report.peak_pool_bytes)}: in flight, in use, spare"))
    rows.append(("mean in flight", f"{report.mean_in_flight_batches:.1f} batches"))
    rows.append(("peak being built at once", f"{report.peak_building_batches} batches"))
    if report.batch_bytes.median is not None:
        rows.append(("batch size (median)", format_bytes(int(report.batch_bytes.median))))
    rows.append(("producer time per batch", _timing(report.producer_time)))
    rows.append(("consumer time per step", _timing(report.consumer_step)))
    if report.start is not None:
        rows.append(("start", _start(report.start)))
    if report.input_bound_fraction is not None:
        rows.append(
            (
                "input wait (steady state)",
                f"{report.steady_wait_seconds:.3f} s of {report.steady_seconds:.3f} s "
                f"({report.input_bound_fraction:.1%}): {report.verdict}; with the start, "
                f"{report.input_wait_seconds:.3f} s of {report.wall_seconds:.3f} s",
            )
        )
    if report.peak_rss_bytes is not None:
        rows.append(("peak RSS (process)", format_bytes(report.peak_rss_bytes)))
        rows.append(("peak unique memory of workers", format_bytes(report.peak_children_bytes or 0)))
    for node, held in report.nodes.items():
        rows.append(
            (
                f"node {node}",
                f"built {held.produced_batches} ({format_bytes(held.produced_bytes)}); held at most "
                f"{held.peak_held_batches} ({format_bytes(held.peak_held_bytes)}); at the end "
                f"{held.read_ahead_batches} ({format_bytes(held.read_ahead_bytes)})",
            )
        )
    for cov in report.coverage:
        rows.append((f"coverage run {cov.run} epoch {cov.epoch}", _coverage(cov)))
    for error in report.errors:
        rows.append(("error", error))
    for note in report.notes:
        rows.append(("note", note))
    return rows


def _title(meta: TraceMeta) -> str:
    settings = meta.settings or {}
    described = ", ".join(f"{k}={v}" for k, v in settings.items())
    name = meta.name or meta.type or meta.loader or "loader"
    if meta.rank is not None:
        name = f"rank {meta.rank} of {meta.world_size}: {name}"
    return f"queuetune: {name} ({meta.framework or '?'}{', ' + described if described else ''})"


def _start(start: Start) -> str:
    text = (
        f"first batch after {start.first_batch_seconds:.3f} s, "
        f"{start.built_before_asked} batches built before the first request"
    )
    if start.runs > 1:
        text += f"; {start.seconds:.3f} s to the first batch over {start.runs} runs"
    return text


def _timing(t: Timing) -> str:
    if not t.n:
        return "-"
    return f"median {_ms(t.median)}, p95 {_ms(t.p95)} (n={t.n})"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.1f} µs"


def _coverage(cov: Coverage) -> str:
    total = f" of {cov.total}" if cov.total is not None else ""
    text = (
        f"{cov.consumed}{total} {cov.unit}es consumed"
        if cov.unit == "batch"
        else f"{cov.consumed}{total} samples consumed"
    )
    if cov.unit == "sample key":
        text += f", told apart by key; more than once: {len(cov.duplicates)} ({cov.extra} extra)"
        if cov.repeats:
            shown = [f"{_key(r.item)} ×{r.count} (workers {', '.join(r.workers)})" for r in cov.repeats[:2]]
            text += ", e.g. " + ", ".join(shown) + (", …" if len(cov.duplicates) > len(shown) else "")
        if cov.unkeyed:
            text += f"; {cov.unkeyed} batches without keys"
        return text + (f"; {cov.cause}" if cov.cause else "")
    text += f"; more than once: {_listing(cov.duplicates)}"
    if cov.never_count is not None:
        listed = _listing(cov.never)
        more = " …" if cov.never_count > len(cov.never) and not listed.endswith("…") else ""
        text += f"; never: {cov.never_count}" + (f" ({listed}{more})" if cov.never else "")
    return text


def worker_name(worker: str) -> str:
    """A trace's worker in words: ``thread-7`` is thread 7, a pid a process.

    >>> worker_name("thread-7"), worker_name("4121"), worker_name("")
    ('thread 7', 'process 4121', "the consumer's thread")
    """
    if worker.startswith("thread-"):
        return f"thread {worker[7:]}"
    return f"process {worker}" if worker else "the consumer's thread"


def _key(item: int) -> str:
    """A sample's key: small integers as they are (a user's ids), fingerprints in hex."""
    return str(item) if abs(item) < 2**31 else f"{item % 2**64:016x}"


def _listing(items: list[int]) -> str:
    return ", ".join(map(str, items[:10])) + (" …" if len(items) > 10 else "") if items else "none"


def print_demo(result: DemoResult, console: Console | None = None) -> None:
    """Print the article's experiment as the article did: what reached the model
    against what the loader built, then the footprint and one sentence of advice."""
    from .tables import print_renderable

    out = console.file if console is not None else None
    print_renderable(
        f"queuetune demo: Keras {result.keras} ({result.backend} backend), "
        f"{result.model}, batch {result.batch_size}, predict(steps={result.steps}); "
        f"one batch = {format_bytes(result.batch_bytes)}",
        out,
    )
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
            "-" if first is None else f"{first:.2f} s",
            "-" if fraction is None else f"{fraction:.0%}",
        )
    print_renderable(table, out)
    article = result.article
    built = ", ".join(f"{v} at {k}" for k, v in article.built_samples.items())
    print_renderable(
        "samples (batches); peak in flight = built and not yet released by the model, "
        "estimated = queuetune estimate for those settings; input wait = of the steady "
        "state, after the first batch",
        out,
    )
    print_renderable(
        f"The article ({article.source}): {article.reached_model_samples} samples reached "
        f"the model; the generator built {built}.",
        out,
    )
    print_renderable(f"Advice: {result.advice}", out)


@contextmanager
def demo_status() -> Iterator[Callable[[str], None]]:
    """A spinner on stderr naming the configuration being measured."""
    console = Console(stderr=True)
    with console.status("starting Keras") as status:
        yield lambda label: status.update(f"measuring {label}")


@contextmanager
def tune_progress() -> Iterator[Callable[[int, int, str], None]]:
    """A progress bar on stderr: (trials done, trials in all, what ran last)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("tuning", total=None)

        def update(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=f"tuning: {label}")

        yield update


def print_tune(result: TuneResult, console: Console | None = None) -> None:
    """Print the tuner's trials, its decision and the reasons."""
    from .explain import explain
    from .tables import print_renderable

    out = console.file if console is not None else None
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
    print_renderable(table, out)
    for line in explain(result):
        print_renderable(line, out)
    if result.chosen is not None:
        print_renderable(f"Use: {result.kwargs()}", out)


#: What ``queuetune run`` watches, for the line that says none was seen.
WATCHED_KINDS = (
    "torch DataLoader, Keras PyDataset or generator in fit/evaluate/predict, tf.data Dataset, Ray Data Dataset, "
    "queuetune Prefetcher"
)


def print_program(result: ProgramResult, console: Console | None = None) -> None:
    """Print what ``queuetune run`` found: each loader's report with its verdict
    and recommendation, where its trace went, and the loaders left alone."""
    console = console or Console()

    def line(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    for loader in result.loaders:
        console.print(report_table(loader.report))
        line(f"recommendation: {loader.recommendation.text()}")
        line(f"trace: {loader.trace_path}")
        line("")
    for kind, why in result.left_alone.items():
        line(f"queuetune: left alone a {kind}: {why}")
    if result.html is not None:
        line(f"HTML report: {result.html}")
    if not result.loaders:
        line(f"queuetune: no loader was iterated (watched: {WATCHED_KINDS})")
