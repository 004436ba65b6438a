"""Arrays and tensors from worker processes through reused shared memory.

The receiving process keeps a :class:`Pool` of segments: files in /dev/shm, each
mapped once. With each batch a worker is asked to build, the pool lends it room
as large as the largest batch so far (a :class:`Lease`). As the batch's first
large array goes in, the worker takes a spare segment of that size from the
pool's :class:`Shelf` (memory shared with the receiver) or makes one, maps it
once and keeps it mapped, collates straight into it where it can
(:func:`allocate`, used by :func:`.collate.default_collate`) or copies the
batch's large arrays into it, and sends back only descriptors (:class:`Piece`).
So a segment holds memory from its batch's collation until the batch is gone,
not while the worker builds the samples.
A large copy may be made behind the worker's next build (see
:class:`.workers.Shipper`): then the batch says so (``pending``) and the
receiver waits for the worker's word before opening it.
The receiver hands out arrays over its own mapping: no copy, and once a segment
has been used no new page either. The segment goes back on the shelf when the
last view of its batch is gone; a few spare ones are kept (within the budget,
where there is one), the rest removed.

Files are named with the receiver's pid, so :func:`sweep` removes what a killed
worker left behind, and :meth:`Pool.close` removes every name as the prefetcher
closes (a mapping stays valid for the views still alive).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import mmap
import multiprocessing
import os
import re
import shutil
import sys
import threading
import uuid
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..frameworks import TENSORS, tensors_of
from ..nbytes import nbytes
from ..units import format_bytes
from . import lifeline
from .errors import SharedMemoryFull

#: Where the segments are: /dev/shm, or the folder QUEUETUNE_SHM_DIR names (a larger
#: tmpfs where /dev/shm is small, as Docker's 64 MiB default is). Read once, at import.
ROOT = Path(os.environ.get("QUEUETUNE_SHM_DIR") or "/dev/shm")
_PREFIX = "queuetune-"
# The name, after a pool's prefix, of the file its processes hold a lock on.
_LOCK = "lock"
MIN_BYTES = 64 * 1024
# Offsets of arrays in a segment; segment sizes are whole pages.
_ALIGN = 64
_PAGE = mmap.PAGESIZE
# Spare segments a pool keeps at most for the next batches; more are removed.
SPARE = 2
# It keeps one fewer while its workers do not miss it: a worker that makes a segment within
# MISSED builds of one removed for the shelf being full counts a miss, and CALM builds without
# one take the count back down.
MISSED, CALM = 16, 256
# A spare segment larger than the batches asked for by more than this share is removed, not lent.
OVERSIZE = 1 / 8
# Bytes of a segment's name after its pool's prefix (a uuid's hex).
_KEY = 32


@dataclass(frozen=True)
class Lease:
    """What a worker is lent for one batch: the lease's ``number``; ``grant``, the
    bytes of new segments it may make (0: none; arrays that find no room travel
    through the pipe with the rest of the batch), forfeited once it takes a spare
    segment from the shelf instead; ``expect``, the bytes the pool expects the
    batch's arrays to take in shared memory (the segment for its first array is
    sized for them); how many segments the pool holds (the worker keeps no more
    mapped); and the segments the pool removed lately (the worker lets go of its
    mappings of them).

    >>> Lease(1, grant=4096, expect=0, keep=1, prefix="queuetune-0-test-").dropped
    ()
    """

    number: int
    grant: int
    expect: int
    keep: int
    prefix: str
    dropped: tuple[str, ...] = ()


class Piece:
    """One array of a batch in a segment: where it is, its shape and dtype, the
    order of its axes in memory from the largest stride (None: C order), and
    whether it was a numpy array or a framework's tensor (``kind``: "numpy", or
    the name of the framework's :class:`~queuetune.frameworks.base.Tensors`),
    with the name of its tensor dtype where numpy lacks it (its bits are then
    integers of the same size)."""

    __slots__ = ("dtype", "kind", "name", "offset", "order", "shape", "tensor_dtype")

    def __init__(
        self,
        name: str,
        offset: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        kind: str,
        order: tuple[int, ...] | None = None,
        tensor_dtype: str | None = None,
    ) -> None:
        self.name, self.offset, self.shape, self.dtype, self.kind = name, offset, shape, dtype, kind
        self.order, self.tensor_dtype = order, tensor_dtype

    def __reduce__(
        self,
    ) -> tuple[type[Piece], tuple[str, int, tuple[int, ...], np.dtype, str, tuple[int, ...] | None, str | None]]:
        return (Piece, (self.name, self.offset, self.shape, self.dtype, self.kind, self.order, self.tensor_dtype))


class Shipped:
    """A batch as a worker sends it: its large arrays replaced by pieces; the
    segment it took from the shelf, the segments it made (name and size), its
    bytes, and the bytes of its arrays in shared memory (``shared``);
    ``spent``: the CPU seconds and the seconds its build took, once known;
    ``pending``: None once its arrays are all in place, else the worker's slot
    and the number of the copy still being made into them (see
    :class:`.workers.Shipper`); ``views``: in the consumer's process, the batch
    over its segments and the segments' holders where :meth:`Pool.prepare` made
    them (never sent)."""

    __slots__ = ("batch", "lent", "made", "nbytes", "pending", "shared", "spent", "views")

    def __init__(
        self,
        batch: Any,
        lent: str | None,
        made: dict[str, int],
        nbytes: int,
        spent: tuple[float, float] | None = None,
        pending: tuple[int, int] | None = None,
        shared: int = 0,
    ) -> None:
        self.batch, self.lent, self.made, self.nbytes, self.spent = batch, lent, made, nbytes, spent
        self.pending, self.shared = pending, shared
        self.views: tuple[Any, dict[str, Any]] | None = None

    def __reduce__(self) -> tuple[type[Shipped], tuple[Any, ...]]:
        return (Shipped, (self.batch, self.lent, self.made, self.nbytes, self.spent, self.pending, self.shared))

    def segments(self) -> set[str]:
        """The segments the batch's pieces lie in."""
        names: set[str] = set()
        _walk(self.batch, lambda piece: names.add(piece.name))
        return names


