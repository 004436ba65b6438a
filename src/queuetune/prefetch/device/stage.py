"""One epoch's batches on their way to the device (:class:`Flight`): taken from
the epoch's iterator of host batches on the consumer's thread, staged into
pinned buffers and their copies started on the stage's own thread (:mod:`.stager`),
up to ``depth`` batches ahead of the consumer within ``device_bytes``, handed
over in order; :class:`Stage`, the consumer's iterator over it."""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import faults
from ..errors import BudgetExceeded, DeviceCopyError
from .leaves import fill, split
from .pinned import PinnedPool
from .settings import DeviceOptions
from .stager import Entry, Stager
from .transfer import Copy, Transfer

_NOTHING = object()
# Seconds between looks, while the consumer waits for a staging, at whether its epoch was stopped.
_POLL = 0.05


def _nothing(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class Hooks:
    """What a hand-over tells the epoch's place (``handed``), and the stage's end
    (``ended``); what the trace is told: each batch's copy as it is handed over
    (``copied``: its number, the seconds from its staging to its copy found ready,
    the seconds of its staging, its copy), the pinned bytes held and the device's
    bytes ahead as they may change (``levels``), and that no copy is ahead any more
    (``settled``, before ``ended``)."""

    handed: Callable[[], None] = _nothing
    ended: Callable[[], None] = _nothing
    copied: Callable[[int, float, float, Copy], None] = _nothing
    levels: Callable[[int, int], None] = _nothing
    settled: Callable[[], None] = _nothing


class Flight:
    """The copies ahead of one epoch's consumer, read from ``host`` (the epoch's
    iterator) with ``transfer`` into ``pool``'s buffers, within ``options``.

    >>> import numpy as np
    >>> from .transfer import HostTransfer
    >>> transfer = HostTransfer()
    >>> flight = Flight(iter([np.arange(3), {"x": np.ones(2), "name": "b"}]), transfer,
    ...                 PinnedPool(transfer.allocate, 1 << 20), DeviceOptions("cuda", True, 2, None, 1 << 20))
    >>> list(Stage(flight))
    [array([0, 1, 2]), {'x': array([1., 1.]), 'name': 'b'}]
    """

    def __init__(
        self,
        host: Iterator[Any],
        transfer: Transfer,
        pool: PinnedPool,
        options: DeviceOptions,
        hooks: Hooks = Hooks(),
        ready: Callable[[], bool] = lambda: True,
        halted: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.host, self.transfer, self.pool, self.options, self.hooks = host, transfer, pool, options, hooks
        # Whether the host hands its next batch without waiting for its build: a batch
        # ahead is taken only then, so the consumer never waits for a later batch than its own.
        self.ready = ready
        # Why the epoch was stopped (from another thread: a close() that wakes the consumer), if it was.
        self.halted = halted
        self.entries: deque[Entry] = deque()
        self.stager = Stager(transfer, pool)
        self.waiting: Any = _NOTHING  # taken from the host, not started: no room yet
        self.exhausted = False
        self.taken = 0  # batches taken from the host
        self.handed = 0
        self.bytes = 0  # on the device, ahead of the consumer
        self.lock = threading.Lock()
        self.busy = False
        self.stopped: str | None = None  # why, once stopped from outside
        self.ended = False  # read to its end, failed, or stopped
        self.cleaned = False

    def next(self) -> Any:
        """The next batch, its copy waited for on the consumer's stream alone."""
        with self.lock:
            if self.ended:
                raise StopIteration
            if self.stopped is not None:
                raise faults.closed(self.stopped, self.handed)
            self.busy = True
        try:
            self._fill()
            if self.stopped is not None:  # close() from another thread while this one took from the epoch
                raise faults.closed(self.stopped, self.handed)
            if not self.entries:
                raise StopIteration
            return self._hand()
        except BaseException:
            self.ended = True
            raise
        finally:
            with self.lock:
                self.busy = False
                done = self.ended or self.stopped is not None
            if done:
                self._clean()

    def drop(self, reason: str) -> None:
        """Stop: nothing more is handed over (reading again is :class:`.PrefetcherClosed`);
        the copies ahead are let go of, their buffers given back, the host's iterator closed."""
        with self.lock:
            if self.stopped is None and not self.ended:
                self.stopped = reason
            busy = self.busy
        if busy:  # the consumer, woken if it waits for a staging, cleans up as it leaves next()
            self.stager.stop()
        else:
            self._clean()

    def _fill(self) -> None:
        """Start copies until ``depth`` are ahead, the budget is full or the host is read out."""
        while not self.exhausted and len(self.entries) < self.options.depth:
            if self.entries and self.entries[-1].error is not None:
                return
            if self.waiting is _NOTHING:
                if self.entries and not self.ready():
                    return
                try:
                    self.waiting = next(self.host)
                except StopIteration:
                    self.exhausted = True
                    return
                except Exception as error:  # the host's own (a worker's fault): after the batches before it
                    self.entries.append(Entry(self.taken, error=error))
                    self.exhausted = True
                    return
            if not self._start(self.waiting):
                return
            self.waiting = _NOTHING
            self.taken += 1

    def _start(self, batch: Any) -> bool:
        """Stage ``batch`` and start its copy, or False where the budgets have no room for it yet."""
        sizes: list[int] = []

        def moves(leaf: Any) -> bool:
            nbytes = self.transfer.nbytes(leaf)
            if nbytes is not None:
                sizes.append(nbytes)
            return nbytes is not None

        leaves, shape = split(batch, moves)
        total, budget = sum(sizes), self.options.device_bytes
        entry = Entry(self.taken, shape, nbytes=total)
        if budget is not None and self.bytes + total > budget:
            if self.entries:
                return False
            entry.error = BudgetExceeded(
                f"batch {entry.number} of the epoch takes {total} bytes on the device, more than device_bytes={budget}"
            )
        buffers = None if entry.error is not None else self.pool.take(sizes)
        if buffers is None and entry.error is None:
            if self.entries:
                return False
            entry.error = BudgetExceeded(
                f"batch {entry.number} of the epoch needs {total} bytes of pinned staging buffers, "
                f"more than pinned_bytes={self.pool.limit} holds"
            )
        if entry.error is not None:
            entry.nbytes = 0
        self.bytes += entry.nbytes
        self.entries.append(entry)
        if buffers is not None:
            entry.leaves, entry.buffers = leaves, buffers
            self.stager.submit(entry)  # staged and its copy started on the stage's thread
        self.hooks.levels(self.pool.held, self.bytes)
        return True

    def _hand(self) -> Any:
        """The first entry's batch, its staging waited for, ready on the consumer's stream; its error, named."""
        entry = self.entries[0]
        while not self.stager.wait(entry, _POLL):  # stopped: the entry stays, for _clean
            why = self.stopped or ("the stage was stopped" if self.stager.stopped else None)
            if why is None and not self.exhausted:  # the epoch's end stops it too: not a stop from outside
                why = self.halted()
            if why is not None:
                raise faults.closed(why, self.handed)
        self.entries.popleft()
        self.bytes -= entry.nbytes
        if entry.error is not None:
            self.pool.give(entry.buffers)
            raise self._named(entry, entry.error) if entry.named else entry.error
        assert entry.copy is not None
        try:
            leaves = entry.copy.ready()
        except Exception as error:
            self.pool.give(entry.buffers, entry.copy)
            raise self._named(entry, error) from error
        self.hooks.copied(entry.number, time.perf_counter() - entry.begun, entry.staging, entry.copy)
        if self.transfer.lends:
            self.pool.lend(entry.buffers)
        else:
            self.pool.give(entry.buffers, entry.copy)
        self.hooks.levels(self.pool.held, self.bytes)
        self.handed += 1
        self.hooks.handed()
        return fill(entry.shape, leaves)

    def _named(self, entry: Entry, error: BaseException) -> DeviceCopyError:
        where = self.options.device or "pinned memory"
        named = DeviceCopyError(
            f"batch {entry.number} of the epoch could not be copied to {where}: {type(error).__name__}: {error}"
        )
        named.__cause__ = error
        return named

    def _clean(self) -> None:
        """Let go of every copy ahead (their buffers back to the pool) and of the host's iterator."""
        with self.lock:
            if self.cleaned:
                return
            self.cleaned = True
        staging = self.stager.close()  # the staging under way is done (or given back by its thread)
        for entry in self.entries:
            if entry is not staging:
                self.pool.give(entry.buffers, entry.copy)
        self.entries.clear()
        self.waiting, self.bytes = _NOTHING, 0
        self.hooks.levels(self.pool.held, 0)
        close = getattr(self.host, "close", None)
        if close is not None:
            close()
        self.hooks.settled()
        self.hooks.ended()


class Stage:
    """The consumer's iterator over a :class:`Flight`; the flight is dropped once
    this is let go of (a ``break``), or by :meth:`close`."""

    def __init__(self, flight: Flight) -> None:
        self.flight = flight
        self._finalizer = weakref.finalize(self, flight.drop, "its iterator was let go of")
        self._finalizer.atexit = False  # at exit, the Prefetcher's own end lets go of everything

    def __iter__(self) -> Stage:
        return self

    def __next__(self) -> Any:
        return self.flight.next()

    def close(self) -> None:
        """Drop the flight: what is ahead is let go of."""
        self._finalizer()
