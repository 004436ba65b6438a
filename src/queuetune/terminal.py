"""Printing on the terminal: what the CLI and the API show, from what
:mod:`queuetune.render.text` makes; the spinner and the progress bar of the
commands that take a while."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING

from rich.console import Console, RenderableType
from rich.text import Text

from .render.text import demo_text, program_text, ranks_text, report_table, tune_text

if TYPE_CHECKING:
    from .analysis import Report
    from .experiment import DemoResult
    from .program_result import ProgramResult
    from .ranks import RanksReport
    from .tune import TuneResult
    from .tune.headline import Headline


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


def print_all(renderables: Iterable[RenderableType], file: IO[str] | None = None) -> None:
    """:func:`print_renderable` each in turn."""
    for renderable in renderables:
        print_renderable(renderable, file)


def print_lines(renderables: Iterable[RenderableType], console: Console | None = None) -> None:
    """Print each on ``console``: tables as they are, lines of text as written
    (no markup), long ones wrapped by the terminal, not cut."""
    console = console or Console()
    for renderable in renderables:
        if isinstance(renderable, str):
            console.print(renderable, markup=False, highlight=False, soft_wrap=True)
        else:
            console.print(renderable)


def print_report(report: Report, console: Console | None = None, *, headline: Headline | None = None) -> None:
    """Print ``report`` as one table with a title naming the loader, after its ``headline`` where given."""
    console = console or Console()
    if headline is not None:
        console.print(Text(headline.text(), style="bold"))
    console.print(report_table(report))


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
    >>> from queuetune.ranks import RanksReport
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
    """A progress bar on stderr: (trials done, trials in all, what ran last)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("tuning", total=None)

        def update(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=f"tuning: {label}")

        yield update
