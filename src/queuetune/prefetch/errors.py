"""The errors a prefetcher's epoch can end with, besides a worker's own exception and a ``TimeoutError``."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool


class BudgetExceeded(ValueError):
    """A batch does not fit in the prefetcher's byte budget.

    >>> raise BudgetExceeded("a batch of 2 MiB does not fit in max_bytes=1 MiB")
    Traceback (most recent call last):
    queuetune.prefetch.errors.BudgetExceeded: a batch of 2 MiB does not fit in max_bytes=1 MiB
    """


class WorkerDied(BrokenProcessPool):
    """A worker process died mid-epoch (killed, out of memory, crashed).

    The epoch stops; the next ``for`` loop over the prefetcher starts new workers.
    It is a ``BrokenProcessPool``, what the pool itself raises:

    >>> issubclass(WorkerDied, BrokenProcessPool)
    True
    """


class PrefetcherClosed(RuntimeError):
    """The epoch was stopped (``close()``, or a new epoch) while its consumer waited.

    >>> isinstance(PrefetcherClosed("close() was called"), RuntimeError)
    True
    """
