"""The workers that build a prefetcher's batches, behind one interface: threads of
this process (:class:`ThreadWorkers`) or worker processes whose arrays come back
through /dev/shm (:class:`ProcessWorkers`)."""

from __future__ import annotations

from .base import END, LIVENESS, Job, Workers
from .building import BEHIND, Pull, Shipper, build
from .options import ProcessOptions
from .processes import ProcessWorkers
from .threads import ThreadWorkers

__all__ = [
    "BEHIND",
    "END",
    "LIVENESS",
    "Job",
    "ProcessOptions",
    "ProcessWorkers",
    "Pull",
    "Shipper",
    "ThreadWorkers",
    "Workers",
    "build",
]
