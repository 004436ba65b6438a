"""The workers that build a prefetcher's batches, behind one interface: threads of
this process (:class:`ThreadWorkers`) or worker processes whose arrays come back
through /dev/shm (:class:`ProcessWorkers`)."""

from __future__ import annotations

import concurrent.futures as cf
import functools
import multiprocessing.context
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from ..frameworks import TENSORS
from ..nbytes import nbytes
from ..recorder import OWN_HELPERS, Channel, built_here, busy_time, clock
from ..units import format_bytes
from . import heap, lifeline, shm, warden
from .batch import make_batch
from .collate import batch_bytes_guess
from .errors import SharedMemoryWarning, WorkerError

# The warden is no loader's worker: memory readings and the checks of what is left running leave it out.
OWN_HELPERS.append(warden.pid)

# Seconds between checks that the worker processes are alive, while the consumer waits.
LIVENESS = 0.5

# What a worker thread takes from its queue: a batch to build (its future and
# indices), something to do before its next build, or None to end.
Job = tuple[cf.Future[Any], Any] | Callable[[], None] | None


class _EndMarker:
    def __repr__(self) -> str:
        return "<end of iterable>"


#: What a plain iterable's worker returns once the iterable is exhausted.
END = _EndMarker()


class Workers(Protocol):
    """What an epoch needs of its workers, whether threads or processes.

    ``count``: batches built at once. ``poll``: seconds between liveness checks
    (:meth:`dead`) while the consumer waits; None when there is nothing to check.
    ``capacity``: the most workers :meth:`resize` can give. ``gate``: the most
    batches submitted and not built at once, or None for no limit: a batch
    submitted long before it starts would be reserved as the batches were then. ``sized_first``: whether the first
    batch waits for its size to be guessed (:meth:`guess`), so that it is built
    where the others are rather than apart and copied.

    >>> workers: Workers = ThreadWorkers(1, str)
    >>> workers.count, workers.poll, workers.gate, workers.sized_first
    (1, None, 1, False)
    """

    count: int
    capacity: int
    poll: float | None
    sized_first: bool

    @property
    def gate(self) -> int | None: ...

    def submit(self, indices: Any, reserve: int = 0) -> cf.Future[Any]:
        """Start building the batch made of ``indices``, ``reserve`` bytes or less as far as known."""
        ...

    def resize(self, count: int) -> None:
        """Build ``count`` batches at once from now on (1 to ``capacity``)."""
        ...

    def defer(self, action: Callable[[], None]) -> bool:
        """Have ``action`` run on a thread of the workers' (a worker thread, before
        it takes its next batch; the worker processes' starter thread), and say
        True; False where these workers cannot (the caller runs it itself)."""
        ...

    def guess(self, index: Any) -> cf.Future[int] | None:
        """Start guessing the bytes of a batch from its sample ``index`` (see
        :func:`.collate.batch_bytes_guess`); None where these workers cannot."""
        ...

    def spent(self, future: cf.Future[Any]) -> tuple[float, float] | None:
        """The CPU seconds and the seconds of the build whose result ``future`` holds, if known
        (told only by elastic workers, whose count is decided from them)."""
        ...

    def size(self, batch: Any) -> int:
        """Bytes of a built batch as it arrives from a worker."""
        ...

    def room(self, reserve: int) -> bool:
        """Whether the workers' own memory (shared memory) has room for a batch
        of ``reserve`` bytes more, once they let go of what they keep spare (a
        reckoning; :meth:`make_room` lets go of it)."""
        ...

    def make_room(self, reserve: int) -> bool:
        """Let go of what the workers keep spare until a batch of ``reserve``
        bytes more has room in their own memory; whether it has."""
        ...

    def rest(self) -> None:
        """Between two epochs, the workers idle: have them give back to the system
        what their allocators keep free (see :mod:`.heap`)."""
        ...

    def finish(self, batch: Any, until: float | None = None) -> str | None:
        """Wait until a built batch's arrays are all in place (a worker process
        may still be copying them): None once they are; else why not, "died" (a
        worker died first) or "late" (``until``, a :func:`~queuetune.recorder.clock`
        time, passed first)."""
        ...

    def adopt(self, batch: Any) -> Any:
        """The built batch as the consumer gets it (after :meth:`finish`)."""
        ...

    def discard(self, batch: Any) -> None:
        """Let go of a built batch that will never be handed over."""
        ...

    def dead(self) -> bool:
        """Whether a worker process has exited."""
        ...

    def pool_bytes(self) -> int | None:
        """The bytes of shared memory kept for batches (lent, holding, or spare); None where none is."""
        ...

    def usable(self) -> bool:
        """Whether the workers can build another epoch's batches: not shut down, none dead."""
        ...

    def deaths(self) -> list[str]:
        """The worker processes that died, each as its pid and how it ended."""
        ...

    def unsendable(self, exc: BaseException) -> bool:
        """Whether ``exc`` says a built batch could not be sent back from its worker (not picklable)."""
        ...

    def shutdown(self, wait: bool, unclaimed: Iterable[cf.Future[Any]]) -> None:
        """Stop the workers; then let go of what ``unclaimed`` built (never to be handed over)."""
        ...


