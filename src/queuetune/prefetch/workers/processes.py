"""Worker processes (:class:`ProcessWorkers`) whose arrays come back through
shared memory (:mod:`..shm`), started at once and shut down whatever state
they are in; made of their processes (:mod:`.lifecycle`), the copies made
behind their builds (:mod:`.copies`), their own thread (:mod:`.starter`) and
the pool of segments."""

from __future__ import annotations

import concurrent.futures as cf
import functools
import multiprocessing.context
import os
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ...common.units import format_bytes
from ...record.recorder import OWN_HELPERS, Channel
from .. import shm, warden
from ..errors import SharedMemoryWarning
from .base import LIVENESS
from .building import build_in_process, guess_in_process
from .copies import Copies
from .lifecycle import Processes
from .options import ProcessOptions
from .starter import Starter

# The warden is no loader's worker: memory readings and the checks of what is left running leave it out.
OWN_HELPERS.append(warden.pid)


class ProcessWorkers:
    """``count`` worker processes, started at once, each building batches of
    ``source`` (see :func:`.lifecycle._start_workers` for why at once). A batch's large
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

    Its arguments are checked into one :class:`.options.ProcessOptions`
    (:attr:`options`); its parts are the processes (:attr:`processes`, a
    :class:`.lifecycle.Processes`), the copies behind their builds
    (:attr:`copies`), its own thread (:attr:`starter`) and the pool of
    segments (:attr:`segments`).

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
        self.options = ProcessOptions.of(count, source, batch_size, collate_fn, context, capacity, budget)
        self.count = count
        self.capacity = self.options.capacity
        # What killed prefetchers left: gone before this pool's room is counted.
        shm.sweep_orphans()
        if budget is not None:
            _check_room(budget)
        self.segments = shm.Pool(os.getpid(), budget=budget, context=context)
        self.copies = Copies(context, self.capacity)
        # The thread that runs what the consumer defers (see defer); a batch let go
        # of returns its segment there too.
        self.starter = Starter()
        self.segments.later = self.starter.later
        try:
            self.processes = Processes(self.options, channel, self.segments, self.copies.done)
        except BaseException:  # after a start that failed: no process, no file left
            self.starter.stop()
            self.segments.close()
            raise

    def submit(self, indices: Any, reserve: int = 0) -> cf.Future[shm.Shipped]:
        for batch in self.copies.made():
            self.segments.discard(batch)
        lease = self.segments.lend(reserve)
        try:
            future = self.processes.submit(build_in_process, indices, lease)
        except BrokenProcessPool as exc:  # a worker died: this batch fails like the others
            future = cf.Future()
            future.set_exception(exc)
        # First of the future's callbacks: the batch's segments are known before anything else sees it.
        future.add_done_callback(functools.partial(_settle, self.segments, lease))
        return future

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
        return self.starter.defer(action)

    def guess(self, index: Any) -> cf.Future[int] | None:
        try:
            return self.processes.submit(guess_in_process, index)
        except BrokenProcessPool:
            return None

    def spent(self, future: cf.Future[shm.Shipped]) -> tuple[float, float] | None:
        if not self.options.elastic or future.cancelled() or future.exception() is not None:
            return None
        return future.result().spent

    def size(self, batch: shm.Shipped) -> int:
        return batch.nbytes

    def room(self, reserve: int) -> bool:
        return self.segments.room(reserve)

    def make_room(self, reserve: int) -> bool:
        return self.segments.make_room(reserve)

    def rest(self) -> None:
        if not self.starter.stopped:
            self.processes.rest(self.count)

    def finish(self, batch: shm.Shipped, until: float | None = None) -> str | None:
        return self.copies.wait(batch, until, self.dead)

    def adopt(self, batch: shm.Shipped) -> Any:
        return self.segments.open(batch)

    def discard(self, batch: shm.Shipped) -> None:
        # A batch whose worker may still be copying into its segments is not lent
        # again before the copy is made (or, if never, removed by shutdown).
        if not self.copies.hold(batch):
            self.segments.discard(batch)

    def dead(self) -> bool:
        return self.processes.dead()

    def pool_bytes(self) -> int | None:
        return self.segments.bytes

    def usable(self) -> bool:
        return not self.starter.stopped and not self.processes.dead() and not self.processes.broken()

    def deaths(self) -> list[str]:
        return self.processes.deaths()

    def unsendable(self, exc: BaseException) -> bool:
        return _unsendable(exc)

    def shutdown(self, wait: bool, unclaimed: Iterable[cf.Future[Any]]) -> None:
        """Stop the processes and wait for them (whatever ``wait`` says), then
        remove the shared memory of every batch not handed over."""
        if not self.starter.stop():  # what it was asked to do and has not begun is dropped
            return
        self.processes.shutdown()
        self.segments.close()
        warden.forget(self.segments.prefix)


def _settle(segments: shm.Pool, lease: shm.Lease, future: cf.Future[shm.Shipped]) -> None:
    failure = None if future.cancelled() else future.exception()
    if failure is not None and _unsendable(failure):
        # Built, but not sent: its copy may still be under way (see Shipper), so
        # its segment is never lent again, and shutdown removes it.
        return
    shipped = future.result() if not future.cancelled() and failure is None else None
    segments.settle(shipped, lease)
    if shipped is not None:
        segments.prepare(shipped)


def _unsendable(exc: BaseException) -> bool:
    return "in _sendback_result" in str(exc.__cause__ or "")


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
