"""What the receiver lends a worker for one batch (:class:`Lease`), and the
spare segments it offers the workers in memory shared with them (:class:`Shelf`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Bytes of a segment's name after its pool's prefix (a uuid's hex).
KEY = 32


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
        self._keys = context.RawArray("c", self.CAPACITY * KEY)

    def offer(self, name: str, size: int) -> bool:
        """Put segment ``name`` of ``size`` bytes on the shelf; False if it is full or locked."""
        with self._held() as held:
            empty = [place for place in range(self.CAPACITY) if self._sizes[place] == 0] if held else []
            if not empty:
                return False
            self._keys[empty[0] * KEY : (empty[0] + 1) * KEY] = name[len(self.prefix) :].encode()
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
        key: bytes = self._keys[place * KEY : (place + 1) * KEY]  # a RawArray of chars: its slices are bytes
        return self.prefix + key.decode()
