"""The memory sampler: the process tree's memory and CPU, read in a thread of
its own as often as keeps it cheap (:class:`MemorySampler`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import psutil

from ..common import cores
from . import real_memory
from .clock import clock
from .trace import MemorySample

#: What gives the pid of each helper process of queuetune's own that is no loader's
#: worker (None while it runs none): the Prefetcher's warden, registered by the module
#: that starts it (:mod:`.prefetch.workers`), so that this layer imports nothing above it.
OWN_HELPERS: list[Callable[[], int | None]] = []


def multiprocessing_helpers() -> set[int]:
    """Pids of the fork server and the resource tracker that Python's multiprocessing
    starts on the first use of ``forkserver`` or ``spawn`` and keeps, one of each,
    until the interpreter exits, and of queuetune's own helpers (:data:`OWN_HELPERS`:
    the warden, which runs while a Prefetcher's worker processes do). They are not a
    loader's workers; the workers the fork server starts are its children, and count
    as this process's descendants.
    """
    from multiprocessing import forkserver, resource_tracker

    pids = {
        getattr(forkserver._forkserver, "_forkserver_pid", None),
        getattr(resource_tracker._resource_tracker, "_pid", None),
        *(helper() for helper in OWN_HELPERS),
    }
    return {pid for pid in pids if pid is not None}


class MemorySampler:
    """Samples resident memory of this process and, with ``children=True``, the
    memory of its child processes: the whole tree as the kernel counts it
    (:func:`queuetune.record.real_memory.read_tree`: each process's PSS and USS, and
    the tree's shared-memory files).

    Reading the tree means reading every process's entry in /proc, a process's
    ``smaps_rollup`` and maps (milliseconds each, for a worker forked from a
    process that loaded torch), so a loader with no worker processes reads
    this process alone, and the tree is read at most as often as keeps that
    reading within ``CHILDREN_SHARE`` of one core (the samples in between
    repeat the children's last unique bytes and carry no tree), but in its first
    ``EARLY_SECONDS``, where it may take ``EARLY_SHARE``: a forked worker that
    reads a shuffled dataset of Python objects copies most of it over its first
    batches, then holds (see :mod:`queuetune.analysis.memory`), and readings a
    second apart saw that rise only across the first batch. This process's
    own RSS is read at every sample (microseconds). Where /proc gives no PSS
    (not Linux), only RSS and the children's unique memory are read. The first reading is made in the sampler's
    own thread; :meth:`read_now` reads the tree in the caller's thread (a
    loader's workers about to end, at their most grown, are read there),
    and :meth:`stop` reads the children once more, which at 12 workers takes
    31 ms: a loader whose workers outlive its runs keeps the sampler running
    across them (``Recorder(sample_across_runs=True)``).
    """

    #: The share of one core the children's readings may take.
    CHILDREN_SHARE = 0.02
    #: The share they may take in the sampler's first seconds (each ``start``),
    #: where a worker's copy-on-read rises: some 0.3 s of a core at most.
    EARLY_SHARE = 0.1
    EARLY_SECONDS = 3.0

    def __init__(self, sink: Callable[[MemorySample], None], interval: float = 0.05, children: bool = True) -> None:
        self._sink = sink
        self._interval = interval
        self._children = children
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._process = psutil.Process()
        # When the tree is next read, and the children's last reading: unique bytes, count.
        self._children_due = 0.0
        self._last_children = (0, 0)
        self._tree = real_memory.supported()
        # Each descendant's CPU seconds as last read, and those of pids since taken anew.
        self._worker_cpu: dict[int, float] = {}
        self._ended_cpu = 0.0
        self._cpu_so_far = 0.0
        # Samples come from the sampler's thread and from read_now's caller.
        self._reading = threading.Lock()
        # The CPU seconds its readings of the tree took so far (the probe's own, not the loader's).
        self._own_cpu = 0.0

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="queuetune-memory", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the sampling thread after a last sample (this process's RSS now,
        the children as last read)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=5)
            self.sample(children_now=True)

    def read_now(self) -> None:
        """Read the tree now, in this thread, while sampling runs (a no-op where it
        does not)."""
        if self._thread is not None:
            self.sample(children_now=True)

    def _run(self) -> None:
        self.sample(children_now=True)
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self, children_now: bool = False) -> None:
        """Take one sample; the children are read if due, or with ``children_now``."""
        with self._reading:
            self._sample(children_now)

    def _sample(self, children_now: bool) -> None:
        try:
            rss = self._process.memory_info().rss
        except psutil.Error:
            return
        tree = None
        if children_now or time.monotonic() >= self._children_due:
            began, cpu = time.monotonic(), time.thread_time()
            if self._tree:
                tree = self._read_tree()
                if tree is None:
                    return
                self._last_children = (tree.workers_uss, len(tree.workers))
            elif self._children:
                reading = self._read_children()
                if reading is None:
                    return
                self._last_children = reading
            # The reading's CPU time, not its wall time: waiting for the GIL
            # (a consumer forking its workers meanwhile) costs no core.
            # The first reading (before workers start, mostly) does not put off the next.
            cost = 0.0 if children_now else time.thread_time() - cpu
            early = began - self._started < self.EARLY_SECONDS
            share = max(self.CHILDREN_SHARE, self.EARLY_SHARE) if early else self.CHILDREN_SHARE
            self._children_due = began + max(self._interval, cost / share)
        unique, count = self._last_children
        if tree is None:
            self._sink(MemorySample(clock(), rss, unique, count))
            return
        workers = [[w.pid, w.pss, w.uss, w.shm] for w in tree.workers]
        mine = tree.consumer
        used, idle = self._cpu(tree)
        self._own_cpu += time.thread_time() - cpu
        sample = MemorySample(clock(), rss, unique, count, mine.pss, mine.uss, tree.shm, tree.shared, workers)
        sample.cpu, sample.idle, sample.probe = used, idle, self._own_cpu
        self._sink(sample)

    def _cpu(self, tree: real_memory.TreeMemory) -> tuple[float, float | None]:
        """The tree's CPU seconds so far (this process's threads and its descendants)
        and the idle seconds of the cores it may run on. A descendant counts as this
        process's children's times have it once reaped, and as read while alive; one
        that ended and is not yet reaped is in neither, so each also keeps its last
        reading, and the larger count is taken: the figure never goes back."""
        for worker in tree.workers:
            last = self._worker_cpu.get(worker.pid)
            if last is not None and worker.cpu < last:  # its pid taken by a new process
                self._ended_cpu += last
            self._worker_cpu[worker.pid] = worker.cpu
        own = os.times()
        reaped_and_alive = own.children_user + own.children_system + sum(w.cpu for w in tree.workers)
        as_last_read = self._ended_cpu + sum(self._worker_cpu.values())
        cpu = max(self._cpu_so_far, own.user + own.system + max(reaped_and_alive, as_last_read))
        self._cpu_so_far = cpu
        return cpu, cores.idle_seconds()

    def _read_tree(self) -> real_memory.TreeMemory | None:
        """This process and, with children, its descendants but Python's own helpers."""
        try:
            if not self._children:
                return real_memory.TreeMemory(real_memory.read_process(self._process))
            return real_memory.read_tree(self._process, exclude=multiprocessing_helpers())
        except (psutil.Error, OSError):
            return None

    def _read_children(self) -> tuple[int, int] | None:
        """The unique bytes of this process's living children and their count;
        None if this process cannot be read."""
        try:
            helpers = multiprocessing_helpers()
            children = [c for c in self._process.children(recursive=True) if c.pid not in helpers]
        except psutil.Error:
            return None
        unique, living = 0, 0
        for child in children:
            try:
                unique += real_memory.read_process(child).uss
            except psutil.Error:
                continue
            living += 1
        return unique, living
