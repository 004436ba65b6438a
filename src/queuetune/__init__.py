"""queuetune: measure, estimate and right-size the batch queues of input pipelines."""

__version__ = "0.1.0"

from .api import Probe, print_report, probe_of, report, watch
from .prefetch import (
    BudgetExceeded,
    DeviceCopyError,
    Prefetcher,
    PrefetcherClosed,
    SharedMemoryFull,
    SharedMemoryWarning,
    WorkerDied,
    WorkerError,
)
from .record.trace import Trace

__all__ = [
    "BudgetExceeded",
    "DeviceCopyError",
    "Prefetcher",
    "PrefetcherClosed",
    "Probe",
    "SharedMemoryFull",
    "SharedMemoryWarning",
    "Trace",
    "WorkerDied",
    "WorkerError",
    "__version__",
    "print_report",
    "probe_of",
    "report",
    "watch",
]
