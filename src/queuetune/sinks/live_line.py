"""The live line of ``queuetune run``: per loader, batches a second, in flight,
input wait and resident memory, on stderr, while the program runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live as RichLive
from rich.text import Text

from ..common.units import format_bytes

if TYPE_CHECKING:
    from ..probing.session import Session
    from ..record.recorder import Live


def live_text(rows: list[tuple[str, Live]]) -> Text:
    """One line per loader.

    >>> from queuetune.record.recorder import Live
    >>> print(live_text([("dataloader 1", Live(12.5, 0.25, 3, 3 * 2**20, 2**30))]))
    queuetune: dataloader 1: 12.5 batches/s, in flight 3 (3.0 MiB), input wait 25%, RSS 1.0 GiB
    """
    if not rows:
        return Text("queuetune: no loader iterated yet")
    lines = []
    for label, live in rows:
        rss = "" if live.rss is None else f", RSS {format_bytes(live.rss)}"
        lines.append(
            f"queuetune: {label}: {live.rate:.1f} batches/s, in flight {live.in_flight} "
            f"({format_bytes(live.in_flight_bytes)}), input wait {live.waiting:.0%}{rss}"
        )
    return Text("\n".join(lines))


@contextmanager
def live_line(session: Session, console: Console | None = None, refresh: float = 2.0) -> Iterator[bool]:
    """Show the session's loaders as they run, ``refresh`` times a second, on
    ``console`` (default: stderr) when it is a terminal; yields whether it shows."""
    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield False
        return
    render: Callable[[], Text] = lambda: live_text(session.live())  # noqa: E731
    with RichLive(get_renderable=render, console=console, refresh_per_second=refresh, transient=True):
        yield True
