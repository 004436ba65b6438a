"""Several ranks side by side: a table of each rank's loaders, then the
straggler, coverage across ranks and epochs in the same order, in words, for the
terminal (rich) and for the HTML report."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from ..ranks import RanksReport


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
                wait = f"{loader.input_wait_fraction:.1%} ({loader.input_wait_seconds:.2f} s)"
            step = "-" if loader.step_median_seconds is None else f"{loader.step_median_seconds * 1e3:.1f} ms"
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


def print_ranks(report: RanksReport, console: Console | None = None) -> None:
    """The table and the :func:`findings`, on the terminal.

    >>> import io
    >>> from queuetune.ranks import RanksReport
    >>> out = io.StringIO()
    >>> print_ranks(RanksReport("j", 2, [1], [], []), Console(file=out, width=100))
    >>> out.getvalue().splitlines()[-1]
    'no trace of rank 1 (of 2): the report covers the others'
    """
    console = console or Console()
    console.print(ranks_table(report))
    for line in findings(report):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def ranks_html(report: RanksReport) -> str:
    """The table and the findings as an HTML fragment."""
    head = "".join(f"<th>{c}</th>" for c in ("rank", "loader", "batches/s", "input wait", "median step", "verdict"))
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows(report))
    items = "".join(f"<li>{escape(line)}</li>" for line in findings(report))
    title = f"{report.world_size} ranks" + (f" of job {escape(report.job)}" if report.job else "")
    return (
        f'<section id="ranks"><h2>{title}</h2><table><tr>{head}</tr>{body}</table>'
        + (f"<ul>{items}</ul>" if items else "")
        + "</section>"
    )
