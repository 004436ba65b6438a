"""The queue model's vocabulary for a loader: how it gives batches to its workers,
when a place under its bound frees, and how many workers build at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Assignment = Literal["shared", "round_robin"]
Release = Literal["take", "request"]
ASSIGNMENTS: tuple[Assignment, ...] = get_args(Assignment)
RELEASES: tuple[Release, ...] = get_args(Release)


@dataclass(frozen=True)
class LoaderRules:
    """How a loader gives batches to its workers and frees places under its bound.

    ``assignment``: ``"shared"`` (any free worker builds the next batch: Keras's
    executor, queuetune's prefetcher) or ``"round_robin"`` (batch ``i`` goes to
    worker ``i mod workers``, after that worker's previous batch: torch's
    DataLoader). ``release``: a place frees when the consumer ``"take"``s a
    batch (torch sends the next index after receiving one) or as soon as it
    ``"request"``s it (Keras's feeder submits the next batch when the consumer
    removes the head of its queue, before that batch is ready).
    ``processes``: batches cross from worker processes through a pipe.
    ``workers``: the workers its settings give, or None where they say none (the
    model then counts the workers a trace saw).

    >>> LoaderRules().assignment, LoaderRules().release, LoaderRules().workers
    ('shared', 'take', None)
    """

    assignment: Assignment = "shared"
    release: Release = "take"
    processes: bool = False
    workers: int | None = None
