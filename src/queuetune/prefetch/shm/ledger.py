"""A pool's account of its files (:class:`Ledger`): the segments it mapped, by
name, and the bytes granted to the builds under way."""

from __future__ import annotations

import mmap
from collections import deque
from collections.abc import Iterable

from . import files
from .files import release_file
from .segments import map_segment


class Ledger:
    """The bytes a :class:`~.pool.Pool`'s files hold (:attr:`bytes`: each segment
    mapped, in :attr:`maps`) and may yet hold (:attr:`granted`: the grant of each
    lease not settled nor forfeited). The pool's lock guards it.

    >>> ledger = Ledger()
    >>> number = ledger.grant(8192)
    >>> ledger.granted, ledger.committed
    (8192, 8192)
    >>> ledger.forfeit(number); ledger.forfeit(number); ledger.committed
    0
    """

    def __init__(self) -> None:
        self.maps: dict[str, mmap.mmap] = {}
        # Segments put on the shelf and not settled since (on it, or taken by a build).
        self.offered: set[str] = set()
        self.bytes = 0
        self.granted = 0
        # The grant of each lease not settled nor forfeited, by number; the last number given.
        self._grants: dict[int, int] = {}
        self.leases = 0
        # The segments removed lately, told to the workers with each lease.
        self.dropped: deque[str] = deque(maxlen=64)

    @property
    def committed(self) -> int:
        """:attr:`bytes` and :attr:`granted`: the most the files can take at once."""
        return self.bytes + self.granted

    def held(self) -> int:
        """Segments holding batches: neither offered nor taken by a build under way."""
        return len(self.maps) - len(self.offered)

    def size(self, name: str) -> int:
        """The bytes of segment ``name``; 0 where it is not mapped."""
        return len(self.maps.get(name, b""))

    def grant(self, grant: int) -> int:
        """The next lease's number, ``grant`` bytes granted to it (none where 0)."""
        self.leases += 1
        if grant > 0:
            self._grants[self.leases] = grant
            self.granted += grant
        return self.leases

    def forfeit(self, number: int) -> None:
        """Lease ``number``'s grant given back (nothing where it was already)."""
        self.granted -= self._grants.pop(number, 0)

    def forfeit_taken(self, taken: Iterable[tuple[str, int]] | None) -> None:
        """The grants of leases whose builds took a spare segment instead
        (``taken``: each segment with its lease's number) given back."""
        for _name, number in taken or ():
            self.forfeit(number)

    def adopt(self, name: str) -> None:
        """Map segment ``name``, made by a worker, once."""
        if name in self.maps:
            return
        mapped = self.maps[name] = map_segment(name)
        self.bytes += len(mapped)

    def drop(self, name: str) -> None:
        """Remove segment ``name``'s file; its mapping goes once no view of it is left."""
        self.offered.discard(name)
        mapped = self.maps.pop(name, None)
        if mapped is None:
            return
        self.bytes -= len(mapped)
        release_file(str(files.ROOT / name))
        self.dropped.append(name)

    def clear(self) -> None:
        """Forget every segment and grant (their files are swept apart)."""
        self.maps.clear()
        self.offered.clear()
        self._grants.clear()
        self.bytes = self.granted = 0
