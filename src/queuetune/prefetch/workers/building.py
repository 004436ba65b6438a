"""What runs where a batch is built: :func:`build` and :class:`Pull` in a worker
thread, and in a worker process its start (:func:`init_process`), its builds
(:func:`build_in_process`), and the copies into shared memory made behind its
next build (:class:`Shipper`)."""

from __future__ import annotations

import functools
import os
import pickle
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from ...frameworks import TENSORS
from ...record.nbytes import nbytes
from ...record.recorder import Channel, built_here, busy_time, clock
from .. import heap, lifeline, shm
from ..batch import make_batch
from ..collate import batch_bytes_guess
from ..errors import WorkerError
from .base import END


class Pull:
    """Builds a plain iterable's batches: its next item each call, :data:`END` after
    the last (one worker thread calls it, so the items come in order).

    >>> from queuetune.record.recorder import Channel
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

    >>> from queuetune.record.recorder import Channel
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


def init_process(
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
    shm.arena.SHELF[:] = [shelf]
    _WORKER.update(
        source=source, batch_size=batch_size, collate_fn=collate_fn, channel=channel, owner=owner, shipper=shipper
    )
    for tensors in TENSORS.values():
        tensors.in_worker_process()
    heap.keep_for_builds()


def build_in_process(indices: Any, lease: shm.Lease) -> shm.Shipped:
    w = _WORKER
    cpu, start = time.process_time(), time.perf_counter()
    try:
        with shm.building(lease) as arena:
            batch = build(w["source"], w["batch_size"], w["collate_fn"], w["channel"], indices)
    except BaseException as exc:
        if travels(exc):
            raise
        raise WorkerError.standing_for(exc) from exc
    refs = sys.getrefcount(batch)  # alone on its line: an expression around it would hold the batch too
    shipped, copies, alone = arena.plan(batch, shm.unshared(batch, refs))
    del batch
    w["shipper"].send(shipped, copies, behind=alone)
    shipped.spent = (time.process_time() - cpu, time.perf_counter() - start)
    return shipped


def guess_in_process(index: Any) -> int:
    w = _WORKER
    return batch_bytes_guess(w["source"], w["batch_size"], index)


def travels(exc: BaseException) -> bool:
    """Whether ``exc`` comes back from a worker process as itself: pickled and unpickled again.

    >>> class Two(Exception):
    ...     def __init__(self, a, b): super().__init__(f"{a} {b}")
    >>> travels(KeyError("k")), travels(Two(1, 2))
    (True, False)
    """
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return False
    return True
