"""Each worker process's own memory as the worker count changes.

A worker holds a baseline of its own (its imports, its state: about 30 MiB
for a torch worker, 10 MiB for one forked). One that copies what it reads
(copy-on-read: forked workers reading a dataset of Python objects at random,
see :mod:`queuetune.analysis.memory`) holds besides the pages of the objects it has
read, and an epoch's samples are shared among the workers: with fewer workers
each reads more of them and copies more, so a worker fewer saves less than
one worker's memory as measured. In ``benchmarks/advice.py``'s copy-on-read
pipeline (1,000,000 strings, 103 MiB of objects, an epoch of 102,400 samples)
the workers' own memory at an epoch's end read 123.6 MiB with one worker,
2 × 102.6 MiB with two and 4 × 76.5 MiB with four; counted as four times the
measured worker, one worker would have held 76.5 MiB.

Worker threads have no memory of their own to read, but under glibc each
builds in a heap of its own (a malloc arena), which keeps a batch it built
once the consumer frees it where the batch is below glibc's largest mmap
threshold (32 MiB): the tree then holds about a batch a thread beyond those in
flight. Threads passing 3.4 MiB numpy batches through a queue of one held
2, 4 and 8 batches beyond those in flight with 2, 4 and 8 threads; batches of
47 MiB, 0, 1 and 3 (:func:`thread_memory`).
"""

from __future__ import annotations

import platform
import statistics
from dataclasses import dataclass

from ..analysis.memory import copied_share, samples_per_batch
from ..analysis.report import Report
from ..record.trace import Trace
from .machine import worker_baseline


@dataclass(frozen=True)
class WorkerMemory:
    """The own memory of a loader's workers: ``each`` worker's as measured at
    the run's memory peak (its baseline and what it grew by). Where they copy
    what they read, also each one's ``baseline``, the ``objects`` bytes of the
    dataset's Python objects, its ``dataset`` samples, and the samples an
    ``epoch`` reads (None: the workers live across epochs and, in the end, each
    reads every sample).

    >>> MiB = 2**20
    >>> WorkerMemory(30 * MiB).total(4) / MiB
    120.0
    >>> copying = WorkerMemory(76 * MiB, baseline=12 * MiB, objects=108 * MiB, dataset=1_000_000, epoch=102_400)
    >>> round(copying.total(4) / MiB), round(copying.total(1) / MiB)
    (311, 118)
    """

    each: float
    baseline: float | None = None
    objects: int | None = None
    dataset: int | None = None
    epoch: int | None = None
    #: Worker threads, whose ``each`` is the heap each keeps (see :func:`thread_memory`).
    threads: bool = False

    @property
    def copying(self) -> bool:
        return self.baseline is not None and bool(self.objects) and bool(self.dataset)

    def total(self, workers: int) -> float:
        """The own memory of ``workers`` workers together at an epoch's end."""
        if workers <= 0:
            return 0.0
        if not self.copying:
            return workers * self.each
        assert self.baseline is not None and self.objects and self.dataset
        read = self.dataset if self.epoch is None else self.epoch / workers
        return workers * (self.baseline + self.objects * float(copied_share(read, self.dataset, self.objects)))


def worker_memory(trace: Trace, report: Report) -> WorkerMemory | None:
    """The :class:`WorkerMemory` of the run ``trace`` (``report``: its
    analysis); None where the tree's memory was not read or no worker was.
    Where the workers copy what they read, each one's baseline is the smaller
    of its unique memory at its first reading and what it held at the memory
    peak less the pages of the samples it had read by then.

    >>> from queuetune.analysis.report import analyze
    >>> worker_memory(Trace(), analyze(Trace())) is None
    True
    """
    each = worker_baseline(report)
    use = report.memory
    if each is None or use is None or use.peak is None:
        return None
    peak = use.peak
    meta = trace.meta
    objects = (meta.extra or {}).get("objects_bytes")
    per_batch = samples_per_batch(trace)
    if not (use.copy_on_read and isinstance(objects, int) and objects > 0 and meta.num_samples and per_batch):
        return WorkerMemory(each)
    persistent = bool((meta.settings or {}).get("persistent_workers"))
    epoch = None if persistent or not meta.num_batches else meta.num_batches * per_batch
    # Two readings of each worker's baseline, each too high in its own way: its
    # unique memory at its first reading (it may have begun to copy by then), and
    # what it held at the peak less the pages of what it had read by then (its
    # writes to the parent's heap but the samples' pages count too: with
    # queuetune's modules imported, 8 MiB a worker more than plainly in
    # benchmarks/advice.py's copy-on-read pipeline). The smaller is nearer.
    built = sum(1 for p in trace.produced if p.end - trace.start <= peak.t)
    read = built * per_batch / peak.workers
    derived = each - objects * float(copied_share(read, meta.num_samples, objects))
    baseline = max(0.0, min(derived, peak.worker_baseline / peak.workers))
    return WorkerMemory(each, baseline, objects, meta.num_samples, epoch)


#: glibc's largest mmap threshold on 64-bit machines: a block this large or
#: larger is always mapped on its own and given back when freed.
MMAP_THRESHOLD_MAX = 32 * 2**20


def thread_memory(trace: Trace, libc: str | None = None) -> WorkerMemory | None:
    """The heap each worker thread keeps beyond the batches in flight: a batch
    (the median built) where batches are below :data:`MMAP_THRESHOLD_MAX` and
    the C library (``libc``, this process's where None) is glibc; None where
    none is kept or no batch was built.

    >>> from queuetune.record.trace import Produced
    >>> trace = Trace(produced=[Produced(0.0, 0.1, 3 * 2**20) for _ in range(3)])
    >>> thread_memory(trace, "glibc").total(4) / 2**20
    12.0
    >>> thread_memory(trace, "musl") is None
    True
    """
    kind = platform.libc_ver()[0] if libc is None else libc
    sizes = [p.nbytes for p in trace.produced if p.nbytes > 0]
    if kind != "glibc" or not sizes:
        return None
    batch = statistics.median(sizes)
    return WorkerMemory(float(batch), threads=True) if batch < MMAP_THRESHOLD_MAX else None
