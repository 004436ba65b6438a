"""Printing on the terminal: what the CLI and the API show, from what
:mod:`queuetune.render.text` makes, every table in one style (rich's), at the
width of ``COLUMNS`` or of the terminal (tables 80 columns off one, lines
unwrapped), with no trailing spaces off a terminal; the spinner and the
progress bar of the commands that take a while."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.text import Text

from .render.text import demo_text, program_text, ranks_text, report_table, tune_text

if TYPE_CHECKING:
    from .analysis.ranks import RanksReport
    from .analysis.report import Report
    from .estimate.experiment import DemoResult
    from .run.result import ProgramResult
    from .tune import TuneResult
    from .tune.headline import Headline


def columns() -> int | None:
    """``COLUMNS`` from the environment, where it is a positive whole number.

    >>> import os
    >>> os.environ["COLUMNS"] = "100"; columns()
    100
    >>> os.environ["COLUMNS"] = "wide"; columns() is None
    True
    >>> del os.environ["COLUMNS"]
    """
    text = os.environ.get("COLUMNS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


# The width off a terminal (a file, a pipe) where ``COLUMNS`` says none: what a
# terminal has by default, and what a reader of a log or an e-mail expects.
PIPE_WIDTH = 80


def console_for(renderables: Sequence[RenderableType], file: IO[str] | None = None) -> Console:
    """A console for printing ``renderables`` to ``file`` (stdout by default), as
    wide as ``COLUMNS`` says, else as the terminal is, else (a file, a pipe)
    :data:`PIPE_WIDTH`. Never narrower than a table's columns that cannot wrap
    (its numbers) need: a number is never cut.

    >>> import io, os
    >>> os.environ.pop("COLUMNS", None) and None
    >>> console_for(["a line"], io.StringIO()).width
    80
    """
    console = Console(file=file, highlight=False, soft_wrap=False)
    if not console.is_terminal and columns() is None:
        console.width = PIPE_WIDTH
    tables = [r for r in renderables if not isinstance(r, str)]
    needed = max((_measure(console, r).minimum for r in tables), default=0)
    console.width = max(console.width, needed)
    return console


def _measure(console: Console, renderable: RenderableType) -> Measurement:
    if isinstance(renderable, str):
        renderable = Text(renderable)
    return console.measure(renderable, options=console.options.update_width(10_000))


def emit(console: Console, renderable: RenderableType) -> None:
    """Print one table or line on ``console``: text as written (no markup),
    wrapped between words at the console's width, except into a file or a pipe
    where ``COLUMNS`` sets no width (each line stays one line); off a terminal,
    every line without trailing spaces (what rich pads a table's title and
    cells with)."""
    options: dict[str, Any] = {"markup": False, "highlight": False}
    if console.is_terminal:
        console.print(renderable, **options)
        return
    if isinstance(renderable, str) and columns() is None:
        # A line into a file or a pipe stays one line (a path in it is never broken); tables fit 80 columns.
        console.file.write(renderable.rstrip() + "\n")
        console.file.flush()
        return
    with console.capture() as captured:
        console.print(renderable, **options)
    console.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    console.file.flush()


def print_renderable(renderable: RenderableType, file: IO[str] | None = None) -> None:
    """Print to ``file`` (stdout by default) at the width :func:`console_for` chooses.

    >>> print_renderable("hello")
    hello
    """
    print_all([renderable], file)


def print_all(renderables: Iterable[RenderableType], file: IO[str] | None = None) -> None:
    """Print each in turn, all at one width (:func:`console_for`)."""
    items = list(renderables)
    console = console_for(items, file)
    for renderable in items:
        emit(console, renderable)


def print_lines(renderables: Iterable[RenderableType], console: Console | None = None) -> None:
    """Print each on ``console`` (by default one that :func:`console_for` sizes):
    tables as they are, lines of text as written (no markup), long ones wrapped
    between words, not cut."""
    items = list(renderables)
    console = console or console_for(items)
    for renderable in items:
        emit(console, renderable)


def print_report(report: Report, console: Console | None = None, *, headline: Headline | None = None) -> None:
    """Print ``report`` as one table with a title naming the loader, after its ``headline`` where given."""
    items: list[RenderableType] = [] if headline is None else [Text(headline.text(), style="bold")]
    print_lines([*items, report_table(report)], console)


def print_demo(result: DemoResult, console: Console | None = None) -> None:
    """Print the article's experiment (see :func:`~queuetune.render.text.demo_text`)."""
    print_all(demo_text(result), console.file if console is not None else None)


def print_tune(result: TuneResult, console: Console | None = None) -> None:
    """Print the tuner's trials, its decision and the reasons."""
    print_all(tune_text(result), console.file if console is not None else None)


def print_program(result: ProgramResult, console: Console | None = None) -> None:
    """Print what ``queuetune run`` found (see :func:`~queuetune.render.text.program_text`)."""
    print_lines(program_text(result), console)


def print_ranks(report: RanksReport, console: Console | None = None) -> None:
    """The table of several ranks and their findings, on the terminal.

    >>> import io
    >>> from queuetune.analysis.ranks import RanksReport
    >>> out = io.StringIO()
    >>> print_ranks(RanksReport("j", 2, [1], [], []), Console(file=out, width=100))
    >>> out.getvalue().splitlines()[-1]
    'no trace of rank 1 (of 2): the report covers the others'
    """
    print_lines(ranks_text(report), console)


@contextmanager
def demo_status() -> Iterator[Callable[[str], None]]:
    """A spinner on stderr naming the configuration being measured."""
    console = Console(stderr=True)
    with console.status("starting Keras") as status:
        yield lambda label: status.update(f"measuring {label}")


@contextmanager
def tune_progress() -> Iterator[Callable[[int, int, str], None]]:
    """A progress bar on stderr where it is a terminal: (trials done, trials in all,
    what ran last); elsewhere (a log, a pipe) nothing is drawn."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda done, total, label: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("tuning", total=None)

        def update(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=f"tuning: {label}")

        yield update
