"""Worker processes (:class:`ProcessWorkers`) whose arrays come back through
shared memory (:mod:`..shm`), started at once and shut down whatever state
they are in."""

from __future__ import annotations

import concurrent.futures as cf
import functools
import multiprocessing.context
import os
import pickle
import queue
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ...common.units import format_bytes
from ...record.recorder import OWN_HELPERS, Channel, clock
from .. import heap, shm, warden
from ..errors import SharedMemoryWarning
from . import threads
from .base import LIVENESS, Job
from .building import build_in_process, guess_in_process, init_process

# The warden is no loader's worker: memory readings and the checks of what is left running leave it out.
OWN_HELPERS.append(warden.pid)


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
    >>> from queuetune.record.recorder import Channel
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
        self.segments.later = functools.partial(threads.later, self._deferred, self._serving)
        self._pool = cf.ProcessPoolExecutor(
            self.capacity,
            mp_context=context,
            initializer=init_process,
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
        warden.guard(self.segments.prefix, shm.files.ROOT)
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
            future = self._pool.submit(build_in_process, indices, lease)
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
                    target=threads.serve,
                    args=(self._deferred, threads.no_build, False),
                    name="queuetune-starter",
                    daemon=True,
                )
                self._starter.start()
                self._serving.set()
            self._deferred.put(action)
        return True

    def guess(self, index: Any) -> cf.Future[int] | None:
        try:
            future = self._pool.submit(guess_in_process, index)
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
                threads.drain(self._deferred)
                self._deferred.put(None)
        if starter is not None and starter is not threading.current_thread():
            starter.join()
        _shutdown(self._pool)
        self.segments.close()
        warden.forget(self.segments.prefix)


def _check_room(budget: int) -> None:
    """Warn when :data:`.shm.files.ROOT` has less room than ``budget`` bytes of batches may take."""
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
