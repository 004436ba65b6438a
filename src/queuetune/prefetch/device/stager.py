"""The staging of a flight's batches off the consumer's thread (:class:`Stager`):
each batch ahead copied into its pinned buffers and its copy to the device
started, in order, on a thread of its own, so that at a hand-over the consumer
waits only for its own batch's staging, then for its copy's event."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .pinned import Buffer, PinnedPool
from .transfer import Copy, Transfer


@dataclass
class Entry:
    """A batch ahead of the consumer: its ``number`` in the epoch, its ``shape``
    (:func:`.leaves.split`), the host's ``leaves`` until they are staged, its
    ``copy`` and ``buffers``, the ``nbytes`` it takes on the device; or the
    ``error`` it met (``named``: raised as the copy's error). ``staged``: false
    while its staging waits or runs."""

    number: int
    shape: Any = None
    leaves: list[Any] = field(default_factory=list)
    copy: Copy | None = None
    buffers: list[Buffer] = field(default_factory=list)
    nbytes: int = 0
    error: BaseException | None = None
    named: bool = False
    begun: float = 0.0
    staging: float = 0.0  # seconds its leaves took to copy into the pinned buffers
    staged: bool = True


class Stager:
    """Stages the entries submitted, one after the other, with ``transfer``
    into their buffers of ``pool``, on a thread started with the first.

    The host's leaves are held until their staging is done: a leaf that views a
    shared-memory segment keeps it, so it is not given back nor lent again before.

    >>> import numpy as np
    >>> from .transfer import HostTransfer
    >>> transfer = HostTransfer()
    >>> pool = PinnedPool(transfer.allocate, 1 << 10)
    >>> stager = Stager(transfer, pool)
    >>> entry = Entry(0, leaves=[np.arange(3)], buffers=pool.take([24]))
    >>> stager.submit(entry); stager.wait(entry), entry.copy.ready()
    (True, [array([0, 1, 2])])
    >>> stager.close(); stager.thread.is_alive()
    False
    """

    def __init__(self, transfer: Transfer, pool: PinnedPool) -> None:
        self.transfer, self.pool = transfer, pool
        self.changed = threading.Condition()
        self.queued: deque[Entry] = deque()
        self.current: Entry | None = None  # being staged
        self.orphan: Entry | None = None  # being staged as a close() on this thread came: given back here
        self.stopped = False
        self.failed = False  # a staging failed: those after it are never handed over, nor staged
        self.thread: threading.Thread | None = None

    def submit(self, entry: Entry) -> None:
        """Stage ``entry`` after those submitted before it (none once stopped)."""
        with self.changed:
            if self.stopped or self.failed:
                return
            entry.staged = False
            self.queued.append(entry)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="queuetune-stage", daemon=True)
                self.thread.start()
            self.changed.notify_all()

    def wait(self, entry: Entry, timeout: float | None = None) -> bool:
        """Wait until ``entry`` is staged: True, or False where the stager was
        stopped first or ``timeout`` seconds passed."""
        with self.changed:
            self.changed.wait_for(lambda: entry.staged or self.stopped, timeout)
            return entry.staged and not self.stopped

    def stop(self) -> None:
        """Stage nothing more; a consumer waiting wakes."""
        with self.changed:
            self.stopped = True
            self.queued.clear()
            self.changed.notify_all()

    def close(self) -> Entry | None:
        """Stop, and wait for the thread to end (after the staging under way, if
        any). Called from the thread itself (a finalizer run there), the entry it
        is still staging, which the caller must not give back: the thread gives
        its buffers back once it is done with them."""
        self.stop()
        thread = self.thread
        if thread is None:
            return None
        if thread is threading.current_thread():
            with self.changed:  # reentrant: the thread may hold it as the finalizer runs
                self.orphan = self.current
                return self.current
        thread.join()
        return None

    def _run(self) -> None:
        while True:
            with self.changed:
                while not self.queued and not self.stopped:
                    self.changed.wait()
                if self.stopped:
                    return
                entry = self.current = self.queued.popleft()
            self._stage(entry)
            with self.changed:
                entry.staged = True
                if entry.error is not None:
                    self.failed = True
                    self.queued.clear()
                self.current = None  # from here, a close() on this thread leaves the entry to its caller
                orphaned, self.orphan = self.orphan is entry, None
                self.changed.notify_all()
            if orphaned:
                buffers, entry.buffers = entry.buffers, []
                self.pool.give(buffers, entry.copy)
            del entry

    def _stage(self, entry: Entry) -> None:
        leaves, entry.leaves = entry.leaves, []
        try:
            for buffer in entry.buffers:
                if buffer.copy is not None:  # the copy that read it last: done before it is written again
                    buffer.copy.finished()
                    buffer.copy = None
            entry.begun = time.perf_counter()
            staged = [self.transfer.stage(leaf, b.memory) for leaf, b in zip(leaves, entry.buffers, strict=True)]
            entry.staging = time.perf_counter() - entry.begun
            leaves.clear()  # the host's batch: its segments may go back now
            if not self.stopped:
                entry.copy = self.transfer.start(staged)
        except BaseException as error:  # raised at the batch's hand-over, named
            entry.error, entry.named = error, True
        finally:
            leaves.clear()  # nor kept by an error's traceback
