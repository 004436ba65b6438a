"""One batch of an epoch as the schedule keeps it (:class:`Task`), and what a
consumer's request found (:class:`Seen`)."""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Task:
    """One batch of the epoch: its position, what it is made of (a batch index,
    sample indices, or None for a plain iterable's next item), the bytes reserved
    for it, then its build and, once settled, its outcome: the batch and its
    size, the worker's exception, or cancelled.

    >>> Task(3, [6, 7], reserved=100).key
    (6, 7)
    """

    position: int
    indices: Any
    reserved: int
    future: cf.Future[Any] | None = None
    submitted_at: float = 0.0
    size: int | None = None
    taken: bool = False
    # True once the build's outcome is in the account, whatever it was.
    settled: bool = False
    batch: Any = None
    failure: BaseException | None = None
    cancelled: bool = False

    @property
    def key(self) -> Any:
        """What the batch is matched by in the trace (its indices, hashable)."""
        if self.indices is None:
            return None
        return tuple(self.indices) if isinstance(self.indices, list) else self.indices


@dataclass(slots=True)
class Seen:
    """What a request found: the next batch not ready, the queue full, a worker
    idle for the lack of depth, the deepest depth the byte budget allows (as many
    of the largest batch so far as fit), every worker building, batches left to start.

    >>> Seen(waited=True, full=False, can_grow=True, limit=8).limit
    8
    """

    waited: bool
    full: bool
    can_grow: bool
    limit: int | None
    all_busy: bool = False
    left: bool = True