class ThreadWorkers:
    """``count`` threads of this process, each building with ``build(indices)``.

    Started at once and fed from one queue: a submit is a future and a put,
    nothing more. What the consumer's thread would otherwise do at every batch
    (start the next) is put on that queue too (:meth:`defer`), for the thread
    that builds it. Up to ``capacity``, :meth:`resize` starts more threads or
    ends some (each as it finishes its build).

    >>> workers = ThreadWorkers(2, lambda indices: indices * 10)
    >>> batch = workers.submit(4).result()
    >>> batch, workers.size(batch), workers.adopt(batch)
    (40, 0, 40)
    >>> workers.shutdown(wait=True, unclaimed=[])
    """

    poll: float | None = None
    sized_first = False  # a thread's batch is where it was built: nothing to copy

    def __init__(
        self,
        count: int,
        build: Callable[[Any], Any],
        capacity: int | None = None,
        measure: Callable[[Any], int] | None = None,
    ) -> None:
        self.count = 0
        self.capacity = count if capacity is None else capacity
        # Given a capacity, the count is decided at run time from the builds' times.
        self._elastic = capacity is not None
        self._build = build
        self._measure = measure
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        # Threads left running by a prefetcher nobody closed end with it (one stop
        # for every thread started: those ended already leave theirs unread).
        self._stop = weakref.finalize(self, _stop_serving, self._jobs, self._threads)
        self.resize(count)

    @property
    def gate(self) -> int | None:
        # A build starts as it is submitted, so the budget's room is reckoned with
        # the sizes known as it starts: none waits in the queue, reserved as the
        # batches were before they grew.
        return self.count

    def resize(self, count: int) -> None:
        if not 1 <= count <= self.capacity:
            raise ValueError(f"worker count must be from 1 to {self.capacity}, got {count}")
        if not self._stop.alive:  # shut down meanwhile: no thread to start or end
            return
        for _ in range(count, self.count):
            self._jobs.put(None)
        for _ in range(self.count, count):
            i = len(self._threads)
            thread = threading.Thread(
                target=_serve,
                args=(self._jobs, self._build, self._elastic),
                name=f"queuetune-prefetch_{i}",
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()
        self.count = count

    def spent(self, future: cf.Future[Any]) -> tuple[float, float] | None:
        return getattr(future, "spent", None)

    def submit(self, indices: Any, reserve: int = 0) -> cf.Future[Any]:
        if not self._stop.alive:
            raise RuntimeError("cannot submit to workers that were shut down")
        future: cf.Future[Any] = cf.Future()
        self._jobs.put((future, indices))
        return future

    def defer(self, action: Callable[[], None]) -> bool:
        if not self._stop.alive:
            return False
        self._jobs.put(action)
        return True

    def guess(self, index: Any) -> cf.Future[int] | None:
        measure = self._measure
        if measure is None or not self._stop.alive:
            return None
        future: cf.Future[int] = cf.Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(measure(index))
                except Exception as exc:
                    future.set_exception(exc)

        self._jobs.put(run)
        return future

    def size(self, batch: Any) -> int:
        return nbytes(batch)

    def room(self, reserve: int) -> bool:
        return True

    def make_room(self, reserve: int) -> bool:
        return True

    def rest(self) -> None:
        pass  # the threads' memory is the consumer's process's own

    def finish(self, batch: Any, until: float | None = None) -> str | None:
        return None

    def adopt(self, batch: Any) -> Any:
        return batch

    def discard(self, batch: Any) -> None:
        pass

    def dead(self) -> bool:
        return False

    def pool_bytes(self) -> int | None:
        return None

    def usable(self) -> bool:
        return self._stop.alive

    def deaths(self) -> list[str]:
        return []

    def unsendable(self, exc: BaseException) -> bool:
        return False

    def shutdown(self, wait: bool, unclaimed: Iterable[cf.Future[Any]]) -> None:
        """Stop the threads, cancelling builds not started; ``wait=False``: builds
        still running finish in the background. Once stopped, a second call does nothing."""
        if not self._stop.alive:
            return
        for job in _drain(self._jobs):
            if isinstance(job, tuple):
                job[0].cancel()
        self._stop()
        if wait:
            me = threading.current_thread()
            for thread in self._threads:
                if thread is not me:
                    thread.join()


def _serve(jobs: queue.SimpleQueue[Job], build: Callable[[Any], Any], timed: bool) -> None:
    """A worker thread: build what ``jobs`` brings, or do it, until it brings
    None; ``timed``: tell each build's CPU seconds and seconds on its future
    (``spent``)."""
    while True:
        job = jobs.get()
        if job is None:
            return
        if not isinstance(job, tuple):
            job()
            del job  # it holds its epoch: not while this thread waits
            continue
        future, indices = job
        del job
        if not future.set_running_or_notify_cancel():
            continue
        if timed:
            cpu, start = time.thread_time(), time.perf_counter()
        try:
            batch = build(indices)
        except BaseException as exc:  # the consumer gets it through the future
            future.set_exception(exc)
        else:
            if timed:  # before the result: the future's callbacks read it
                future.spent = (time.thread_time() - cpu, time.perf_counter() - start)  # type: ignore[attr-defined]
            future.set_result(batch)
            del batch
        del future


def _later(jobs: queue.SimpleQueue[Job], serving: threading.Event, action: Callable[[], None]) -> bool:
    """Queue ``action`` for a starter thread that serves (a put, safe in a finalizer); False where none does."""
    if not serving.is_set():
        return False
    jobs.put(action)
    return True


def _drain(jobs: queue.SimpleQueue[Job]) -> list[Job]:
    """Take off ``jobs`` what is on it now, and return it."""
    taken = []
    while True:
        try:
            taken.append(jobs.get_nowait())
        except queue.Empty:
            return taken


def _no_build(indices: Any) -> Any:
    raise RuntimeError("a thread that runs deferred actions was given a batch to build")


def _stop_serving(jobs: queue.SimpleQueue[Job], threads: list[threading.Thread]) -> None:
    for _ in threads:
        jobs.put(None)


class ProcessWorkers:
    """``count`` worker processes, started at once, each building batches of
    ``source`` (see :func:`_start_workers` for why at once). A batch's large
    arrays and tensors are built in (or copied to) a shared-memory segment lent
    for it from a pool of reused ones, and come back as descriptors (:mod:`.shm`),
    opened as arrays over the segment (made as the build settles, on the pool's
    thread: :meth:`.shm.Pool.prepare`; taken when the consumer gets them). A
    large copy is made behind the worker's next build (:class:`Shipper`):
    :meth:`finish` waits for it.

    What the consumer's thread would otherwise do at every hand-over (start the
    next batch: the submit and its shared memory's book-keeping; take back the
    segments of the batch it let go of: most of a hand-over's cost) is done on a
    thread of these workers' own (:meth:`defer`, :attr:`.shm.Pool.later`) while
    the consumer steps.

    With a ``capacity``, the pool holds that many processes and :meth:`resize`
    changes how many build at once: while fewer than all, the schedule submits
    no more batches than that (an idle process would take one more).
    With ``fork`` all of them are forked at the start, since forking later, with
    threads running, is not safe; with ``spawn`` and ``forkserver`` each starts
    when first needed. A process not needed any more idles until the epoch ends.

    >>> import multiprocessing
    >>> import numpy as np
    >>> from queuetune.recorder import Channel
    >>> source = [np.full(100_000, i) for i in range(3)]
    >>> channel = Channel(list().append, processes=True)
    >>> workers = ProcessWorkers(1, source, None, None, channel, multiprocessing.get_context())
    >>> sent = workers.submit(2).result()
    >>> type(sent).__name__, workers.size(sent), int(workers.adopt(sent)[0])
    ('Shipped', 800000, 2)
    >>> workers.shutdown(wait=True, unclaimed=[]); channel.close()
    """

    poll: float | None = LIVENESS
    # A batch of no known size is built in the worker's own memory and copied: the
    # worker's allocator then keeps that much more for good (glibc's mmap threshold
    # rises to it), 14 MiB of 9.2 MiB batches read in a worker of real_pipeline.py.
    sized_first = True

    def __init__(
        self,
        count: int,
        source: Any,
        batch_size: int | None,
        collate_fn: Callable[[list[Any]], Any] | None,
        channel: Channel,
        context: multiprocessing.context.BaseContext,
        capacity: int | None = None,
        budget: int | None = None,
    ) -> None:
        self.count = count
        self.capacity = count if capacity is None else capacity
        self._elastic = capacity is not None
        # What killed prefetchers left: gone before this pool's room is counted.
        shm.sweep_orphans()
        self.budget = budget
        if budget is not None:
            _check_room(budget)
        self.segments = shm.Pool(os.getpid(), budget=budget, context=context)
        self._shut = False
        #: The bytes the workers gave back to the system between epochs (see :meth:`rest`).
        self.handed_back = 0
        # Batches dropped while a copy into their segments was under way: each
        # goes back to the pool once its copy is made (see _take_back_copied).
        self._limbo: list[shm.Shipped] = []
        # Guards the limbo and the counts of releases taken: the consumer's
        # thread and the pool's (through callbacks) both take releases.
        self._counting = threading.Lock()
        # The worker processes, kept to name the one that died.
        self._processes: dict[int, Any] = {}
        # Each worker process takes a slot as it starts; its semaphore is released
        # once for every copy made behind a build, and ``_copied`` counts the
        # releases taken here.
        self._done = [context.Semaphore(0) for _ in range(self.capacity)]
        self._copied = [0] * self.capacity
        # The thread that runs what the consumer defers (see defer), started at the
        # first: after a fork of every worker, so no thread of it is copied there.
        self._deferred: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._starter: threading.Thread | None = None
        # Set while that thread serves: a batch let go of returns its segment there too.
        self._serving = threading.Event()
        self._starting = threading.Lock()
        self.segments.later = functools.partial(_later, self._deferred, self._serving)
        self._pool = cf.ProcessPoolExecutor(
            self.capacity,
            mp_context=context,
            initializer=_init_process,
            initargs=(
                source,
                batch_size,
                collate_fn,
                channel,
                os.getpid(),
                self.segments.prefix,
                self.segments.shelf,
                self._done,
                context.Value("i", 0),
            ),
        )
        try:
            with channel.reader_paused():
                _start_workers(self._pool, count)
        except (TypeError, AttributeError, pickle.PicklingError) as exc:
            self._abandon()
            method = context.get_start_method()
            raise TypeError(
                f"the source or collate_fn could not be sent to a worker process started with {method!r} "
                f"({type(exc).__name__}: {exc}): with 'spawn' or 'forkserver' they must be picklable "
                "(defined at a module's top level); use multiprocessing_context='fork' or mode='thread'"
            ) from exc
        except BaseException:
            self._abandon()
            raise
        # From here on this process's death ends the workers and removes the files also where a
        # build holds a worker's GIL and its lifeline thread cannot run (see .warden).
        warden.guard(self.segments.prefix, shm.ROOT)
        self._track()

    def _abandon(self) -> None:
        """After a start that failed: no process, no file left."""
        self._shut = True
        _shutdown(self._pool)
        self.segments.close()

    def submit(self, indices: Any, reserve: int = 0) -> cf.Future[shm.Shipped]:
        if self._limbo:
            self._take_back_copied()
        lease = self.segments.lend(reserve)
        try:
            future = self._pool.submit(_build_in_process, indices, lease)
        except BrokenProcessPool as exc:  # a worker died: this batch fails like the others
            future = cf.Future()
            future.set_exception(exc)
        self._track()
        # First of the future's callbacks: the batch's segments are known before anything else sees it.
        future.add_done_callback(functools.partial(self._settle, lease))
        return future

    def _track(self) -> None:
        """Keep the pool's processes started since the last look (with ``spawn`` and
        ``forkserver`` a submit may start one), and tell the warden of them."""
        known = len(self._processes)
        self._processes.update(getattr(self._pool, "_processes", None) or {})
        if len(self._processes) != known:
            warden.watch(self.segments.prefix, list(self._processes))

    @property
    def gate(self) -> int | None:
        # One batch waiting for each process as it builds: it starts the next at
        # once, and no more wait, reserved as the batches were before they grew.
        return self.count if self.count < self.capacity else 2 * self.count

    def resize(self, count: int) -> None:
        if not 1 <= count <= self.capacity:
            raise ValueError(f"worker count must be from 1 to {self.capacity}, got {count}")
        self.count = count

    def defer(self, action: Callable[[], None]) -> bool:
        with self._starting:  # no thread started, nor action queued, once shutdown has stopped it
            if self._shut:
                return False
            if self._starter is None:
                self._starter = threading.Thread(
                    target=_serve, args=(self._deferred, _no_build, False), name="queuetune-starter", daemon=True
                )
                self._starter.start()
                self._serving.set()
            self._deferred.put(action)
        return True

    def guess(self, index: Any) -> cf.Future[int] | None:
        try:
            future = self._pool.submit(_guess_in_process, index)
        except BrokenProcessPool:
            return None
        self._track()
        return future

    def spent(self, future: cf.Future[shm.Shipped]) -> tuple[float, float] | None:
        if not self._elastic or future.cancelled() or future.exception() is not None:
            return None
        return future.result().spent

    def _settle(self, lease: shm.Lease, future: cf.Future[shm.Shipped]) -> None:
        failure = None if future.cancelled() else future.exception()
        if failure is not None and self.unsendable(failure):
            # Built, but not sent: its copy may still be under way (see Shipper), so
            # its segment is never lent again, and shutdown removes it.
            return
        shipped = future.result() if not future.cancelled() and failure is None else None
        self.segments.settle(shipped, lease)
        if shipped is not None:
            self.segments.prepare(shipped)

    def size(self, batch: shm.Shipped) -> int:
        return batch.nbytes

    def room(self, reserve: int) -> bool:
        return self.segments.room(reserve)

    def make_room(self, reserve: int) -> bool:
        return self.segments.make_room(reserve)

    def rest(self) -> None:
        if self._shut:
            return
        for _ in range(self.count):  # one each, as every one is idle and takes the next job
            try:
                future = self._pool.submit(heap.hand_back)
            except (BrokenProcessPool, RuntimeError):  # dead or shut down: the epoch's end says so
                return
            future.add_done_callback(self._handed_back)
        self._track()

    def _handed_back(self, future: cf.Future[int]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.handed_back += future.result()

    def finish(self, batch: shm.Shipped, until: float | None = None) -> str | None:
        if batch.pending is None:
            return None
        slot = batch.pending[0]
        while self._copying(batch):
            piece = LIVENESS if until is None else max(0.0, min(LIVENESS, until - clock()))
            if self._done[slot].acquire(timeout=piece):
                self._took(slot)
            elif self.dead():
                return "died"
            elif until is not None and clock() >= until:
                return "late"
        return None

    def _copying(self, batch: shm.Shipped) -> bool:
        """Whether a copy made behind a build may still be filling ``batch``'s
        segments: its worker's releases taken here do not yet reach its number."""
        return batch.pending is not None and self._copied[batch.pending[0]] <= batch.pending[1]

    def adopt(self, batch: shm.Shipped) -> Any:
        return self.segments.open(batch)

    def discard(self, batch: shm.Shipped) -> None:
        if self._copying(batch):
            # Its worker may still be copying into its segments: not lent again
            # before the copy is made (or, if never, removed by shutdown).
            with self._counting:
                self._limbo.append(batch)
            return
        self.segments.discard(batch)

    def _took(self, slot: int) -> None:
        with self._counting:
            self._copied[slot] += 1

    def _take_back_copied(self) -> None:
        """Give the pool back the segments of dropped batches whose copies are made."""
        with self._counting:
            limbo, self._limbo = self._limbo, []
        for batch in limbo:
            slot = batch.pending[0]  # type: ignore[index]
            while self._copying(batch) and self._done[slot].acquire(block=False):
                self._took(slot)
            if self._copying(batch):
                with self._counting:
                    self._limbo.append(batch)
            else:
                self.segments.discard(batch)

    def dead(self) -> bool:
        return any(process.exitcode is not None for process in list(self._processes.values()))

    def pool_bytes(self) -> int | None:
        return self.segments.bytes

    def usable(self) -> bool:
        return not self._shut and not self.dead() and not getattr(self._pool, "_broken", False)

    def deaths(self) -> list[str]:
        dead = []
        for pid, process in list(self._processes.items()):
            process.join(timeout=1)
            code = process.exitcode
            # The pool's thread may be reaping it at this moment: then the code comes a moment later.
            for _ in range(100):
                if code is not None:
                    break
                time.sleep(0.01)
                code = process.exitcode
            if code is None or code == 0 or code == -signal.SIGTERM:  # the pool's own shutdown
                continue
            if code == -signal.SIGBUS:
                how = f"killed by SIGBUS: {_out_of_room(self.budget)}"
            elif code < 0:
                try:
                    how = f"killed by {signal.Signals(-code).name}"
                except ValueError:
                    how = f"killed by signal {-code}"
            else:
                how = f"exit code {code}"
            dead.append(f"pid {pid}, {how}")
        return dead

    def unsendable(self, exc: BaseException) -> bool:
        return "in _sendback_result" in str(exc.__cause__ or "")

    def shutdown(self, wait: bool, unclaimed: Iterable[cf.Future[Any]]) -> None:
        """Stop the processes and wait for them (whatever ``wait`` says), then
        remove the shared memory of every batch not handed over."""
        with self._starting:
            if self._shut:
                return
            self._shut = True
            starter = self._starter
            if starter is not None:  # what it was asked to do and has not begun is dropped
                self._serving.clear()
                _drain(self._deferred)
                self._deferred.put(None)
        if starter is not None and starter is not threading.current_thread():
            starter.join()
        _shutdown(self._pool)
        self.segments.close()
        warden.forget(self.segments.prefix)


def _check_room(budget: int) -> None:
    """Warn when :data:`.shm.ROOT` has less room than ``budget`` bytes of batches may take."""
    _, free = shm.space()
    if free >= budget:
        return
    warnings.warn(
        SharedMemoryWarning(
            f"the prefetcher's budget, max_bytes={format_bytes(budget)}, is more than the shared memory free "
            f"now ({shm.describe_space()}): once it is full a batch fails with SharedMemoryFull. Give the "
            "container more (docker run --shm-size=...), point QUEUETUNE_SHM_DIR at a larger tmpfs, "
            "or lower max_bytes"
        ),
        stacklevel=4,
    )


def _out_of_room(budget: int | None) -> str:
    """Why a worker most likely died of SIGBUS: a page of shared memory it wrote had no room."""
    said = "" if budget is None else f"; the prefetcher's budget is max_bytes={format_bytes(budget)}"
    return (
        f"shared memory exhausted, most likely ({shm.describe_space()}{said}): give the container more "
        "(docker run --shm-size=...), point QUEUETUNE_SHM_DIR at a larger tmpfs, or lower max_bytes"
    )


class Pull:
    """Builds a plain iterable's batches: its next item each call, :data:`END` after
    the last (one worker thread calls it, so the items come in order).

    >>> from queuetune.recorder import Channel
    >>> pull = Pull(iter("ab"), Channel(list().append, processes=False))
    >>> pull(None), pull(None), pull(None)
    ('a', 'b', <end of iterable>)
    """

    def __init__(self, iterator: Iterator[Any], channel: Channel) -> None:
        self._iterator = iterator
        self._channel = channel
        self._lock = threading.Lock()

    def __call__(self, indices: None) -> Any:
        with self._lock:
            start, busy = clock(), busy_time()
            try:
                batch = next(self._iterator)
            except StopIteration:
                return END
            _emit(self._channel, start, batch, None, busy)
            return batch


def build(
    source: Any, batch_size: int | None, collate_fn: Callable[[list[Any]], Any] | None, channel: Channel, indices: Any
) -> Any:
    """Make the batch of ``source`` at ``indices`` (see :func:`.make_batch`) and record it to ``channel``.

    >>> from queuetune.recorder import Channel
    >>> records = []
    >>> build(["x", "y"], None, None, Channel(records.append, processes=False), 1), records[0].batch_index
    ('y', 1)
    """
    start, busy = clock(), busy_time()
    batch = make_batch(source, indices, batch_size, collate_fn)
    _emit(channel, start, batch, indices, busy)
    return batch


def _emit(channel: Channel, start: float, batch: Any, indices: Any, busy: float | None = None) -> None:
    key = None if indices is None else (tuple(indices) if isinstance(indices, list) else indices)
    index = indices if isinstance(indices, int) else None
    spent = None if busy is None else busy_time() - busy
    channel.emit(built_here(start, clock(), nbytes(batch), index, key, busy=spent))


#: Copies of this many bytes or more (a batch's in all) are made behind the worker's next build.
#: Below it the copy costs little more than handing it to a thread: for 1 MiB batches
#: of a CPU-bound load on 2 cores, deferring gained nothing (304.0/s against 306.4/s).
BEHIND = 4 << 20


class Shipper:
    """Makes a built batch's copies into shared memory in a worker process: at
    once when small or when the source may still reach what they copy from
    (see :func:`.shm.unshared`), else in a thread of its own while the worker
    builds its next batch (numpy copies without the GIL), one batch at a time.
    The batch is then sent marked ``pending`` with the worker's ``slot`` and
    the copy's number; ``done`` (the slot's semaphore) is released as each
    copy ends, and the receiver waits for it before opening the batch.

    >>> import numpy as np
    >>> shipper = Shipper(0, threading.Semaphore(0))
    >>> target, array = np.zeros(BEHIND // 8), np.ones(BEHIND // 8)
    >>> shipped = shm.Shipped(None, None, {}, array.nbytes)
    >>> shipper.send(shipped, [(target, array)], behind=True); shipped.pending
    (0, 0)
    >>> shipper.done.acquire(timeout=5), float(target.sum()) == array.size
    (True, True)
    >>> shipper.close()
    """

    def __init__(self, slot: int | None, done: Any) -> None:
        self.slot, self.done = slot, done
        self.sent = 0
        self._jobs: queue.SimpleQueue[list[shm.Copy] | None] = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None

    def send(self, shipped: shm.Shipped, copies: list[shm.Copy], behind: bool) -> None:
        """Make ``copies`` for ``shipped`` now, or, where ``behind`` allows it,
        start them and mark it pending."""
        if not behind or self.slot is None or sum(array.nbytes for _, array in copies) < BEHIND:
            shm.copy(copies)
            return
        if self._thread is None:
            thread = threading.Thread(target=self._run, name="queuetune-ship", daemon=True)
            thread.start()  # first: if it cannot start, no copy is numbered and the thread is not awaited
            self._thread = thread
        self._idle.wait()
        self._idle.clear()
        shipped.pending = (self.slot, self.sent)
        self.sent += 1
        self._jobs.put(copies)

    def close(self) -> None:
        """End the thread once its copy is made (a worker process never needs to:
        the thread ends with it)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            copies = self._jobs.get()
            if copies is None:
                return
            try:
                shm.copy(copies)
            except BaseException:
                # Not a copy the receiver may wait for in vain: the worker ends, and is reported dead.
                traceback.print_exc()
                os._exit(1)
            del copies
            self.done.release()
            self._idle.set()


_WORKER: dict[str, Any] = {}


def _init_process(
    source: Any,
    batch_size: int | None,
    collate_fn: Callable[[list[Any]], Any] | None,
    channel: Channel,
    owner: int,
    prefix: str,
    shelf: shm.Shelf,
    done: list[Any],
    slots: Any,
) -> None:
    # First: a worker whose owner dies while it starts still goes, and takes the owner's files with it.
    lifeline.watch(owner, functools.partial(shm.sweep_pool, prefix))
    with slots.get_lock():
        slot = slots.value
        slots.value += 1
    shipper = Shipper(slot, done[slot]) if slot < len(done) else Shipper(None, None)
    shm._SHELF[:] = [shelf]
    _WORKER.update(
        source=source, batch_size=batch_size, collate_fn=collate_fn, channel=channel, owner=owner, shipper=shipper
    )
    for tensors in TENSORS.values():
        tensors.in_worker_process()
    heap.keep_for_builds()


def _start_workers(pool: cf.ProcessPoolExecutor, workers: int) -> None:
    """Start the pool's worker processes now, while no thread of queuetune's runs.

    A forked child gets a copy of every lock in the parent as it stood at the
    fork, and a lock that another thread held then stays held in the child for
    ever. So the workers are forked here, as the epoch is created, in the
    consumer's own thread: before the epoch's lock is first taken, before any
    build is submitted (so no callback of ours runs), before the recorder's
    memory sampler starts (it runs from the epoch's first batch), with the
    previous epoch's pool shut down and the recorder's pipe reader paused by
    the caller. No thread of queuetune's is alive at the fork, and the child
    writes its records with a bare ``os.write``, taking no lock. The pool forks
    every worker at its first submit (``fork``); with ``spawn`` and
    ``forkserver`` nothing is forked from this process, and each submit starts
    one more worker.
    """
    for _ in range(workers):
        pool.submit(os.getpid)


def _build_in_process(indices: Any, lease: shm.Lease) -> shm.Shipped:
    w = _WORKER
    cpu, start = time.process_time(), time.perf_counter()
    try:
        with shm.building(lease) as arena:
            batch = build(w["source"], w["batch_size"], w["collate_fn"], w["channel"], indices)
    except BaseException as exc:
        if _travels(exc):
            raise
        raise WorkerError.standing_for(exc) from exc
    refs = sys.getrefcount(batch)  # alone on its line: an expression around it would hold the batch too
    shipped, copies, alone = arena.plan(batch, shm.unshared(batch, refs))
    del batch
    w["shipper"].send(shipped, copies, behind=alone)
    shipped.spent = (time.process_time() - cpu, time.perf_counter() - start)
    return shipped


def _guess_in_process(index: Any) -> int:
    w = _WORKER
    return batch_bytes_guess(w["source"], w["batch_size"], index)


def _travels(exc: BaseException) -> bool:
    """Whether ``exc`` comes back from a worker process as itself: pickled and unpickled again.

    >>> class Two(Exception):
    ...     def __init__(self, a, b): super().__init__(f"{a} {b}")
    >>> _travels(KeyError("k")), _travels(Two(1, 2))
    (True, False)
    """
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return False
    return True


def _shutdown(pool: cf.ProcessPoolExecutor) -> None:
    processes = list((getattr(pool, "_processes", None) or {}).values())
    # shutdown(wait=False) forgets the pool's thread and its result pipe, so a later
    # shutdown(wait=True) neither joins the one nor closes the other.
    manager = getattr(pool, "_executor_manager_thread", None)
    results = getattr(pool, "_result_queue", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():  # SIGTERM blocked or handled by the source's own code
            process.kill()
            process.join(timeout=5)
    pool.shutdown(wait=True)
    if manager is not None:
        manager.join(timeout=5)
        if manager.is_alive():
            # A worker died in the middle of sending a result: the pool's thread
            # waits for the rest of the message for ever (and Python's exit joins
            # it), since this process holds the pipe's other end as well. With
            # the workers gone, closing that end ends the wait.
            writer = getattr(results, "_writer", None)
            if writer is not None:
                writer.close()
            manager.join(timeout=5)
