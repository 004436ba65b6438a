"""In a worker process: where one batch's large arrays go (:class:`Arena`), the
segments it keeps mapped, and the calls a build collates through
(:func:`allocate`, :func:`reserve`) and ships its batch with (:func:`ship`)."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...frameworks import tensors_of
from ...record.nbytes import nbytes
from . import files
from .packing import Copy, Piece, Shipped, copy, copy_into, order_of, portable, replace, shared_array
from .segments import MIN_BYTES, OVERSIZE, aligned, map_segment, new_segment, pages, reserve_bytes, rounded
from .shelf import Lease, Shelf


class _Mapped:
    """A worker's mappings of the pool's segments, the least recently used let go first."""

    def __init__(self) -> None:
        self.maps: OrderedDict[str, mmap.mmap] = OrderedDict()

    def get(self, name: str) -> mmap.mmap:
        mapped = self.maps.pop(name, None) or map_segment(name)
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
SHELF: list[Shelf] = []


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
        self.shelf = shelf if shelf is not None else (SHELF[0] if SHELF else None)
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
            reserve_bytes(self._fd, offset, view.nbytes)

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
                files.unlink(str(files.ROOT / self.lent))
        for name in self.made:
            _MAPPED.maps.pop(name, None)
            files.unlink(str(files.ROOT / name))
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
            name = self.shelf.take(want, rounded(int(want * (1 + OVERSIZE))), self.lease.number)
        if name is not None:
            self.buffer, self.lent, self.left = _MAPPED.get(name), name, 0
        else:
            fitting = [rounded(n) for n in (want, size) if rounded(n) <= self.left]
            if not fitting:
                return None
            name, self.buffer = self._make(fitting[0], reserve=False)
        self.name = name
        self._fd = os.open(files.ROOT / name, os.O_RDWR)
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

        >>> import sys
        >>> from queuetune.prefetch.shm.packing import unshared
        >>> from queuetune.prefetch.shm.pool import Pool
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
            shareable = shared_array(obj)
            if shareable is None:
                size += nbytes(obj)
                return portable(obj)
            array, kind, tensor_dtype = shareable
            size += array.nbytes
            piece = Piece("", 0, array.shape, array.dtype, kind, order_of(array), tensor_dtype)
            found.append((obj, array, piece))
            return piece

        described = replace(batch, describe)
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
                copies.append(copy_into(self.buffer, piece, array))
                shared += array.nbytes
        if overflow:
            spilled = self._spill(overflow)
            copies.extend(spilled)
            shared += sum(array.nbytes for _, array in spilled)
        unplaced = {id(piece): portable(obj) for obj, _, piece in found if not piece.name}
        if unplaced:
            described = replace(described, lambda item: unplaced.get(id(item), item))
        return Shipped(described, self.lent, self.made, size, shared=shared), copies, alone and bool(copies)

    def _room(self, size: int, reserve: bool = True) -> int | None:
        if size < MIN_BYTES or self._segment(size) is None or self.buffer is None:
            return None
        offset = aligned(self.used)
        if offset + size > len(self.buffer):
            return None
        if reserve and self._fd is not None:
            reserve_bytes(self._fd, offset, size)
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
            start = aligned(end)
            if pages(start + array.nbytes) > self.left:
                break
            offsets.append(start)
            end = start + array.nbytes
        if not offsets:
            return []
        name, mapped = self._make(pages(end))
        copies = []
        for (array, piece), offset in zip(overflow, offsets):
            piece.name, piece.offset = name, offset
            copies.append(copy_into(mapped, piece, array))
        return copies

    def _make(self, size: int, reserve: bool = True) -> tuple[str, mmap.mmap]:
        """A new segment of ``size`` bytes for this batch, kept mapped and told to the receiver."""
        name, mapped = new_segment(self.lease.prefix, size, reserve)
        _MAPPED.add(name, mapped)
        self.made[name] = size
        self.left -= size
        return name, mapped


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
