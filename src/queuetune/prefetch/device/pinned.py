"""Pinned staging buffers, reused (:class:`PinnedPool`): kept by size class,
their bytes counted against a budget."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .transfer import Copy


def size_class(nbytes: int) -> int:
    """The size of the buffer that holds ``nbytes``: rounded up to an eighth of
    its power of two (at most an eighth more), so that batches that vary a little share buffers.

    >>> [size_class(n) for n in (0, 1, 100, 4096, 4097, 5000)]
    [0, 64, 104, 4096, 4608, 5120]
    """
    if nbytes <= 0:
        return 0
    if nbytes <= 64:
        return 64
    step = 1 << max(nbytes.bit_length() - 4, 0)
    return -(-nbytes // step) * step


@dataclass
class Buffer:
    """A staging buffer of ``size`` bytes; ``copy``: the last copy that reads it (None: none),
    to be waited for (``copy.finished()``) before the buffer is written again."""

    size: int
    memory: Any
    copy: Copy | None = None


class PinnedPool:
    """Staging buffers made by ``allocate`` and reused: ``held`` bytes in all
    (lent out or spare) never pass ``limit``.

    >>> import numpy as np
    >>> pool = PinnedPool(lambda n: np.empty(n, np.uint8), limit=4096)
    >>> first = pool.take([1000, 24]); pool.held
    1088
    >>> pool.give(first); again = pool.take([1000]); again[0] is first[0], pool.held
    (True, 1088)
    >>> pool.take([4000]) is None  # no room while the first is lent out
    True
    """

    def __init__(self, allocate: Callable[[int], Any], limit: int) -> None:
        self.allocate, self.limit = allocate, limit
        self.spare: dict[int, list[Buffer]] = {}
        self.held = 0
        self.peak = 0
        self.closed = False
        # The consumer takes and gives; close() may come from another thread.
        self.lock = threading.RLock()

    def take(self, sizes: list[int]) -> list[Buffer] | None:
        """A buffer for each of ``sizes`` (spare ones first), or None where they
        do not fit in the limit even with every spare buffer let go of."""
        with self.lock:
            return self._take(sizes)

    def _take(self, sizes: list[int]) -> list[Buffer] | None:
        classes = [size_class(n) for n in sizes]
        reused: list[Buffer | None] = [self._spare(c) for c in classes]
        needed = sum(c for c, b in zip(classes, reused, strict=True) if b is None)
        while self.held + needed > self.limit and self.spare:
            self._free(self._largest_spare())
        if self.held + needed > self.limit:
            self.give([b for b in reused if b is not None])
            return None
        taken = [b if b is not None else Buffer(c, self.allocate(c)) for c, b in zip(classes, reused, strict=True)]
        self.held += needed
        self.peak = max(self.peak, self.held)
        return taken

    def give(self, buffers: list[Buffer], copy: Copy | None = None) -> None:
        """``buffers`` back, spare (read by ``copy``: waited for before they are written again)."""
        with self.lock:
            for buffer in buffers:
                self._give(buffer, copy)

    def _give(self, buffer: Buffer, copy: Copy | None) -> None:
        if copy is not None:
            buffer.copy = copy
        if self.closed:
            self._free(buffer)
        else:
            self.spare.setdefault(buffer.size, []).append(buffer)

    def lend(self, buffers: list[Buffer]) -> None:
        """``buffers`` are the consumer's now (pinned leaves handed over): no longer held here."""
        with self.lock:
            self.held -= sum(b.size for b in buffers)

    def close(self) -> None:
        """Let go of every spare buffer, and of each buffer given back from now on."""
        with self.lock:
            self.closed = True
            while self.spare:
                self._free(self._largest_spare())

    def _spare(self, size: int) -> Buffer | None:
        shelf = self.spare.get(size)
        if not shelf:
            return None
        buffer = shelf.pop()
        if not shelf:
            del self.spare[size]
        return buffer  # its copy, if any, waited for by whoever writes it (see .stager)

    def _largest_spare(self) -> Buffer:
        buffer = self._spare(max(self.spare))
        assert buffer is not None
        return buffer

    def _free(self, buffer: Buffer) -> None:
        if buffer.copy is not None:
            buffer.copy.finished()
        buffer.copy = buffer.memory = None
        self.held -= buffer.size
