"""Rich console tables for the seed table, a batch and a footprint."""

from __future__ import annotations

from typing import IO, Any

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table

from queuetune.memory import BatchSpec, Footprint
from queuetune.units import format_bytes, format_number

__all__ = ["batch_table", "footprint_table", "print_renderable", "seed_table_view"]


def seed_table_view(table: dict[str, Any]) -> Table:
    """A Markdown-style table of :func:`queuetune.memory.seed_table`, values as the article prints them.

    >>> from queuetune.memory import seed_table
    >>> seed_table_view(seed_table()).row_count
    12
    """
    title = f"{table['dtype']}, {table['channels']} channel(s), {table['unit']} per batch"
    view = Table(box=box.MARKDOWN, title=title)
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

    >>> from queuetune.memory import footprint
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


def print_renderable(renderable: RenderableType, file: IO[str] | None = None) -> None:
    """Print to ``file`` (stdout by default), widening the console so numbers are never cut.

    >>> print_renderable("hello")
    hello
    """
    console = Console(file=file, highlight=False, soft_wrap=False)
    measured = console.measure(renderable, options=console.options.update_width(10_000))
    # A terminal may still wrap the text columns; redirected output is never wrapped.
    needed = measured.minimum if console.is_terminal else measured.maximum
    console.width = max(console.width, needed)
    console.print(renderable)
