"""Worker threads of this process (:class:`ThreadWorkers`), fed from one queue."""

from __future__ import annotations

import concurrent.futures as cf
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from ...record.nbytes import nbytes
from .base import Job


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
                target=serve,
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
        for job in drain(self._jobs):
            if isinstance(job, tuple):
                job[0].cancel()
        self._stop()
        if wait:
            me = threading.current_thread()
            for thread in self._threads:
                if thread is not me:
                    thread.join()


def serve(jobs: queue.SimpleQueue[Job], build: Callable[[Any], Any], timed: bool) -> None:
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


def later(jobs: queue.SimpleQueue[Job], serving: threading.Event, action: Callable[[], None]) -> bool:
    """Queue ``action`` for a starter thread that serves (a put, safe in a finalizer); False where none does."""
    if not serving.is_set():
        return False
    jobs.put(action)
    return True


def drain(jobs: queue.SimpleQueue[Job]) -> list[Job]:
    """Take off ``jobs`` what is on it now, and return it."""
    taken = []
    while True:
        try:
            taken.append(jobs.get_nowait())
        except queue.Empty:
            return taken


def no_build(indices: Any) -> Any:
    raise RuntimeError("a thread that runs deferred actions was given a batch to build")


def _stop_serving(jobs: queue.SimpleQueue[Job], threads: list[threading.Thread]) -> None:
    for _ in threads:
        jobs.put(None)
