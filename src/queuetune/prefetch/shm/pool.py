"""The receiver's segments (:class:`Pool`): lent to builds within a budget,
mapped once, opened as the batches' arrays, shelved for the next batch when the
last view is gone, and removed as the prefetcher closes."""

from __future__ import annotations

import fcntl
import functools
import multiprocessing
import os
import sys
import threading
import uuid
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from . import files
from .files import LOCK, PREFIX, sweep_pool
from .ledger import Ledger
from .packing import Shipped
from .segments import PAGE, rounded, worth_lending
from .shelf import Lease, Shelf
from .spares import SPARE, Spares
from .views import views


class Pool:
    """The receiver's segments: on the shelf (spare), taken by a build, holding
    batches built, or holding batches handed over and still in use.

    >>> import numpy as np
    >>> from queuetune.prefetch.shm.arena import ship
    >>> pool = Pool(os.getpid())
    >>> lease = pool.lend(200_000)
    >>> shipped = ship((np.arange(20_000.0), 3), lease, pool.shelf)  # a new segment: the shelf is empty
    >>> pool.settle(shipped, lease)
    >>> x, y = pool.open(shipped)
    >>> bool((x == np.arange(20_000.0)).all()), y, pool.held(), pool.bytes  # 160,000 bytes in whole pages
    (True, 3, 1, 163840)
    >>> del x; pool.held(), pool.shelf.names() == shipped.segments()  # its segment is on the shelf again
    (0, True)
    >>> again = ship(np.ones(20_000), pool.lend(200_000), pool.shelf)
    >>> again.segments() == shipped.segments(), pool.shelf.names()  # the next batch took it
    (True, set())
    >>> pool.close()

    With a ``budget`` (bytes), the pool holds to it whatever the batches' sizes:
    its segments (spare, taken, holding batches built or handed over) and the
    bytes each build under way may still make (its lease's ``grant``) never add
    up to more (:attr:`committed`). A lease's grant is what the budget has room
    for, spare segments removed to make it (:meth:`make_room`); a build that
    outgrows its grant sends the arrays that find no room through the pipe.

    At most ``spare`` segments are on the shelf, and ``least`` while the
    workers do not miss more (a miss: a worker made a segment soon after one
    was removed for the shelf being full; see :class:`.spares.Spares`), each of
    a size the batches take (see :meth:`suits`). ``context``: the multiprocessing context
    the workers are started with (the shelf's lock and memory are made with it).
    """

    def __init__(
        self, owner: int, spare: int = SPARE, budget: int | None = None, context: Any = None, least: int = 1
    ) -> None:
        # Each pool's own names: closing one removes no other's files.
        self.prefix = f"{PREFIX}{owner}-{uuid.uuid4().hex[:8]}-"
        # Held by this process and the workers it forks while any of them runs (see :func:`pools`).
        self._lock_fd = os.open(files.ROOT / f"{self.prefix}{LOCK}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        self._release = weakref.finalize(self, os.close, self._lock_fd)
        self.budget = budget
        self.spares = Spares(spare, least)
        self.shelf = Shelf(self.prefix, context or multiprocessing.get_context())
        self._lock = threading.Lock()
        self._ledger = Ledger()
        # The bytes the last batch with arrays in shared memory took there.
        self._expect = 0
        # Segments whose batch is gone, appended by finalizers (in any thread, at
        # any moment) and shelved at once, or by the next lend where the lock is held.
        self._back: deque[str] = deque()
        self._closed = False
        # Where set, what runs a segment's return on another thread, so that the
        # consumer's thread, which lets go of most batches, only queues it: True
        # once queued, False where it cannot be (then the return is made here).
        self.later: Callable[[Callable[[], None]], bool] | None = None

    @property
    def bytes(self) -> int:
        """The bytes of every segment the pool holds: spare, taken by builds, or holding batches."""
        return self._ledger.bytes

    @property
    def committed(self) -> int:
        """:attr:`bytes` and the bytes builds under way may still make: the most
        its files can take at once, which the budget bounds."""
        return self._ledger.committed

    @property
    def wanted(self) -> int:
        """The spare segments kept now (see :class:`.spares.Spares`)."""
        return self.spares.wanted

    def room(self, reserve: int) -> bool:
        """Whether a build of ``reserve`` bytes can be granted them, spare segments
        removed if need be (a reckoning: :meth:`make_room` makes it)."""
        if self.budget is None or reserve <= 0:
            return True
        with self._lock:
            spare = sum(self._ledger.size(n) for n in self._ledger.offered)
            return self.committed - spare + rounded(reserve) <= self.budget

    def make_room(self, reserve: int) -> bool:
        """Remove spare segments until a build of ``reserve`` bytes can be granted
        them within the budget (those the batches would not take first, then the
        largest); whether it can."""
        if self.budget is None or reserve <= 0:
            return True
        need = rounded(reserve)
        with self._lock:
            self._ledger.forfeit_taken(self.shelf.taken())
            if self.committed + need <= self.budget:
                return True
            sizes = {name: self._ledger.size(name) for name in self.shelf.names() or ()}
            for name in sorted(sizes, key=lambda n: (self.suits(sizes[n]), -sizes[n])):
                if self.committed + need <= self.budget:
                    break
                self._recall(name)
            # A spare a worker took meanwhile forfeited its lease's grant.
            self._ledger.forfeit_taken(self.shelf.taken())
            return self.committed + need <= self.budget

    def lend(self, reserve: int) -> Lease:
        """What the next build is lent: new segments of up to ``reserve`` bytes in
        whole pages, or what the budget has room for if less (all of that where
        ``reserve`` is 0: its size is not known, and it is built alone); a spare
        it takes from the shelf instead forfeits them. Spare segments that the
        batches would not take are removed first."""
        with self._lock:
            self._ledger.forfeit_taken(self.shelf.taken())
            self._take_back()
            room = sys.maxsize if self.budget is None else max(0, self.budget - self.committed) // PAGE * PAGE
            grant = min(rounded(reserve), room) if reserve > 0 else room
            number = self._ledger.grant(grant)
            made = len(self._ledger.maps) + 1
            return Lease(number, grant, self._expect or reserve, made, self.prefix, tuple(self._ledger.dropped))

    def suits(self, size: int) -> bool:
        """Whether a spare segment of ``size`` bytes is one the batches take: as
        large as the last batch's arrays in shared memory, and not more than
        :data:`OVERSIZE` larger (any, before that is known)."""
        return self._expect == 0 or worth_lending(size, self._expect)

    def settle(self, shipped: Shipped | None, lease: Lease) -> None:
        """After a build (``shipped`` None: it failed, and its worker put back
        what it took): its lease's grant is given back, the segments the worker
        made are mapped; a segment taken from the shelf comes back at once if
        the batch is not in it."""
        with self._lock:
            self._ledger.forfeit(lease.number)
            if shipped is None:
                return
            if not self._closed:
                for name in shipped.made:
                    self._ledger.adopt(name)
            self.spares.settled(missed=bool(shipped.made))
            used = shipped.segments()
            if used:
                self._expect = shipped.shared
            self._ledger.offered -= used
            unused = shipped.lent is not None and shipped.lent not in used
            if unused:
                self._ledger.offered.discard(shipped.lent or "")
        if unused:
            self._back.append(shipped.lent or "")

    def prepare(self, shipped: Shipped) -> None:
        """Make the arrays :meth:`open` will hand over now, on the thread that
        settles builds while the consumer steps, so that the hand-over only takes
        them. A segment that cannot be viewed now is left for :meth:`open`,
        whose error reaches the consumer."""
        try:
            shipped.views = self._views(shipped)
        except Exception:
            shipped.views = None

    def open(self, shipped: Shipped) -> Any:
        """The batch with arrays (and tensors) over the segments; each segment
        comes back when the last view into it is gone."""
        views, shipped.views = shipped.views, None
        batch, _holders = self._views(shipped) if views is None else views
        return batch

    def _views(self, shipped: Shipped) -> tuple[Any, dict[str, Any]]:
        mapped = functools.partial(_mapped, self._lock, self._ledger.maps)
        return views(shipped, mapped, functools.partial(_returned, weakref.ref(self)))

    def returned(self, name: str) -> None:
        """Segment ``name``'s batch is gone: shelve it on the thread of :attr:`later`
        where set, else now if the pool is free, else at the next lend (a
        finalizer may run while this thread holds the lock)."""
        self._back.append(name)
        if self.later is None or not self.later(self._shelve_returned):
            self._shelve_returned(blocking=False)

    def _shelve_returned(self, blocking: bool = True) -> None:
        if self._lock.acquire(blocking=blocking):
            try:
                if not self._closed:
                    self._take_back()
            finally:
                self._lock.release()

    def discard(self, shipped: Shipped) -> None:
        """Take back the segments of a batch that will never be opened."""
        if shipped.views is not None:  # its holders' finalizers give the segments back as they go
            shipped.views = None
            return
        self._back.extend(shipped.segments())

    def held(self) -> int:
        """Segments holding batches: neither spare nor taken by a build under way."""
        with self._lock:
            self._take_back()
            return self._ledger.held()

    def close(self) -> None:
        """Remove every segment's name (those of builds never settled too); views
        still alive keep their memory until they go."""
        with self._lock:
            self._closed = True
            self._ledger.clear()
        sweep_pool(self.prefix)
        self._release()

    def _take_back(self) -> None:
        """Shelve the segments whose batches are gone, of a size the batches take,
        as far as the spare count allows, and remove the rest; remove the spares
        on the shelf that the batches would not take."""
        shelved = self.shelf.names()
        back = []
        while self._back:
            name = self._back.popleft()
            if name in self._ledger.maps and name not in self._ledger.offered:
                back.append(name)
        if shelved is None:  # the shelf's lock is stuck (a worker killed holding it): nothing goes on it
            for name in back:
                self._ledger.drop(name)
            return
        for name in [n for n in shelved if not self.suits(self._ledger.size(n))]:
            shelved.discard(name)  # recalled and removed, or taken by a worker meanwhile
            self._recall(name)
        for name in sorted(back, key=lambda n: -self._ledger.size(n)):
            size = self._ledger.size(name)
            if not self.suits(size):
                self._ledger.drop(name)
            elif len(shelved) >= self.spares.wanted:
                self.spares.overflowed()
                self._ledger.drop(name)
            elif self.shelf.offer(name, size):
                shelved.add(name)
                self._ledger.offered.add(name)
            else:
                self._ledger.drop(name)
        while len(shelved) > self.spares.wanted:
            self.spares.overflowed()
            name = min(shelved, key=self._ledger.size)
            shelved.discard(name)
            if self.shelf.recall(name):
                self._ledger.drop(name)

    def _recall(self, name: str) -> None:
        """Take spare segment ``name`` off the shelf and remove it, unless a worker took it."""
        if name in self._ledger.maps and self.shelf.recall(name):
            self._ledger.drop(name)


def _mapped(lock: threading.Lock, maps: dict[str, Any], name: str) -> Any:
    with lock:
        return maps.get(name)


def _returned(pool: weakref.ref[Pool], name: str) -> None:
    alive = pool()
    if alive is not None:
        alive.returned(name)
