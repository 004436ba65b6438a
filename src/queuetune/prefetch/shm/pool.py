"""The receiver's segments (:class:`Pool`): lent to builds within a budget,
mapped once, opened as the batches' arrays, shelved for the next batch when the
last view is gone, and removed as the prefetcher closes."""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import multiprocessing
import os
import sys
import threading
import uuid
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ...frameworks import TENSORS
from . import files, packing
from .files import LOCK, PREFIX, release_file, sweep_pool
from .packing import Piece, Shipped, replace
from .segments import PAGE, map_segment, rounded, worth_lending
from .shelf import Lease, Shelf

# Spare segments a pool keeps at most for the next batches; more are removed.
SPARE = 2
# It keeps one fewer while its workers do not miss it: a worker that makes a segment within
# MISSED builds of one removed for the shelf being full counts a miss, and CALM builds without
# one take the count back down.
MISSED, CALM = 16, 256


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
    workers do not miss more (a miss: a worker made a segment soon after one was
    removed for the shelf being full; see :data:`MISSED`), each of a size the
    batches take (see :meth:`suits`). ``context``: the multiprocessing context
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
        self.spare = spare
        self.budget = budget
        # The spares wanted now, from least to spare; builds settled, and the
        # count of them when a segment was last removed for the shelf being full,
        # and when the wanted count last changed.
        self.wanted = min(least, spare)
        self.least = self.wanted
        self._settled = 0
        self._overflowed: int | None = None
        self._changed = 0
        self.shelf = Shelf(self.prefix, context or multiprocessing.get_context())
        self._lock = threading.Lock()
        self._maps: dict[str, mmap.mmap] = {}
        # Segments put on the shelf and not settled since (on it, or taken by a build).
        self._offered: set[str] = set()
        self._bytes = 0
        # The grant of each lease not settled nor forfeited, by number, and their sum.
        self._grants: dict[int, int] = {}
        self._granted = 0
        self._leases = 0
        # The bytes the last batch with arrays in shared memory took there.
        self._expect = 0
        # Segments whose batch is gone, appended by finalizers (in any thread, at
        # any moment) and shelved at once, or by the next lend where the lock is held.
        self._back: deque[str] = deque()
        self._dropped: deque[str] = deque(maxlen=64)
        self._closed = False
        # Where set, what runs a segment's return on another thread, so that the
        # consumer's thread, which lets go of most batches, only queues it: True
        # once queued, False where it cannot be (then the return is made here).
        self.later: Callable[[Callable[[], None]], bool] | None = None

    @property
    def bytes(self) -> int:
        """The bytes of every segment the pool holds: spare, taken by builds, or holding batches."""
        return self._bytes

    @property
    def committed(self) -> int:
        """:attr:`bytes` and the bytes builds under way may still make: the most
        its files can take at once, which the budget bounds."""
        return self._bytes + self._granted

    def room(self, reserve: int) -> bool:
        """Whether a build of ``reserve`` bytes can be granted them, spare segments
        removed if need be (a reckoning: :meth:`make_room` makes it)."""
        if self.budget is None or reserve <= 0:
            return True
        with self._lock:
            spare = sum(len(self._maps[n]) for n in self._offered if n in self._maps)
            return self.committed - spare + rounded(reserve) <= self.budget

    def make_room(self, reserve: int) -> bool:
        """Remove spare segments until a build of ``reserve`` bytes can be granted
        them within the budget (those the batches would not take first, then the
        largest); whether it can."""
        if self.budget is None or reserve <= 0:
            return True
        need = rounded(reserve)
        with self._lock:
            self._read_forfeits()
            if self.committed + need <= self.budget:
                return True
            sizes = {name: len(self._maps.get(name, b"")) for name in self.shelf.names() or ()}
            for name in sorted(sizes, key=lambda n: (self.suits(sizes[n]), -sizes[n])):
                if self.committed + need <= self.budget:
                    break
                if name in self._maps and self.shelf.recall(name):
                    self._offered.discard(name)
                    self._drop(name)
            self._read_forfeits()  # a spare a worker took meanwhile forfeited its lease's grant
            return self.committed + need <= self.budget

    def lend(self, reserve: int) -> Lease:
        """What the next build is lent: new segments of up to ``reserve`` bytes in
        whole pages, or what the budget has room for if less (all of that where
        ``reserve`` is 0: its size is not known, and it is built alone); a spare
        it takes from the shelf instead forfeits them. Spare segments that the
        batches would not take are removed first."""
        with self._lock:
            self._read_forfeits()
            self._take_back()
            room = sys.maxsize if self.budget is None else max(0, self.budget - self.committed) // PAGE * PAGE
            grant = min(rounded(reserve), room) if reserve > 0 else room
            self._leases += 1
            if grant > 0:
                self._grants[self._leases] = grant
                self._granted += grant
            expect = self._expect or reserve
            return Lease(self._leases, grant, expect, len(self._maps) + 1, self.prefix, tuple(self._dropped))

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
            self._forfeit(lease.number)
            if shipped is None:
                return
            for name in shipped.made:
                self._adopt(name)
            self._learn(missed=bool(shipped.made))
            used = shipped.segments()
            if used:
                self._expect = shipped.shared
            self._offered -= used
            unused = shipped.lent is not None and shipped.lent not in used
            if unused:
                self._offered.discard(shipped.lent or "")
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
        holders: dict[str, Any] = {}

        def view(piece: Any) -> Any:
            if not isinstance(piece, Piece):
                return piece
            holder = holders.get(piece.name)
            if holder is None:
                with self._lock:
                    mapped = self._maps.get(piece.name)
                if mapped is None:  # a segment made by a worker that this pool has not seen
                    mapped = map_segment(piece.name)
                holders[piece.name] = holder = (ctypes.c_char * len(mapped)).from_buffer(mapped)
            array = packing.laid_out(memoryview(holder), piece)
            return array if piece.kind == "numpy" else TENSORS[piece.kind].from_array(array, piece.tensor_dtype)

        batch = replace(shipped.batch, view)
        # Each holder is its arrays' base: its finalizer gives the segment back once the last
        # view is gone. Made once every view is: a batch that failed halfway gives back nothing.
        for name, holder in holders.items():
            weakref.finalize(holder, _returned, weakref.ref(self), name)
        return batch, holders

    def returned(self, name: str) -> None:
        """Segment ``name``'s batch is gone: shelve it on the thread of :attr:`later`
        where set, else now if the pool is free, else at the next lend (a
        finalizer may run while this thread holds the lock)."""
        self._back.append(name)
        if self.later is not None and self.later(self._shelve_returned):
            return
        if self._lock.acquire(blocking=False):
            try:
                if not self._closed:
                    self._take_back()
            finally:
                self._lock.release()

    def _shelve_returned(self) -> None:
        with self._lock:
            if not self._closed:
                self._take_back()

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
            return len(self._maps) - len(self._offered)

    def close(self) -> None:
        """Remove every segment's name (those of builds never settled too); views
        still alive keep their memory until they go."""
        with self._lock:
            self._closed = True
            self._maps.clear()
            self._offered.clear()
            self._grants.clear()
            self._bytes = self._granted = 0
        sweep_pool(self.prefix)
        self._release()

    def _read_forfeits(self) -> None:
        """The grants of leases whose builds took a spare segment instead: given back."""
        for _name, number in self.shelf.taken() or ():
            self._forfeit(number)

    def _forfeit(self, number: int) -> None:
        self._granted -= self._grants.pop(number, 0)

    def _take_back(self) -> None:
        """Shelve the segments whose batches are gone, of a size the batches take,
        as far as the spare count allows, and remove the rest; remove the spares
        on the shelf that the batches would not take."""
        shelved = self.shelf.names()
        back = []
        while self._back:
            name = self._back.popleft()
            if name in self._maps and name not in self._offered:
                back.append(name)
        if shelved is None:  # the shelf's lock is stuck (a worker killed holding it): nothing goes on it
            for name in back:
                self._drop(name)
            return
        for name in [n for n in shelved if not self.suits(len(self._maps.get(n, b"")))]:
            shelved.discard(name)  # recalled and removed, or taken by a worker meanwhile
            if name in self._maps and self.shelf.recall(name):
                self._offered.discard(name)
                self._drop(name)
        for name in sorted(back, key=lambda n: -len(self._maps[n])):
            size = len(self._maps[name])
            if not self.suits(size):
                self._drop(name)
            elif len(shelved) >= self.wanted:
                self._overflowed = self._settled
                self._drop(name)
            elif self.shelf.offer(name, size):
                shelved.add(name)
                self._offered.add(name)
            else:
                self._drop(name)
        while len(shelved) > self.wanted:
            self._overflowed = self._settled
            name = min(shelved, key=lambda n: len(self._maps.get(n, b"")))
            shelved.discard(name)
            if self.shelf.recall(name):
                self._offered.discard(name)
                self._drop(name)

    def _learn(self, missed: bool) -> None:
        """One more build settled; ``missed``: its worker made a segment."""
        self._settled += 1
        recent = self._overflowed is not None and self._settled - self._overflowed <= MISSED
        if missed and recent:
            self.wanted = min(self.spare, self.wanted + 1)
            self._changed = self._settled
        elif self.wanted > self.least and self._settled - self._changed >= CALM:
            self.wanted -= 1
            self._changed = self._settled

    def _drop(self, name: str) -> None:
        mapped = self._maps.pop(name, None)  # unmapped once no view is left
        if mapped is None:
            return
        self._bytes -= len(mapped)
        release_file(str(files.ROOT / name))
        self._dropped.append(name)

    def _adopt(self, name: str) -> None:
        if name in self._maps or self._closed:
            return
        mapped = self._maps[name] = map_segment(name)
        self._bytes += len(mapped)


def _returned(pool: weakref.ref[Pool], name: str) -> None:
    alive = pool()
    if alive is not None:
        alive.returned(name)
