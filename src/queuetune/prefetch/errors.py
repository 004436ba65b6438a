"""The errors a prefetcher's epoch can end with, besides a worker's own exception and a ``TimeoutError``."""

from __future__ import annotations

import traceback
from concurrent.futures.process import BrokenProcessPool


class BudgetExceeded(ValueError):
    """A batch does not fit in the prefetcher's byte budget.

    >>> raise BudgetExceeded("a batch of 2 MiB does not fit in max_bytes=1 MiB")
    Traceback (most recent call last):
    queuetune.prefetch.errors.BudgetExceeded: a batch of 2 MiB does not fit in max_bytes=1 MiB
    """


class DeviceCopyError(RuntimeError):
    """A batch could not be staged in pinned memory or copied to the device
    (``device=``, ``pin_memory=True``); the message names the batch, and the
    copy's own error is its ``__cause__``. The batches before it were handed over.

    >>> raise DeviceCopyError("batch 3 of the epoch could not be copied to cuda: RuntimeError: no memory")
    Traceback (most recent call last):
    queuetune.prefetch.errors.DeviceCopyError: batch 3 of the epoch could not be copied to cuda: RuntimeError: no memory
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


class WorkerError(RuntimeError):
    """A batch's build raised in a worker process an exception that could not
    come back as itself (it could not be pickled, or not unpickled here); it
    carries what it said: its type's name, its message and the traceback text
    from the worker.

    >>> error = WorkerError("BadError", "item 3 is corrupt", "Traceback ...", "batch 3 of the epoch")
    >>> print(error)  # doctest: +ELLIPSIS
    batch 3 of the epoch failed in its worker process with BadError: item 3 is corrupt (the exception could ...)
    >>> error.type_name, error.message
    ('BadError', 'item 3 is corrupt')
    """

    def __init__(self, type_name: str, message: str, remote_traceback: str, batch: str = "a batch") -> None:
        super().__init__(type_name, message, remote_traceback, batch)
        self.type_name, self.message, self.remote_traceback, self.batch = type_name, message, remote_traceback, batch

    def __str__(self) -> str:
        said = f"{self.type_name}: {self.message}" if self.message else self.type_name
        return f"{self.batch} failed in its worker process with {said} (the exception could not be sent back as itself)"

    @classmethod
    def standing_for(cls, exc: BaseException) -> WorkerError:
        """What stands for ``exc`` where it cannot travel itself.

        >>> WorkerError.standing_for(KeyError("k")).type_name
        'KeyError'
        """
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            message = str(exc)
        except Exception:  # a __str__ that raises says nothing
            message = ""
        return cls(type(exc).__qualname__, message, text)

    def of(self, batch: str) -> WorkerError:
        """The same error, naming ``batch``."""
        return WorkerError(self.type_name, self.message, self.remote_traceback, batch)


class SharedMemoryFull(OSError):
    """No room left in the shared-memory folder (``/dev/shm``) for a batch's segment.

    >>> import errno
    >>> SharedMemoryFull(errno.ENOSPC, "no room").errno == errno.ENOSPC
    True
    """


class SharedMemoryWarning(UserWarning):
    """The shared memory free as a prefetcher starts is less than its budget may take.

    >>> issubclass(SharedMemoryWarning, UserWarning)
    True
    """
