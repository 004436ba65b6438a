"""One epoch of a prefetcher: the consumer's loop over the batches a :class:`.Schedule`
keeps under way, with the decisions a :class:`.Steering` makes on each request,
and how the epoch stops."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..record.recorder import Recorder, clock
from . import faults
from .adaptive import DepthController
from .config import BatchSizes, EpochConfig
from .crew import WorkerController
from .errors import PrefetcherClosed
from .request import next_up, seen
from .resume import Progress
from .schedule import Schedule
from .steering import Steering
from .task import Seen, Task
from .workers import END, Workers


@dataclass(frozen=True)
class Handed:
    """Where an epoch's hand-overs are noted: its ``progress``, and the position
    in the epoch's whole plan of each of its own (``positions``: an epoch
    resumed builds only the batches left)."""

    progress: Progress
    positions: list[int]


class Epoch:
    """One pass: every batch of ``plan`` (or of a plain iterable, when ``plan`` is
    None) exactly once, built by ``workers`` (started by the caller), recorded to
    ``recorder``; the sizes of batches learned go to ``sizes``.

    Faults end the epoch with a clear error and nothing left behind (workers
    stopped, shared memory removed): a worker's exception reaches the consumer
    unchanged; a worker process that dies is a :class:`.WorkerDied`; a batch not
    ready within ``config.timeout`` seconds is a ``TimeoutError``; :meth:`stop` from
    another thread wakes a waiting consumer with :class:`.PrefetcherClosed`.

    >>> import functools
    >>> from queuetune.prefetch.workers import ThreadWorkers, build
    >>> from queuetune.record.trace import TraceMeta
    >>> recorder = Recorder(TraceMeta(loader="demo"), sample_memory=False)
    >>> workers = ThreadWorkers(2, functools.partial(build, "abc", None, None, recorder.channel))
    >>> config = EpochConfig(max_bytes=100, depth=1, max_depth=4, ordered=True, timeout=None)
    >>> list(Epoch(config, [0, 1, 2], workers, recorder, BatchSizes()).run())
    ['a', 'b', 'c']
    >>> len(recorder.trace().consumed); recorder.close()
    3
    """

    def __init__(
        self,
        config: EpochConfig,
        plan: list[Any] | None,
        workers: Workers,
        recorder: Recorder,
        sizes: BatchSizes,
        crew: WorkerController | None = None,
        controller: DepthController | None = None,
        handed: Handed | None = None,
    ) -> None:
        self.config = config
        # What of the epoch was handed over, for the prefetcher's state (see .resume).
        self.handed = handed
        self.workers = workers
        self.recorder = recorder
        self.schedule = Schedule(config, plan, workers, sizes, controller)
        # With workers="auto" (elastic workers): who decides how many build at once.
        self.crew = crew
        self.steering = Steering(self.schedule, recorder, crew)
        self.reason = ""
        # The process the epoch belongs to: a forked child that inherits it must not read it.
        self.pid = os.getpid()
        # The consumer's thread, once it started reading, and whether it is reading.
        self.consumer: int | None = None
        self.thread: threading.Thread | None = None
        self.running = False
        # Run by the consumer as it leaves the epoch: set by the handle's close(),
        # which cannot close what a consumer reading in another thread still uses.
        self.on_leave: Callable[[], Any] | None = None
        # Set by a device stage: where each hand-over's position goes instead of the
        # progress, which counts a batch once the stage hands it to the consumer.
        self.hold: Callable[[int], Any] | None = None

    @property
    def depth(self) -> int:
        """The current depth: batches allowed to be being built or ready."""
        return self.schedule.controller.depth

    def run(self, owner: object = None) -> Iterator[Any]:
        """The consumer's loop: yield each batch as it is handed over. ``owner``
        (the prefetcher) is kept alive while the loop is: a loop over a
        prefetcher it alone holds (``for b in Prefetcher(...)``) ends it as the
        loop ends or is dropped, not before."""
        schedule = self.schedule
        abandoned = False
        self._begin()
        try:
            with schedule.lock:
                schedule.fill()
            got = None
            pooled: int | None = None
            while True:
                if os.getpid() != self.pid:
                    raise faults.forked(self.pid)
                asked = clock()
                timeout = self.config.timeout
                deadline = None if timeout is None else asked + timeout
                found = self._next_task(deadline)
                if found is None:
                    return
                task, seen = found
                # In a list, yielded by a pop: while the generator waits at its
                # yield it holds no batch, and one the consumer lets go is freed then.
                out = [self._take(task, deadline)]
                if out[0] is END:
                    return
                step = None if got is None else asked - got
                got = clock()
                with schedule.lock:
                    self.steering.decide(seen, step, asked, got)
                    self.steering.start_more()
                pooled = self._note(task, asked, got, pooled)
                yield out.pop()
        except GeneratorExit:
            raise
        except BaseException as exc:
            self.recorder.error(exc)
            abandoned = True
            raise
        finally:
            self._leave(abandoned)

    def _begin(self) -> None:
        """The consumer begins reading in this thread."""
        self.consumer = threading.get_ident()
        self.thread = threading.current_thread()
        self.running = True
        self.recorder.run_begin()
        self.recorder.mark("depth", self.schedule.controller.depth)
        if self.crew is not None:
            self.recorder.mark("workers", self.workers.count)

    def _note(self, task: Task, asked: float, got: float, pooled: int | None) -> int | None:
        """Record ``task``'s hand-over, asked for at ``asked`` and handed at ``got``,
        and the workers' pool where it changed from ``pooled``; the pool's bytes now."""
        samples = task.indices if isinstance(task.indices, list) else None
        self.recorder.consumed(asked, got, nbytes=task.size, key=task.key, samples=samples)
        if self.handed is not None:
            (self.hold or self.handed.progress.handed)(self.handed.positions[task.position])
        pool = self.workers.pool_bytes()
        if pool is not None and pool != pooled:
            self.recorder.mark("pool", pool)
            return pool
        return pooled

    def _leave(self, abandoned: bool) -> None:
        """The consumer's loop ends: after a fault (``abandoned``), do not wait for
        builds still running in worker threads, and let the workers go (a build
        may hang, a process may be gone); an epoch read to its end or left
        (break) keeps them for the next. A forked child touches nothing of its parent's."""
        if os.getpid() != self.pid:
            return
        if self.handed is not None and self.hold is None:  # else the device stage says when it ends
            self.handed.progress.ended = True
        self.stop("the epoch ended", wait=not abandoned, release=abandoned)
        self.recorder.run_end()
        self.running = False
        if self.on_leave is not None:
            self.on_leave()

    def _next_task(self, deadline: float | None) -> tuple[Task, Seen] | None:
        """The task to hand over next, and what the request found before waiting."""
        schedule = self.schedule
        with schedule.lock:
            if schedule.stopped:
                raise self._closed_error()
            if schedule.total is not None and schedule.delivered >= schedule.total:
                return None
            if self.steering.deferred:  # the worker asked to start batches has not yet
                schedule.fill()
            pending = next_up(schedule)
            if not pending:
                if schedule.error is not None:
                    raise schedule.error
                if schedule.exhausted:
                    return None
                raise RuntimeError("prefetcher has nothing to wait for before the end of the epoch")
            for task in pending:
                if task.settled:
                    return task, seen(schedule, waited=False)
            found = seen(schedule, waited=True)
            schedule.idle.consumer_waits(True)
        return self._wait(pending, deadline), found

    def _wait(self, pending: list[Task], deadline: float | None) -> Task:
        """Wait until one of ``pending`` is built; a stop, the ``deadline`` (the
        request's timeout) or a dead worker process ends the wait with its error."""
        schedule = self.schedule
        timeout = self.config.timeout
        poll = self.workers.poll
        while True:
            remaining = None if deadline is None else max(0.0, deadline - clock())
            # In slices, to see a dead worker process even if the pool does not.
            piece = remaining if poll is None else min(poll if remaining is None else remaining, poll)
            task = schedule.wait_for(pending, piece)
            if schedule.stopped:
                raise self._closed_error()
            if task is not None:
                return task
            if deadline is not None and clock() >= deadline:
                raise faults.timed_out(pending, timeout)  # type: ignore[arg-type]
            if self.workers.dead():
                raise faults.worker_died(pending[0], self.workers.deaths())

    def _take(self, task: Task, deadline: float | None) -> Any:
        """``task``'s batch (its build settled), handed over once its copy is made
        (by ``deadline``, the request's timeout): a worker's fault is raised as
        its clearer error."""
        schedule = self.schedule
        # Settled, so its batch is set (only this thread takes it); not under the
        # lock, so that finished builds' callbacks go on while a copy is awaited.
        why = None if task.batch is None else self.workers.finish(task.batch, deadline)
        if why is not None:
            if schedule.stopped:
                raise self._closed_error()
            if why == "late":
                raise faults.timed_out([task], self.config.timeout)  # type: ignore[arg-type]
            raise faults.worker_died(task, self.workers.deaths())
        with schedule.lock:
            if schedule.stopped or task.cancelled:
                raise self._closed_error()
            failure = task.failure
            if failure is None:
                if schedule.error is not None:
                    raise schedule.error
                return schedule.hand_over(task)
        ours = faults.translate(task, failure, self.workers)
        if ours is None:
            raise failure
        raise ours from failure

    def _closed_error(self) -> PrefetcherClosed:
        return faults.closed(self.reason, self.schedule.delivered)

    def stop(self, reason: str = "the epoch ended", wait: bool = True, release: bool = True) -> None:
        """Cancel what is not started, drop what is built, and with ``release``
        stop the workers (else they stay for the next epoch: a build of this
        one still running ends in its worker and is dropped).

        ``wait=False``: do not wait for builds running in worker threads (they
        finish in the background and are dropped); worker processes are always
        stopped and waited for.
        """
        schedule = self.schedule
        with schedule.lock:
            if schedule.stopped:
                return
            schedule.stopped = True
            self.reason = reason
            tasks = list(schedule.tasks.values())
            schedule.changed.notify_all()
        for task in tasks:
            if task.future is not None:
                task.future.cancel()
        if release:
            self.workers.shutdown(wait, [task.future for task in tasks if task.future is not None])
        with schedule.lock:
            # Built and never to be handed over: back to the workers' memory (let go of
            # where they are gone), and held by no task that a traceback may keep.
            for task in tasks:
                if task.batch is not None and task.batch is not END and not release:
                    self.workers.discard(task.batch)
                task.batch = task.future = None
            schedule.clear()
        if not release:
            self.workers.rest()


def refuse_second_reader(epoch: Epoch | None) -> None:
    """Raise if another thread, still alive, is reading an epoch it has not finished."""
    if epoch is None or not epoch.running or epoch.thread is None:
        return
    reader = epoch.thread
    if reader is threading.current_thread() or not reader.is_alive():
        return
    raise RuntimeError(
        f"this Prefetcher is already being read by thread {reader.name!r} (an epoch it has not finished): "
        "a Prefetcher runs one epoch at a time; finish or leave that loop first, or give each thread "
        "a Prefetcher of its own"
    )