def available() -> bool:
    """Whether /dev/shm can be used here."""
    return ROOT.is_dir() and os.access(ROOT, os.W_OK)


def sweep(owner: int) -> int:
    """Remove every file left for receiver ``owner``; return how many."""
    return _sweep(f"{_PREFIX}{owner}-")


def sweep_pool(prefix: str) -> int:
    """Remove every file of the pool whose names start with ``prefix`` (:attr:`Pool.prefix`); return how many."""
    if not prefix.startswith(_PREFIX):
        raise ValueError(f"not the prefix of a pool's files: {prefix!r}")
    return _sweep(prefix)


def _sweep(prefix: str) -> int:
    # The lock file last: while it is there, a sweeper of orphans asks it before anything else.
    paths = sorted(ROOT.glob(f"{prefix}*"), key=lambda path: path.name == f"{prefix}{_LOCK}")
    for path in paths:
        _unlink(str(path))
    return len(paths)


@dataclass(frozen=True)
class PoolFiles:
    """The files of one pool found in :data:`ROOT`: the names' ``prefix``, the
    ``owner``'s pid, the file names, their bytes, and whether the pool is
    ``orphaned``: no process of its owner's holds it any more."""

    prefix: str
    owner: int
    files: tuple[str, ...]
    nbytes: int
    orphaned: bool


_POOL_NAME = re.compile(rf"({re.escape(_PREFIX)}([0-9]+)-[0-9a-f]+-)")


def pools() -> list[PoolFiles]:
    """Every pool whose files are in :data:`ROOT`, by owner.

    A pool holds its lock file (``flock``) from its start to its close, and
    its worker processes hold it with it; the kernel lets go of the lock when
    the last of them ends, however it ends. A pool whose lock is free, or
    (made by a version without lock files) whose owner's pid runs no process,
    is orphaned.

    >>> pool = Pool(os.getpid())
    >>> [p.orphaned for p in pools() if p.prefix == pool.prefix]
    [False]
    >>> pool.close()
    """
    found: dict[tuple[str, int], list[Path]] = {}
    for path in ROOT.glob(f"{_PREFIX}*"):
        match = _POOL_NAME.match(path.name)
        if match is not None:
            found.setdefault((match.group(1), int(match.group(2))), []).append(path)
    result = []
    for (prefix, owner), paths in sorted(found.items()):
        with _claimed(prefix, owner) as orphaned:
            pass
        result.append(
            PoolFiles(prefix, owner, tuple(sorted(p.name for p in paths)), sum(_size(p) for p in paths), orphaned)
        )
    return result


def sweep_orphans() -> list[PoolFiles]:
    """Remove the files of every orphaned pool (see :func:`pools`); return those removed.

    >>> pool = Pool(os.getpid())
    >>> pool.prefix in {p.prefix for p in sweep_orphans()}  # a live pool stays
    False
    >>> pool.close()
    """
    removed = []
    for pool in pools():
        if not pool.orphaned:
            continue
        with _claimed(pool.prefix, pool.owner) as orphaned:
            if orphaned:  # still: not taken meanwhile
                _sweep(pool.prefix)
                removed.append(pool)
    return removed


