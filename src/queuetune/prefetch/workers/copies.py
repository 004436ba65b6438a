"""The copies worker processes make behind their builds, as the receiver sees
them (:class:`Copies`): which are made, and the batches dropped before theirs was."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ...record.recorder import clock
from .. import shm
from .base import LIVENESS


class Copies:
    """Each worker process's word that a copy made behind its build is done (see
    :class:`.building.Shipper`): a semaphore for each of ``slots`` workers
    (:attr:`done`, made with ``context``), released once for each copy, and the
    releases taken here; and the batches dropped while theirs was under way,
    held until it is made, so that their segments are not lent again before.

    >>> import multiprocessing
    >>> copies = Copies(multiprocessing.get_context(), 1)
    >>> batch = shm.Shipped(None, None, {}, 0)
    >>> batch.pending = (0, 0)  # the first copy of the worker in slot 0
    >>> copies.pending(batch), copies.hold(batch), copies.made()
    (True, True, [])
    >>> copies.done[0].release()
    >>> copies.made() == [batch], copies.pending(batch), copies.wait(batch)
    (True, False, None)
    """

    def __init__(self, context: Any, slots: int) -> None:
        self.done = [context.Semaphore(0) for _ in range(slots)]
        self._copied = [0] * slots
        # Batches dropped while a copy into their segments was under way: each
        # goes back to the pool once its copy is made (see made).
        self._held: list[shm.Shipped] = []
        # Guards the batches held and the counts of releases taken: the
        # consumer's thread and the pool's (through callbacks) both take releases.
        self._lock = threading.Lock()

    def pending(self, batch: shm.Shipped) -> bool:
        """Whether a copy made behind a build may still be filling ``batch``'s
        segments: its worker's releases taken here do not yet reach its number."""
        return batch.pending is not None and self._copied[batch.pending[0]] <= batch.pending[1]

    def wait(self, batch: shm.Shipped, until: float | None = None, dead: Callable[[], bool] = bool) -> str | None:
        """Wait until ``batch``'s copy is made: None once it is, else "died"
        (``dead()`` says a worker died first) or "late" (``until`` passed first)."""
        if batch.pending is None:
            return None
        slot = batch.pending[0]
        while self.pending(batch):
            piece = LIVENESS if until is None else max(0.0, min(LIVENESS, until - clock()))
            if self.done[slot].acquire(timeout=piece):
                self._took(slot)
            elif dead():
                return "died"
            elif until is not None and clock() >= until:
                return "late"
        return None

    def hold(self, batch: shm.Shipped) -> bool:
        """Hold ``batch``, dropped, until its copy is made, and say True; False
        where none is under way (its segments may go back now)."""
        if not self.pending(batch):
            return False
        with self._lock:
            self._held.append(batch)
        return True

    def made(self) -> list[shm.Shipped]:
        """The batches held whose copies are made now: held no longer."""
        if not self._held:
            return []
        with self._lock:
            held, self._held = self._held, []
        made = []
        for batch in held:
            slot = batch.pending[0]  # type: ignore[index]
            while self.pending(batch) and self.done[slot].acquire(block=False):
                self._took(slot)
            if self.pending(batch):
                with self._lock:
                    self._held.append(batch)
            else:
                made.append(batch)
        return made

    def _took(self, slot: int) -> None:
        with self._lock:
            self._copied[slot] += 1
