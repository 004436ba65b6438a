"""The settings a :class:`~queuetune.prefetch.Prefetcher` shows as attributes (:class:`PrefetcherSettings`)."""

from __future__ import annotations

import multiprocessing.context
from collections.abc import Callable
from typing import Any

from .options import PrefetchOptions


class PrefetcherSettings:
    """A Prefetcher's settings, read from its :class:`.options.PrefetchOptions`.

    >>> from queuetune.prefetch import Prefetcher
    >>> with Prefetcher(list(range(4)), max_bytes="1MiB", workers=3, batch_size=2) as p:
    ...     p.num_workers, p.batch_size, p.mode
    (3, 2, 'thread')
    """

    max_bytes: int
    timeout: float | None
    mode: str
    auto: bool
    #: With workers="auto": the most workers building at once (else None).
    max_workers: int | None
    #: With workers="auto", an epoch starts with as many workers as the one before ended with.
    num_workers: int
    multiprocessing_context: multiprocessing.context.BaseContext | None
    adaptive: bool
    max_depth: int
    start_depth: int
    ordered: bool
    batch_size: int | None
    collate_fn: Callable[[list[Any]], Any] | None
    shuffle: bool
    drop_last: bool

    def _adopt(self, options: PrefetchOptions) -> None:
        """Take the settings of ``options`` as attributes."""
        self.max_bytes, self.timeout, self.mode = options.max_bytes, options.timeout, options.mode
        self.auto, self.max_workers = options.auto, options.max_workers
        self.num_workers, self.multiprocessing_context = options.workers, options.multiprocessing_context
        self.adaptive, self.max_depth, self.start_depth = options.adaptive, options.max_depth, options.depth
        self.ordered, self.batch_size, self.collate_fn = options.ordered, options.batch_size, options.collate_fn
        self.shuffle, self.drop_last = options.shuffle, options.drop_last
