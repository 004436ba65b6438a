"""Recording: the events a probe collects, from worker threads, worker processes
and the consumer, turned into a :class:`~queuetune.record.trace.Trace` on demand."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

import psutil

from ..common import cores
from . import real_memory
from .trace import Consumed, Mark, MarkKind, MemorySample, Produced, Trace, TraceMeta

clock = time.monotonic


class _Schedstat:
    """This thread's ``/proc/thread-self/schedstat``, open (the file stays the
    thread's that opened it), closed with the thread's locals."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)

    def waited(self) -> float:
        """Seconds the thread has been ready to run and waiting for a core."""
        return int(os.pread(self.fd, 64, 0).split()[1]) / 1e9

    def __del__(self) -> None:
        with contextlib.suppress(OSError, TypeError):  # TypeError: at interpreter exit
            os.close(self.fd)


_THREAD = threading.local()


def busy_time() -> float:
    """Seconds this thread has been busy: its CPU time, and the time it was ready
    and waited for a core (Linux's schedstat, exact while the thread runs), so
    that the difference over a build is the time it did not wait on I/O or a
    lock, however busy the machine; where schedstat cannot be read, the CPU time
    alone. About 3 µs a call.

    >>> began = busy_time(); sum(range(10**5)) > 0 and busy_time() >= began
    True
    """
    stat: _Schedstat | bool | None = getattr(_THREAD, "schedstat", None)
    if stat is None or (isinstance(stat, _Schedstat) and stat.pid != os.getpid()):
        try:
            stat = _THREAD.schedstat = _Schedstat()
        except OSError:
            stat = _THREAD.schedstat = False
    if isinstance(stat, _Schedstat):
        try:
            return time.thread_time() + stat.waited()
        except (OSError, ValueError, IndexError):
            pass
    return time.thread_time()


class Built(NamedTuple):
    """A batch built: when (on the machine's monotonic clock), its bytes, its
    index and matching key (see :func:`key_of`), where (process, native thread),
    and ``busy``: the seconds its thread was busy on it (see :func:`busy_time`;
    None where not measured)."""

    start: float
    end: float
    nbytes: int
    batch_index: int | None
    key: int | None
    pid: int
    thread: int
    samples: tuple[int, ...] | None = None
    busy: float | None = None


class Live(NamedTuple):
    """What a loader is doing lately, cheap enough to read twice a second while
    it runs: batches a second the consumer took and the share of the time it
    waited over the last ``window`` seconds, batches built and not yet taken
    (and their bytes), the process's resident memory (None until sampled),
    and the batches taken so far.

    >>> Live(10.0, 0.5, 2, 64, None).in_flight
    2
    """

    rate: float
    waiting: float
    in_flight: int
    in_flight_bytes: int
    rss: int | None
    batches: int = 0


def built_here(
    start: float,
    end: float,
    nbytes: int,
    index: int | None = None,
    key: Any = None,
    samples: tuple[int, ...] | None = None,
    busy: float | None = None,
) -> Built:
    """The record of a batch built in this thread, keyed by ``key``, with the
    64-bit keys of its ``samples`` when they are known and the thread's busy
    seconds on it (:func:`busy_time` at its end less at its start).

    >>> record = built_here(0.0, 1.0, 8, index=3, key=3, samples=(5, 6), busy=0.25)
    >>> record.nbytes, record.batch_index, record.key, record.samples, record.busy, record.pid == os.getpid()
    (8, 3, 3, (5, 6), 0.25, True)
    """
    return Built(start, end, nbytes, index, key_of(key), os.getpid(), threading.get_native_id(), samples, busy)


# A Built on the pipe, and its flags (1: index set, 2: key set), then its busy
# seconds (NaN: not measured). A batch's sample keys go before it, four to a
# record of the same size (flag 4, in the same place), which the reader holds
# for the next Built of the same process and thread.
_RECORD = struct.Struct("<ddqqqqqqd")
_KEYS = struct.Struct("<qqqqqqqqq")
_HAS_INDEX, _HAS_KEY, _SAMPLE_KEYS = 1, 2, 4
_KEYS_PER_RECORD = 4
# Whole records, at most PIPE_BUF bytes, so that each write stays in one piece.
_RECORDS_PER_WRITE = 4096 // _RECORD.size
# pids of control records: a real record always carries a worker's pid (> 0)
_STOP, _FLUSH = 0, -1
_INT64 = (-(2**63), 2**63 - 1)


