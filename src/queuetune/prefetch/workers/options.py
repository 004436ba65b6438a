"""What worker processes are started with (:class:`ProcessOptions`), checked once."""

from __future__ import annotations

import multiprocessing.context
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProcessOptions:
    """What :class:`~.processes.ProcessWorkers` start their processes with:
    ``capacity`` processes, ``count`` of them building at once (fewer than all
    only where the count is decided at run time: ``elastic``), each building
    batches of ``source`` (``batch_size`` samples each, made one with
    ``collate_fn``; an item each where ``batch_size`` is None), started with
    ``context``; ``budget``: the bytes of shared memory their batches may
    take, or None for no limit.

    >>> import multiprocessing
    >>> options = ProcessOptions.of(2, range(8), 4, None, multiprocessing.get_context("spawn"), capacity=3)
    >>> options.capacity, options.elastic, options.budget, options.start_method
    (3, True, None, 'spawn')
    >>> ProcessOptions.of(4, range(8), 4, None, multiprocessing.get_context(), capacity=3)
    Traceback (most recent call last):
    ...
    ValueError: worker count must be from 1 to 3, got 4
    """

    source: Any
    batch_size: int | None
    collate_fn: Callable[[list[Any]], Any] | None
    context: multiprocessing.context.BaseContext
    count: int
    capacity: int
    elastic: bool = False
    budget: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.count <= self.capacity:
            raise ValueError(f"worker count must be from 1 to {self.capacity}, got {self.count}")
        if self.budget is not None and self.budget < 0:
            raise ValueError(f"the budget must be 0 bytes or more, got {self.budget}")
        if self.collate_fn is not None and self.batch_size is None:
            raise ValueError("collate_fn needs batch_size")

    @classmethod
    def of(
        cls,
        count: int,
        source: Any,
        batch_size: int | None,
        collate_fn: Callable[[list[Any]], Any] | None,
        context: multiprocessing.context.BaseContext,
        capacity: int | None = None,
        budget: int | None = None,
    ) -> ProcessOptions:
        """The options of :class:`~.processes.ProcessWorkers`' arguments: a
        ``capacity`` given makes the count elastic (else it is ``count``)."""
        elastic = capacity is not None
        return cls(
            source, batch_size, collate_fn, context, count, count if capacity is None else capacity, elastic, budget
        )

    @property
    def start_method(self) -> str:
        """How the processes start: ``fork``, ``spawn`` or ``forkserver``."""
        return self.context.get_start_method()