@contextlib.contextmanager
def _claimed(prefix: str, owner: int) -> Iterator[bool]:
    """Whether the pool of ``prefix`` is orphaned, holding its lock meanwhile if it is."""
    try:
        fd = os.open(ROOT / f"{prefix}{_LOCK}", os.O_RDWR)
    except FileNotFoundError:
        yield not lifeline.alive(owner)
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def space() -> tuple[int, int]:
    """The bytes of :data:`ROOT`'s file system: in all, and free now.

    >>> total, free = space(); 0 <= free <= total
    True
    """
    usage = shutil.disk_usage(ROOT)
    return usage.total, usage.free


def describe_space() -> str:
    """:data:`ROOT` and its room, as a clause for an error message.

    >>> describe_space().startswith(f"{ROOT} holds ")
    True
    """
    total, free = space()
    return f"{ROOT} holds {format_bytes(total)}, {format_bytes(free)} free now"


# --- in the receiver ---------------------------------------------------------------------


class Shelf:
    """Spare segments offered to the workers, in memory shared with them. A worker
    takes one as the first large array of its batch goes in, not as its build
    starts: a segment holds memory for a batch from its collation until the batch
    is let go of, never while its worker builds the samples, and a reused
    segment needs no new page. The receiver offers and recalls them, and reads
    which lease took each (:meth:`taken`): that lease's grant is then forfeited.

    Each operation waits at most ``wait`` seconds for the lock, which a worker
    killed while holding it would keep for ever: then the shelf is passed by (a
    worker makes a segment of its own; the receiver removes what it would offer).

    >>> import multiprocessing
    >>> shelf = Shelf("queuetune-0-test-", multiprocessing.get_context())
    >>> shelf.offer("queuetune-0-test-" + "a" * 32, 4096), shelf.offer("queuetune-0-test-" + "b" * 32, 8192)
    (True, True)
    >>> shelf.take(5000, 9000, taker=7) == "queuetune-0-test-" + "b" * 32, len(shelf.names())
    (True, 1)
    >>> shelf.take(5000, 9000, taker=8) is None  # nothing of that size
    True
    >>> shelf.taken() == [("queuetune-0-test-" + "b" * 32, 7)], shelf.taken()
    (True, [])
    """

    CAPACITY = 16

    def __init__(self, prefix: str, context: Any, wait: float = 1.0) -> None:
        self.prefix, self.wait = prefix, wait
        self._lock = context.Lock()
        # > 0: a spare segment of that many bytes; < 0: taken by lease -value, not yet read; 0: an empty place
        self._sizes = context.RawArray("q", self.CAPACITY)
        self._keys = context.RawArray("c", self.CAPACITY * _KEY)

    def offer(self, name: str, size: int) -> bool:
        """Put segment ``name`` of ``size`` bytes on the shelf; False if it is full or locked."""
        with self._held() as held:
            empty = [place for place in range(self.CAPACITY) if self._sizes[place] == 0] if held else []
            if not empty:
                return False
            self._keys[empty[0] * _KEY : (empty[0] + 1) * _KEY] = name[len(self.prefix) :].encode()
            self._sizes[empty[0]] = size
            return True

    def take(self, need: int, most: int, taker: int) -> str | None:
        """The smallest segment of ``need`` to ``most`` bytes, taken off the shelf by lease ``taker``; None if none."""
        with self._held() as held:
            fitting = [p for p in range(self.CAPACITY) if need <= self._sizes[p] <= most] if held else []
            if not fitting:
                return None
            place = min(fitting, key=lambda p: self._sizes[p])
            self._sizes[place] = -taker
            return self._name(place)

    def recall(self, name: str) -> bool:
        """Take segment ``name`` back off the shelf; False if a worker took it first (or it is locked)."""
        with self._held() as held:
            found = [p for p in range(self.CAPACITY) if self._sizes[p] > 0 and self._name(p) == name] if held else []
            if not found:
                return False
            self._sizes[found[0]] = 0
            return True

    def names(self) -> set[str] | None:
        """The segments on the shelf now (None: its lock could not be had)."""
        with self._held() as held:
            return {self._name(place) for place in range(self.CAPACITY) if self._sizes[place] > 0} if held else None

    def taken(self) -> list[tuple[str, int]] | None:
        """The segments workers took since the last call, each with the lease that
        took it; their places are empty again (None: the lock could not be had)."""
        with self._held() as held:
            if not held:
                return None
            found = []
            for place in range(self.CAPACITY):
                if self._sizes[place] < 0:
                    found.append((self._name(place), -self._sizes[place]))
                    self._sizes[place] = 0
            return found

    @contextlib.contextmanager
    def _held(self) -> Iterator[bool]:
        """The lock for at most ``wait`` seconds: whether it was had."""
        held = self._lock.acquire(timeout=self.wait)
        try:
            yield held
        finally:
            if held:
                self._lock.release()

    def _name(self, place: int) -> str:
        key: bytes = self._keys[place * _KEY : (place + 1) * _KEY]  # a RawArray of chars: its slices are bytes
        return self.prefix + key.decode()


