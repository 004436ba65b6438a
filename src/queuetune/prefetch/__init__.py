"""queuetune's own prefetching: the :class:`Prefetcher`, which builds batches ahead
within a budget in bytes, and :func:`read_ahead`, a fixed read-ahead thread for plain iterables."""

from .collate import default_collate
from .errors import (
    BudgetExceeded,
    DeviceCopyError,
    PrefetcherClosed,
    SharedMemoryFull,
    SharedMemoryWarning,
    WorkerDied,
    WorkerError,
)
from .handle import Prefetcher
from .read_ahead import read_ahead

__all__ = [
    "BudgetExceeded",
    "DeviceCopyError",
    "Prefetcher",
    "PrefetcherClosed",
    "SharedMemoryFull",
    "SharedMemoryWarning",
    "WorkerDied",
    "WorkerError",
    "default_collate",
    "read_ahead",
]