class Channel:
    """Carries produced-batch records from wherever batches are built to the recorder.

    In the process that created it, a record is appended directly. In a worker
    process (forked, or spawned: the pipe's write end follows the pickled
    dataset), each record is one fixed-size ``os.write`` to a pipe, which the
    kernel keeps whole (it is smaller than PIPE_BUF), so workers need no lock
    and a worker that dies cannot block the others. A reader thread in the
    creating process drains the pipe.
    """

    def __init__(self, sink: Callable[[Built], None], processes: bool) -> None:
        self._pid = os.getpid()
        self._sink: Callable[[Built], None] | None = sink
        self._r: int | None = None
        self._w: int | None = None
        self._reader: threading.Thread | None = None
        self._flushed = threading.Condition()
        self._flush_seq = self._flushed_seq = 0
        if processes:
            self._r, self._w = os.pipe()
            self._start_reader()

    def _start_reader(self) -> None:
        if self._r is None or self._sink is None or self._reader is not None:
            return
        self._reader = threading.Thread(
            target=self._read, args=(self._r, self._sink), name="queuetune-channel", daemon=True
        )
        self._reader.start()

    def _stop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is None or self._w is None:
            return
        try:
            os.write(self._w, _RECORD.pack(0.0, 0.0, 0, 0, 0, _STOP, 0, 0, 0.0))
        except OSError:
            return
        reader.join(timeout=5)

    @contextlib.contextmanager
    def reader_paused(self) -> Iterator[None]:
        """No reader thread while the block runs: a process forked in it copies no
        thread of this channel's, nor a lock one holds. Records written meanwhile
        wait in the pipe for the next reader. Use it only where no other thread
        flushes or closes the channel.
        """
        if os.getpid() != self._pid:
            yield
            return
        self._stop_reader()
        try:
            yield
        finally:
            self._start_reader()

    def emit(self, record: Built) -> None:
        if os.getpid() == self._pid:
            if self._sink is not None:
                self._sink(record)
        elif self._w is not None:
            records = [*_pack_samples(record), _pack(record)]
            for i in range(0, len(records), _RECORDS_PER_WRITE):
                os.write(self._w, b"".join(records[i : i + _RECORDS_PER_WRITE]))

    def _read(self, fd: int, sink: Callable[[Built], None]) -> None:
        pending = b""
        keys: dict[tuple[int, int], list[int]] = {}
        while True:
            try:
                chunk = os.read(fd, _RECORD.size * 1024)
            except OSError:
                return
            if not chunk:
                return
            pending += chunk
            whole = len(pending) - len(pending) % _RECORD.size
            for offset in range(0, whole, _RECORD.size):
                if _KEYS.unpack_from(pending, offset)[7] & _SAMPLE_KEYS:
                    *values, count, pid, tid, _, _ = _KEYS.unpack_from(pending, offset)
                    keys.setdefault((pid, tid), []).extend(values[:count])
                    continue
                fields = _RECORD.unpack_from(pending, offset)
                if fields[5] == _STOP:
                    return
                if fields[5] == _FLUSH:
                    with self._flushed:
                        self._flushed_seq = fields[3]
                        self._flushed.notify_all()
                    continue
                record = _unpack(fields)
                held = keys.pop((record.pid, record.thread), None)
                sink(record if held is None else record._replace(samples=tuple(held)))
            pending = pending[whole:]

    def flush(self, timeout: float = 2.0) -> None:
        """Return once every record written to the pipe before this call is stored.

        A marker goes down the pipe behind them; the reader stores records in
        pipe order, so when it reaches the marker the earlier records are in.
        """
        if self._reader is None or self._w is None or os.getpid() != self._pid:
            return
        with self._flushed:
            self._flush_seq += 1
            seq = self._flush_seq
        try:
            os.write(self._w, _RECORD.pack(0.0, 0.0, 0, seq, 0, _FLUSH, 0, 0, 0.0))
        except OSError:
            return
        with self._flushed:
            self._flushed.wait_for(lambda: self._flushed_seq >= seq, timeout=timeout)

    def close(self) -> None:
        """Stop the reader thread and close the pipe (idempotent)."""
        if os.getpid() != self._pid:
            return
        if self._w is not None:
            try:
                os.write(self._w, _RECORD.pack(0.0, 0.0, 0, 0, 0, _STOP, 0, 0, 0.0))
            except OSError:
                pass
        if self._reader is not None:
            self._reader.join(timeout=5)
            self._reader = None
        for fd in (self._r, self._w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._r = self._w = None

    def __reduce__(self) -> tuple[Callable[..., Channel], tuple[int] | tuple[int, Any]]:
        from multiprocessing import context, reduction

        if context.get_spawning_popen() is None or self._w is None:
            return (_detached_channel, (self._pid,))
        # Pickled for a process being started: the start method carries the pipe's
        # write end across (spawn keeps its number, the fork server passes it).
        return (_child_channel, (self._pid, reduction.DupFd(self._w)))


def _detached_channel(pid: int) -> Channel:
    channel = Channel.__new__(Channel)
    channel._pid, channel._sink, channel._r, channel._w, channel._reader = pid, None, None, None, None
    return channel


def _child_channel(pid: int, fd: Any) -> Channel:
    channel = _detached_channel(pid)
    channel._w = fd.detach()
    return channel


def _pack(record: Built) -> bytes:
    start, end, nbytes, index, key, pid, tid, _, busy = record
    flags = 0
    if index is not None:
        flags |= _HAS_INDEX
    if key is not None:
        flags |= _HAS_KEY
    return _RECORD.pack(start, end, nbytes, index or 0, key or 0, pid, tid, flags, math.nan if busy is None else busy)


def _pack_samples(record: Built) -> list[bytes]:
    samples = record.samples or ()
    records = []
    for i in range(0, len(samples), _KEYS_PER_RECORD):
        chunk = [_int64(k) for k in samples[i : i + _KEYS_PER_RECORD]]
        values = chunk + [0] * (_KEYS_PER_RECORD - len(chunk))
        records.append(_KEYS.pack(*values, len(chunk), record.pid, record.thread, _SAMPLE_KEYS, 0))
    return records


def _unpack(fields: tuple[float, float, int, int, int, int, int, int, float]) -> Built:
    start, end, nbytes, index, key, pid, tid, flags, busy = fields
    return Built(
        start,
        end,
        nbytes,
        index if flags & _HAS_INDEX else None,
        key if flags & _HAS_KEY else None,
        pid,
        tid,
        busy=None if math.isnan(busy) else busy,
    )


def _int64(value: int) -> int:
    return (value - _INT64[0]) % 2**64 + _INT64[0]


def key_of(value: Any) -> Any:
    """The matching key that survives the trip through a worker's pipe."""
    return None if value is None else _int64(hash(value))


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


#: Sample keys kept a run (8 MiB as int64; about 44 MiB as Python ints):
#: beyond it, batches are recorded without them and a ``samples_capped`` mark
#: says from when, so coverage covers the run's first keys only.
SAMPLE_KEYS_PER_RUN = 2**20


class _Store:
    """Where built batches land (the channel's sink): keeps at most
    ``SAMPLE_KEYS_PER_RUN`` sample keys a run (``keys``: those kept since the
    run began). It holds the recorder's lists, not the recorder, so that a
    recorder nobody holds is collected and its finalizer stops its threads."""

    def __init__(self, produced: list[Built], marks: list[Mark]) -> None:
        self.produced, self.marks, self.keys = produced, marks, 0

    def __call__(self, record: Built) -> None:
        samples = record.samples
        if samples is not None:
            if self.keys + len(samples) > SAMPLE_KEYS_PER_RUN:
                if self.keys <= SAMPLE_KEYS_PER_RUN:
                    self.keys = SAMPLE_KEYS_PER_RUN + 1
                    self.marks.append(Mark(clock(), "samples_capped", SAMPLE_KEYS_PER_RUN))
                record = record._replace(samples=None)
            else:
                self.keys += len(samples)
        self.produced.append(record)


class Recorder:
    """Collects produced and consumed events and consumer marks for one loader.

    With ``keep_runs=N`` only the last N runs are kept: when a run begins, the
    records from before the oldest kept run are let go (``meta.forgotten_runs``
    counts the runs dropped), so a loader that runs for weeks does not grow its
    records without end. Runs must then follow one another, as a prefetcher's
    epochs do. ``processes``: the loader builds batches in worker processes, whose
    records come through a pipe and whose memory is sampled with this process's.

    >>> rec = Recorder(TraceMeta(loader="demo"), sample_memory=False)
    >>> rec.run_begin(); t = clock(); rec.produced(t, t, 8, index=0)
    >>> rec.consumed(t, t, nbytes=8); rec.run_end()
    >>> len(rec.trace().produced), len(rec.trace().consumed)
    (1, 1)
    >>> rec.close()
    """

    def __init__(
        self,
        meta: TraceMeta,
        *,
        processes: bool = False,
        sample_memory: bool = True,
        memory_interval: float = 0.05,
        keep_runs: int | None = None,
        sample_across_runs: bool = False,
    ) -> None:
        if keep_runs is not None and (not isinstance(keep_runs, int) or isinstance(keep_runs, bool) or keep_runs < 1):
            raise ValueError(f"keep_runs must be a positive integer or None, got {keep_runs!r}")
        self.keep_runs = keep_runs
        self.meta = meta
        if sample_memory:
            self.meta.extra.setdefault("host_memory", psutil.virtual_memory().total)
            self.meta.extra.setdefault("cores", cores.available())
        self.start = clock()
        self._produced: list[Built] = []
        self._consumed: list[Consumed] = []
        self._marks: list[Mark] = []
        self._memory: list[MemorySample] = []
        # Records let go with keep_runs, so far (read with the lists by another thread: a lock).
        self._consumed_gone = self._marks_gone = 0
        self._cutting = threading.Lock()
        self._store = _Store(self._produced, self._marks)
        self.channel = Channel(self._store, processes)
        self._sampler = MemorySampler(self._memory.append, memory_interval, processes) if sample_memory else None
        # Sampling goes on from the first run to close() (workers that outlive a run), else run by run.
        self._sample_across_runs = sample_across_runs
        self.run = -1
        self.epoch = -1
        self._active = 0
        self._epoch_open = False
        self.consumer = "iterator"
        #: Called where what was recorded is to be written now (``queuetune run``'s journal):
        #: as the loader's state is taken (see :meth:`checkpoint`), and before old runs are let go.
        self.on_flush: Callable[[], None] | None = None
        self._finalizer = weakref.finalize(self, _shutdown, self.channel, self._sampler)

    def produced(
        self,
        start: float,
        end: float,
        nbytes: int,
        index: int | None = None,
        key: Any = None,
        samples: tuple[int, ...] | None = None,
        busy: float | None = None,
    ) -> None:
        """Record a batch built between ``start`` and ``end`` (call it where it was
        built), with its samples' keys and its busy seconds where they are known."""
        self.channel.emit(built_here(start, end, nbytes, index, key, samples, busy))

    def consumed(
        self,
        requested: float,
        consumed: float,
        *,
        nbytes: int | None = None,
        key: Any = None,
        samples: list[int] | None = None,
        rows: int | None = None,
    ) -> None:
        """Record a batch handed to the consumer, asked for at ``requested``."""
        if self.run < 0:
            self.run_begin(requested)
        if not self._epoch_open:
            self.epoch_begin(requested)
        self._consumed.append(Consumed(requested, consumed, self.run, self.epoch, nbytes, key_of(key), samples, rows))

    def mark(self, kind: MarkKind, value: Any = None, t: float | None = None) -> None:
        self._marks.append(Mark(clock() if t is None else t, kind, value))

    def checkpoint(self) -> None:
        """Note that the loader's state was taken (a ``checkpoint`` mark), and tell
        :attr:`on_flush`, in this thread: what it hands over after is replayed
        where a run resumes from that state."""
        self.mark("checkpoint")
        if self.on_flush is not None:
            self.on_flush()

    def error(self, exc: BaseException) -> None:
        """Note an error that reached the consumer (the trace keeps what came before)."""
        self.mark("error", f"{type(exc).__name__}: {exc}")

    def run_begin(self, t: float | None = None) -> None:
        """A consuming loop starts (a ``fit``/``predict`` call, a ``for`` loop)."""
        self.run += 1
        self._active += 1
        self._store.keys = 0
        self.mark("run_begin", self.run, t)
        if self.keep_runs is not None and self._active == 1:
            self._forget(self.keep_runs)
        if self._sampler is not None:
            self._sampler.start()

    def run_end(self, t: float | None = None) -> None:
        if self._active == 0:
            return
        if self._epoch_open:
            self.epoch_end(t)
        self._active -= 1
        self.mark("run_end", self.run, t)
        if self._active == 0 and self._sampler is not None and not self._sample_across_runs:
            self._sampler.stop()

    def workers_ending(self) -> None:
        """Read the process tree now, while a run is on: the loader's worker
        processes are about to end, and this is their last reading, at their
        most grown (a worker that copies what it reads grows to its end, and
        the sampler's own readings, a fraction of a second apart, may all have
        come before that)."""
        if self._sampler is not None and self._active:
            self._sampler.read_now()

    def epoch_begin(self, t: float | None = None) -> None:
        if self._epoch_open:
            self.epoch_end(t)
        self.epoch += 1
        self._epoch_open = True
        self.mark("epoch_begin", self.epoch, t)

    def epoch_end(self, t: float | None = None) -> None:
        if self._epoch_open:
            self._epoch_open = False
            self.mark("epoch_end", self.epoch, t)

    def _forget(self, keep: int) -> None:
        """Let go of what was recorded before the last ``keep`` runs began."""
        begins = [m for m in self._marks if m.kind == "run_begin"]
        if len(begins) <= keep:
            return
        oldest = begins[-keep]
        cutoff = oldest.t
        self.channel.flush()
        if self.on_flush is not None:
            self.on_flush()
        # Each list is in the order it was recorded and earlier runs have ended:
        # what goes is a prefix, cut with `del` so a concurrent append is not lost.
        _cut_before(self._produced, lambda r: r.start, cutoff)
        _cut_before(self._memory, lambda m: m.t, cutoff)
        with self._cutting:
            self._consumed_gone += _cut_before(self._consumed, lambda c: c.requested, cutoff)
            marks = len(self._marks)
            self._marks[:] = [m for m in self._marks if m.t >= cutoff]
            self._marks_gone += marks - len(self._marks)
        self.meta.forgotten_runs = int(oldest.value)
        self.start = cutoff

    def produced_count(self) -> int:
        """Batches recorded as built so far (records still in the pipe included)."""
        self.channel.flush()
        return len(self._produced)

    @property
    def active(self) -> bool:
        return self._active > 0

    def consumed_from(self, start: int) -> list[Consumed]:
        """The batches handed over from the ``start``-th on (counted from the
        first, those let go with ``keep_runs`` too), as recorded so far."""
        with self._cutting:
            return self._consumed[max(0, start - self._consumed_gone) :]

    def marks_from(self, start: int) -> list[Mark]:
        """The marks from the ``start``-th on (counted as :meth:`consumed_from` does)."""
        with self._cutting:
            return self._marks[max(0, start - self._marks_gone) :]

    def live(self, window: float = 2.0, now: float | None = None) -> Live:
        """:class:`Live`: the last ``window`` seconds, read without a copy of the
        records (a batch built and not yet taken counts as in flight; records
        still in a worker's pipe count once they arrive).

        >>> rec = Recorder(TraceMeta(), sample_memory=False)
        >>> t = rec.start + 2; rec.produced(t, t, 8); rec.produced(t, t, 8); rec.consumed(t - 0.5, t)
        >>> live = rec.live(window=2.0, now=t + 1.0)
        >>> live.in_flight, live.in_flight_bytes, live.rate, live.waiting
        (1, 8, 0.5, 0.25)
        >>> rec.close()
        """
        now = clock() if now is None else now
        since = now - window
        produced, consumed = self._produced, self._consumed
        ahead = max(0, len(produced) - len(consumed))
        recent: list[Consumed] = []
        for c in reversed(consumed[-4096:]):
            if c.consumed < since:
                break
            recent.append(c)
        span = min(window, max(1e-9, now - self.start))
        waited = sum(c.consumed - max(c.requested, since) for c in recent)
        memory = self._memory[-1:] if self._memory else []
        return Live(
            rate=len(recent) / span,
            waiting=min(1.0, waited / span),
            in_flight=ahead,
            in_flight_bytes=sum(b.nbytes for b in produced[len(produced) - ahead :]) if ahead else 0,
            rss=memory[0].rss if memory else None,
            batches=len(consumed),
        )

    def trace(self) -> Trace:
        """A snapshot of everything recorded so far, as plain data."""
        self.channel.flush()
        parent = os.getpid()
        produced = [
            Produced(
                b.start,
                b.end,
                b.nbytes,
                b.batch_index,
                b.key,
                str(b.pid) if b.pid != parent else f"thread-{b.thread}",
                samples=None if b.samples is None else list(b.samples),
                busy=b.busy,
            )
            for b in list(self._produced)
        ]
        produced.sort(key=lambda p: p.start)
        consumed = list(self._consumed)
        marks = sorted(self._marks, key=lambda m: m.t)
        memory = list(self._memory)
        times = [self.start] + [p.end for p in produced] + [c.consumed for c in consumed]
        times += [m.t for m in marks]
        return Trace(
            meta=dataclasses.replace(self.meta, settings=_copy(self.meta.settings), extra=dict(self.meta.extra)),
            start=self.start,
            end=max(times),
            produced=produced,
            consumed=consumed,
            marks=marks,
            memory=memory,
        )

    def close(self) -> None:
        """End any open run and stop the helper threads (idempotent)."""
        while self._active:
            self.run_end()
        self._finalizer()


_R = TypeVar("_R")


def _cut_before(records: list[_R], when: Callable[[_R], float], cutoff: float) -> int:
    """Drop the records before the first one ``when`` places at ``cutoff`` or later; how many."""
    cut = next((i for i, r in enumerate(records) if when(r) >= cutoff), len(records))
    del records[:cut]
    return cut


def _shutdown(channel: Channel, sampler: MemorySampler | None) -> None:
    if sampler is not None:
        sampler.stop()
    channel.close()


def _copy(settings: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if settings is None else dict(settings)


def recorded(
    source: Iterator[Any],
    recorder: Recorder,
    record: Callable[[float, float, Any], None],
    close_source: bool = False,
) -> Iterator[Any]:
    """A generator over ``source`` that times each ``next`` and passes (asked, got,
    batch) to ``record`` before handing the batch on. Unless a callback records
    consumption, the pass is one run. An error from ``source`` is noted on the
    recorder and raised; with ``close_source`` the source is closed when the
    generator ends.

    >>> rec = Recorder(TraceMeta(), sample_memory=False)
    >>> seen = []
    >>> list(recorded(iter("ab"), rec, lambda asked, got, batch: seen.append(batch)))
    ['a', 'b']
    >>> seen, [m.kind for m in rec.trace().marks]
    (['a', 'b'], ['run_begin', 'run_end'])
    >>> rec.close()
    """
    own_runs = recorder.consumer == "iterator"
    if own_runs:
        recorder.run_begin()
    try:
        while True:
            asked = clock()
            try:
                out = [next(source)]
            except StopIteration:
                return
            record(asked, clock(), out[0])
            # Yielded by a pop: while waiting at the yield the generator holds no
            # batch, so one the consumer lets go is freed then, as without it.
            yield out.pop()
    except GeneratorExit:
        raise
    except BaseException as exc:
        recorder.error(exc)
        raise
    finally:
        if close_source:
            close = getattr(source, "close", None)
            if close is not None:
                close()
        if own_runs:
            recorder.run_end()