class Pool:
    """The receiver's segments: on the shelf (spare), taken by a build, holding
    batches built, or holding batches handed over and still in use.

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
        self.prefix = f"{_PREFIX}{owner}-{uuid.uuid4().hex[:8]}-"
        # Held by this process and the workers it forks while any of them runs (see :func:`pools`).
        self._lock_fd = os.open(ROOT / f"{self.prefix}{_LOCK}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
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
            return self.committed - spare + _round(reserve) <= self.budget

    def make_room(self, reserve: int) -> bool:
        """Remove spare segments until a build of ``reserve`` bytes can be granted
        them within the budget (those the batches would not take first, then the
        largest); whether it can."""
        if self.budget is None or reserve <= 0:
            return True
        need = _round(reserve)
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
            room = sys.maxsize if self.budget is None else max(0, self.budget - self.committed) // _PAGE * _PAGE
            grant = min(_round(reserve), room) if reserve > 0 else room
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
        return self._expect == 0 or _worth_lending(size, self._expect)

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
                    mapped = _map(piece.name)
                holders[piece.name] = holder = (ctypes.c_char * len(mapped)).from_buffer(mapped)
            array = _laid_out(memoryview(holder), piece)
            return array if piece.kind == "numpy" else TENSORS[piece.kind].from_array(array, piece.tensor_dtype)

        batch = _replace(shipped.batch, view)
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
        _release_file(str(ROOT / name))
        self._dropped.append(name)

    def _adopt(self, name: str) -> None:
        if name in self._maps or self._closed:
            return
        mapped = self._maps[name] = _map(name)
        self._bytes += len(mapped)


def _returned(pool: weakref.ref[Pool], name: str) -> None:
    alive = pool()
    if alive is not None:
        alive.returned(name)


# --- in a worker process -------------------------------------------------------------------


class _Mapped:
    """A worker's mappings of the pool's segments, the least recently used let go first."""

    def __init__(self) -> None:
        self.maps: OrderedDict[str, mmap.mmap] = OrderedDict()

    def get(self, name: str) -> mmap.mmap:
        mapped = self.maps.pop(name, None) or _map(name)
        self.maps[name] = mapped
        return mapped

    def add(self, name: str, mapped: mmap.mmap) -> None:
        self.maps[name] = mapped

    def trim(self, lease: Lease) -> None:
        for name in lease.dropped:
            self.maps.pop(name, None)
        while len(self.maps) > lease.keep:
            self.maps.popitem(last=False)


_MAPPED = _Mapped()
_ARENA: list[Arena] = []
# The shelf of the pool this worker process builds for (set as it starts).
_SHELF: list[Shelf] = []


class Arena:
    """Where one batch's large arrays go in a worker: one segment, from its start,
    taken from ``shelf`` (by default this worker's) or made as the first array
    goes in, sized for what the lease expects of the batch; what does not fit
    goes in one more segment made for it, within the lease's grant, and what the
    grant has no room for travels through the pipe with the rest of the batch.

    >>> arena = Arena(Lease(1, grant=0, expect=0, keep=0, prefix="queuetune-test-"))
    >>> arena.allocate((100_000,), np.float32) is None  # nothing granted, no shelf
    True
    """

    def __init__(self, lease: Lease, shelf: Shelf | None = None) -> None:
        self.lease = lease
        self.shelf = shelf if shelf is not None else (_SHELF[0] if _SHELF else None)
        self.name: str | None = None
        self.buffer: mmap.mmap | None = None
        # The segment taken from the shelf (None: none, or one made here: in ``made``).
        self.lent: str | None = None
        self.used = 0
        # The bytes of new segments it may still make: none once it took a spare.
        self.left = lease.grant
        # Arrays placed by allocate: data address -> offset.
        self.placed: dict[int, int] = {}
        self.made: dict[str, int] = {}
        # The segment's file, open while the batch is built (its memory is taken as its parts are
        # written), and the address of its mapping.
        self._fd: int | None = None
        self._base = 0

    def reserve(self, view: np.ndarray) -> None:
        """Take the memory of ``view``, a part of the batch's segment about to be
        written (see :func:`reserve`); nothing for an array elsewhere."""
        offset = view.ctypes.data - self._base
        if self._fd is not None and self.buffer is not None and 0 <= offset < len(self.buffer):
            _reserve(self._fd, offset, view.nbytes)

    def close(self) -> None:
        """The batch is built: let go of its segment's file (its mapping stays)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def give_back(self) -> None:
        """After a build that failed: the segment taken goes back on the shelf, one made is removed."""
        self.close()
        if self.lent is not None and self.shelf is not None and self.buffer is not None:
            if not self.shelf.offer(self.lent, len(self.buffer)):
                _unlink(str(ROOT / self.lent))
        for name in self.made:
            _MAPPED.maps.pop(name, None)
            _unlink(str(ROOT / name))
        self.lent = self.name = self.buffer = None
        self.made = {}

    def _segment(self, size: int, whole: bool = False) -> mmap.mmap | None:
        """The batch's segment, taken or made now if it has none yet, for a first
        array of ``size`` bytes and what the lease expects besides (``whole``:
        ``size`` is all the batch needs); None where no spare fits and the grant
        has no room."""
        if self.buffer is not None:
            return self.buffer
        want = size if whole else max(size, self.lease.expect)
        name = None
        if self.shelf is not None:
            name = self.shelf.take(want, _round(int(want * (1 + OVERSIZE))), self.lease.number)
        if name is not None:
            self.buffer, self.lent, self.left = _MAPPED.get(name), name, 0
        else:
            fitting = [_round(n) for n in (want, size) if _round(n) <= self.left]
            if not fitting:
                return None
            name, self.buffer = self._make(fitting[0], reserve=False)
        self.name = name
        self._fd = os.open(ROOT / name, os.O_RDWR)
        self._base = ctypes.addressof(ctypes.c_char.from_buffer(self.buffer))
        return self.buffer

    def allocate(self, shape: tuple[int, ...], dtype: Any, lazy: bool = False) -> np.ndarray | None:
        """An array in the lent segment, or None (too small to share, or no room);
        its memory taken now, or with ``lazy`` part by part (:meth:`reserve`)."""
        dtype = np.dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        offset = self._room(size, reserve=not lazy)
        if offset is None or self.buffer is None:
            return None
        array = np.ndarray(shape, dtype, buffer=self.buffer, offset=offset)
        self.placed[array.ctypes.data] = offset
        return array

    def ship(self, batch: Any) -> Shipped:
        """``batch`` with its large arrays in shared memory, as descriptors."""
        shipped, copies, _ = self.plan(batch)
        copy(copies)
        return shipped

    def plan(self, batch: Any, unshared: set[int] | None = None) -> tuple[Shipped, list[Copy], bool]:
        """``batch`` as descriptors of where its large arrays go in shared
        memory, the copies that put them there (none for an array built in
        place; until they are made, the descriptors point at unwritten bytes),
        and whether every copy's source is in ``unshared`` (ids from
        :func:`unshared`), so that the copies may wait while the worker builds on.
        Arrays that find no room stay in the batch as they are (they travel
        through the pipe); what would not cross the pipe unchanged is made so
        that it does (see :func:`portable`).

        >>> pool = Pool(os.getpid())
        >>> lease = pool.lend(1_000_000)
        >>> batch = (np.ones(100_000), 7)
        >>> refs = sys.getrefcount(batch)
        >>> shipped, copies, alone = Arena(lease).plan(batch, unshared(batch, refs))
        >>> len(copies), shipped.nbytes, shipped.shared, shipped.batch[1], alone
        (1, 800000, 800000, 7, True)
        >>> copy(copies); pool.settle(shipped, lease)
        >>> float(pool.open(shipped)[0].sum())
        100000.0
        >>> pool.close()
        """
        try:
            return self._plan(batch, unshared)
        finally:
            self.close()

    def _plan(self, batch: Any, unshared: set[int] | None) -> tuple[Shipped, list[Copy], bool]:
        found: list[tuple[Any, np.ndarray, Piece]] = []
        size = 0

        def describe(obj: Any) -> Any:
            nonlocal size
            tensors = tensors_of(obj)
            if tensors is not None:
                obj = tensors.portable(obj)
            shareable = _shareable(obj)
            if shareable is None:
                size += nbytes(obj)
                return portable(obj)
            array, kind, tensor_dtype = shareable
            size += array.nbytes
            piece = Piece("", 0, array.shape, array.dtype, kind, _order(array), tensor_dtype)
            found.append((obj, array, piece))
            return piece

        described = _replace(batch, describe)
        copies: list[Copy] = []
        overflow: list[tuple[np.ndarray, Piece]] = []
        alone = True
        # Not placed by allocate: the segment sized for all of them, from its first.
        rest = sum(array.nbytes for _, array, _ in found if self._placed_at(array) is None)
        shared = 0
        for obj, array, piece in found:
            placed = self._placed_at(array)
            if placed is not None:
                piece.name, piece.offset = self.name or "", placed
                shared += array.nbytes
                continue
            alone = alone and unshared is not None and id(obj) in unshared
            if self.buffer is None and rest >= MIN_BYTES:
                self._segment(rest, whole=True)
            offset = self._room(array.nbytes)
            rest -= array.nbytes
            if offset is None or self.buffer is None:
                overflow.append((array, piece))  # placed by _spill, or left as it is
            else:
                piece.name, piece.offset = self.name or "", offset
                copies.append(_copy_into(self.buffer, piece, array))
                shared += array.nbytes
        if overflow:
            spilled = self._spill(overflow)
            copies.extend(spilled)
            shared += sum(array.nbytes for _, array in spilled)
        unplaced = {id(piece): portable(obj) for obj, _, piece in found if not piece.name}
        if unplaced:
            described = _replace(described, lambda item: unplaced.get(id(item), item))
        return Shipped(described, self.lent, self.made, size, shared=shared), copies, alone and bool(copies)

    def _room(self, size: int, reserve: bool = True) -> int | None:
        if size < MIN_BYTES or self._segment(size) is None or self.buffer is None:
            return None
        offset = _aligned(self.used)
        if offset + size > len(self.buffer):
            return None
        if reserve and self._fd is not None:
            _reserve(self._fd, offset, size)
        self.used = offset + size
        return offset

    def _placed_at(self, array: np.ndarray) -> int | None:
        offset = self.placed.get(array.ctypes.data)
        if offset is None or not array.flags.c_contiguous:
            return None
        return offset

    def _spill(self, overflow: list[tuple[np.ndarray, Piece]]) -> list[Copy]:
        """One new segment for the arrays that did not fit in the batch's first one,
        as many as the grant has room for, in order; the copies into it."""
        offsets, end = [], 0
        for array, _piece in overflow:
            start = _aligned(end)
            if _pages(start + array.nbytes) > self.left:
                break
            offsets.append(start)
            end = start + array.nbytes
        if not offsets:
            return []
        name, mapped = self._make(_pages(end))
        copies = []
        for (array, piece), offset in zip(overflow, offsets):
            piece.name, piece.offset = name, offset
            copies.append(_copy_into(mapped, piece, array))
        return copies

    def _make(self, size: int, reserve: bool = True) -> tuple[str, mmap.mmap]:
        """A new segment of ``size`` bytes for this batch, kept mapped and told to the receiver."""
        name, mapped = _new_segment(self.lease.prefix, size, reserve)
        _MAPPED.add(name, mapped)
        self.made[name] = size
        self.left -= size
        return name, mapped


#: One copy into shared memory: the array over the segment, and the array to copy into it.
Copy = tuple[np.ndarray, np.ndarray]


def _local_refs() -> int:
    held = object()
    return sys.getrefcount(held)


def _item_refs() -> int:
    held = [object()]
    return sys.getrefcount(held[0])


# What sys.getrefcount reads for an object held by one local of the caller only,
# and for an item held by its container only (measured, since interpreters differ).
LOCAL_REFS, ITEM_REFS = _local_refs(), _item_refs()


def unshared(batch: Any, refs: int) -> set[int]:
    """The ids of the large arrays and tensors of ``batch`` that nothing outside
    it can reach: each owns its memory (not a view, not over another's buffer),
    and it and every tuple, list and dict above it are held by their container
    alone. ``refs``: ``sys.getrefcount(batch)`` where the caller holds it in one
    local only, measured in a statement of its own (an expression around the
    call would hold the batch as well). A source may keep and change what it
    returned (a buffer it reuses): an array it can reach must be copied before
    it builds again.

    >>> batch = (np.ones(100_000), 7)
    >>> refs = sys.getrefcount(batch)
    >>> kept = np.ones(100_000)
    >>> len(unshared(batch, refs)), len(unshared((kept, 7), LOCAL_REFS))
    (1, 0)
    >>> unshared(batch, refs + 1)  # the source holds the tuple too
    set()
    """
    found: set[int] = set()
    if refs <= LOCAL_REFS:
        _collect_unshared(batch, found)
    return found


def _collect_unshared(obj: Any, found: set[int]) -> None:
    """Add to ``found`` what of ``obj`` (held by its container alone) nothing else reaches."""
    if type(obj) in (tuple, list, dict):
        keys: Any = list(obj) if type(obj) is dict else range(len(obj))
        for key in keys:
            if sys.getrefcount(obj[key]) <= ITEM_REFS:
                _collect_unshared(obj[key], found)
    elif _owns_memory(obj):
        found.add(id(obj))


def _owns_memory(obj: Any) -> bool:
    """An array or tensor whose memory no other array, tensor or buffer reaches."""
    if type(obj) is np.ndarray:
        return obj.base is None and obj.flags.owndata
    tensors = tensors_of(obj)
    return tensors is not None and tensors.owns_memory(obj)


def copy(copies: list[Copy]) -> None:
    """Make ``copies`` (numpy lets go of the GIL while it copies).

    >>> target = np.zeros(3)
    >>> copy([(target, np.arange(3.0))]); target.tolist()
    [0.0, 1.0, 2.0]
    """
    for target, array in copies:
        target[...] = array


def ship(batch: Any, lease: Lease, shelf: Shelf | None = None) -> Shipped:
    """``batch`` as a worker sends it under ``lease`` (see :class:`Arena`)."""
    _MAPPED.trim(lease)
    return Arena(lease, shelf).ship(batch)


@contextlib.contextmanager
def building(lease: Lease, shelf: Shelf | None = None) -> Iterator[Arena]:
    """While a worker builds a batch under ``lease``: :func:`allocate` places
    arrays in its segment; then ship the batch with the arena's :meth:`Arena.ship`.
    If the build fails, what the arena took goes back (:meth:`Arena.give_back`)."""
    _MAPPED.trim(lease)
    _ARENA[:] = [Arena(lease, shelf)]
    try:
        yield _ARENA[0]
    except BaseException:
        _ARENA[0].give_back()
        raise
    finally:
        _ARENA.clear()


def allocate(shape: tuple[int, ...], dtype: Any, lazy: bool = False) -> np.ndarray | None:
    """An array in the segment lent for the batch being built in this worker
    process, or None (none lent, too small to share, or no room): collate into it.
    Its memory is taken now; with ``lazy``, each part's as it is about to be
    written (:func:`reserve`), so that the batch takes memory as its samples come.

    >>> allocate((1000, 1000), np.float32) is None  # not in a worker
    True
    """
    return _ARENA[0].allocate(shape, dtype, lazy) if _ARENA else None


def reserve(view: np.ndarray) -> None:
    """Take the memory of ``view``, a part of an array :func:`allocate` gave with
    ``lazy``, before it is written: a full tmpfs is a :class:`.SharedMemoryFull`
    here, not a SIGBUS. Nothing for an array anywhere else.

    >>> reserve(np.zeros(3))  # not in a worker: nothing to do
    """
    if _ARENA:
        _ARENA[0].reserve(view)


# --- both sides ------------------------------------------------------------------------------


def portable(obj: Any) -> Any:
    """``obj`` as it must be to reach the receiver through the pipe unchanged: a
    framework's tensor as :meth:`~queuetune.frameworks.base.Tensors.portable`
    makes it; a numpy array in a byte order not this machine's, carried as its
    raw bytes and its dtype (numpy's pickling makes ``>f8`` native before
    protocol 5, which the pipe uses, and ``>M8[s]`` native in every protocol);
    anything else as it is.

    >>> import pickle
    >>> pickle.loads(pickle.dumps(portable(np.zeros(3, dtype=">M8[s]")), protocol=4)).dtype.str
    '>M8[s]'
    """
    if type(obj) is np.ndarray:
        if obj.dtype.isnative or obj.dtype.hasobject or obj.dtype.itemsize == 0:
            return obj
        return _Carried(obj)
    tensors = tensors_of(obj)
    return obj if tensors is None else tensors.portable(obj)


class _Carried:
    """An array that crosses the pipe as its raw bytes, in C or Fortran order, and its dtype."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self) -> tuple[Callable[..., np.ndarray], tuple[bytes, np.dtype, tuple[int, ...], bool]]:
        array = self.array
        fortran = bool(array.flags.f_contiguous and not array.flags.c_contiguous)
        return (_rebuilt, (array.tobytes(order="F" if fortran else "C"), array.dtype, array.shape, fortran))


def _rebuilt(raw: bytes, dtype: np.dtype, shape: tuple[int, ...], fortran: bool) -> np.ndarray:
    flat: np.ndarray = np.frombuffer(bytearray(raw), dtype=dtype)
    return flat.reshape(shape, order="F" if fortran else "C")


def _shareable(obj: Any) -> tuple[np.ndarray, str, str | None] | None:
    """The array over ``obj``'s memory where it goes through shared memory, its
    kind ("numpy", or the name of the framework's tensors it is one of), and the
    tensor dtype its bits stand for (see :meth:`queuetune.frameworks.base.Tensors.as_array`)."""
    if type(obj) is np.ndarray:
        array, kind, tensor_dtype = obj, "numpy", None
    else:
        tensors = tensors_of(obj)
        shared = None if tensors is None else tensors.as_array(obj)
        if tensors is None or shared is None:
            return None
        (array, tensor_dtype), kind = shared, tensors.name
    if array.nbytes < MIN_BYTES or array.dtype.hasobject:
        return None
    return array, kind, tensor_dtype


def _order(array: np.ndarray) -> tuple[int, ...] | None:
    """The axes of ``array`` from the largest stride to the smallest, or None for C order.

    >>> _order(np.zeros((2, 3))), _order(np.zeros((2, 3), order="F")), _order(np.zeros((2, 3, 4)).transpose(2, 0, 1))
    (None, (1, 0), (1, 2, 0))
    """
    if array.flags.c_contiguous:
        return None
    strides = array.strides
    order = tuple(sorted(range(array.ndim), key=lambda axis: -abs(strides[axis])))
    return None if order == tuple(range(array.ndim)) else order


def _laid_out(buffer: Any, piece: Piece) -> np.ndarray:
    """The array ``piece`` describes over ``buffer``, its axes in memory in the piece's order."""
    if piece.order is None:
        return np.ndarray(piece.shape, piece.dtype, buffer=buffer, offset=piece.offset)
    stored = tuple(piece.shape[axis] for axis in piece.order)
    return np.ndarray(stored, piece.dtype, buffer=buffer, offset=piece.offset).transpose(np.argsort(piece.order))


def _copy_into(buffer: Any, piece: Piece, array: np.ndarray) -> Copy:
    """The copy that puts ``array`` where ``piece`` says in ``buffer``, bit for bit."""
    target = _laid_out(buffer, piece)
    if array.dtype.fields is None:
        return target, array
    # Raw items: numpy copies a structured dtype field by field, leaving out its padding.
    raw = np.dtype((np.void, array.dtype.itemsize))
    return target.view(raw), array.view(raw)


def _replace(batch: Any, change: Any) -> Any:
    """``batch`` with each array, tensor or piece replaced by ``change(it)``, through tuples, lists and dicts."""
    if type(batch) in (tuple, list):
        return type(batch)(_replace(item, change) for item in batch)
    if type(batch) is dict:
        return {key: _replace(value, change) for key, value in batch.items()}
    return change(batch)


def _walk(batch: Any, visit: Any) -> None:
    if isinstance(batch, Piece):
        visit(batch)
    elif type(batch) in (tuple, list):
        for item in batch:
            _walk(item, visit)
    elif type(batch) is dict:
        for value in batch.values():
            _walk(value, visit)


def _map(name: str) -> mmap.mmap:
    fd = os.open(ROOT / name, os.O_RDWR)
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _new_segment(prefix: str, size: int, reserve: bool = True) -> tuple[str, mmap.mmap]:
    """A new file of ``size`` bytes named with ``prefix``, and its mapping; its
    memory taken now, or with ``reserve=False`` as its parts are (:meth:`Arena.reserve`)."""
    name = f"{prefix}{uuid.uuid4().hex}"
    fd = os.open(ROOT / name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, size)
        if reserve:
            _reserve(fd, 0, size)
        return name, mmap.mmap(fd, size)
    except BaseException:
        _unlink(str(ROOT / name))
        raise
    finally:
        os.close(fd)


def _reserve(fd: int, offset: int, size: int) -> None:
    """Take the memory of ``size`` bytes of a segment from ``offset`` now, before
    they are written: a full tmpfs is then an error here, not a SIGBUS in
    whichever process first writes to a page that has no room."""
    try:
        os.posix_fallocate(fd, offset, size)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return  # a file system that cannot: its pages are taken as they are written
        if exc.errno != errno.ENOSPC:
            raise
        raise SharedMemoryFull(
            errno.ENOSPC,
            f"no room for a shared-memory segment of {format_bytes(size)}: {describe_space()}. "
            "Give the container more (docker run --shm-size=..., or Kubernetes' emptyDir with medium: Memory "
            "at /dev/shm), point QUEUETUNE_SHM_DIR at a larger tmpfs, or lower the prefetcher's max_bytes",
        ) from None


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def _worth_lending(segment: int, reserve: int) -> bool:
    """Whether a spare segment of ``segment`` bytes suits batches of ``reserve``
    bytes: large enough, and not more than :data:`OVERSIZE` larger (in whole pages).

    >>> _worth_lending(_round(100_000), 100_000), _worth_lending(_round(200_000), 100_000), _worth_lending(500, 100_000)
    (True, False, False)
    """
    return reserve <= segment <= _round(int(reserve * (1 + OVERSIZE)))


def _pages(size: int) -> int:
    """``size`` bytes in whole pages."""
    return -(-size // _PAGE) * _PAGE


def _round(size: int) -> int:
    """A segment's size for batches of ``size`` bytes: whole pages, with room for alignment."""
    size += 16 * _ALIGN
    return -(-size // _PAGE) * _PAGE


def _release_file(path: str) -> None:
    """Remove a segment no process uses any more, its memory with it: cut to nothing
    first, so that its pages go now even where a worker still maps it (a worker
    lets go of its mappings of removed segments only as its next build starts)."""
    try:
        os.truncate(path, 0)
    except OSError:
        pass
    _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
