"""What a Prefetcher with a device stage keeps from one epoch to the next
(:class:`Staging`): the transfer, the pool of pinned buffers, and the flight of
the epoch under way, each epoch's batches read through it."""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..request import answered_now
from . import seam
from .notes import Notes
from .pinned import PinnedPool
from .settings import DeviceOptions
from .stage import Flight, Hooks, Stage
from .transfer import Transfer

if TYPE_CHECKING:
    from ..epoch import Epoch


class Staging:
    """The device stage of a Prefetcher of ``options``: its transfer and pinned
    buffers, made as the first epoch begins and kept until :meth:`release`.

    >>> from queuetune.prefetch import Prefetcher
    >>> from .transfer import HostTransfer
    >>> import numpy as np
    >>> with seam.substituted(HostTransfer):
    ...     p = Prefetcher([np.zeros(256, np.uint8)] * 3, max_bytes="1MiB", device="cuda")
    >>> [int(b.sum()) for b in p], p._kept.staging.pool.held  # two buffers, reused: device_depth=2
    ([0, 0, 0], 512)
    >>> p.close(); p._kept.staging.pool.held
    0
    """

    def __init__(self, options: DeviceOptions) -> None:
        self.options = options
        # What makes the transfer: a test's substitute in force now, else CUDA's (made at the first epoch).
        self._transfer: Transfer | None = None
        self._factory = seam.transfer_factory(options)
        self.pool: PinnedPool | None = None
        self._flight: weakref.ref[Flight] | None = None

    def run(self, epoch: Epoch, owner: object) -> Iterator[Any]:
        """``epoch``'s batches on the device, ahead of the consumer; the epoch's place
        counts those handed over to the consumer alone (not those copied ahead)."""
        self.stop("a new epoch began")
        if self._transfer is None:
            self._transfer = self._factory()
        transfer = self._transfer
        if self.pool is None:
            self.pool = PinnedPool(transfer.allocate, self.options.pinned_bytes)
        notes = Notes(epoch.recorder)
        hooks = Hooks(copied=notes.copied, levels=notes.levels, settled=notes.settle)
        handed = epoch.handed
        if handed is not None:
            positions: deque[int] = deque()
            epoch.hold = positions.append
            progress = handed.progress

            def ended() -> None:
                progress.ended = True

            hooks = replace(hooks, handed=lambda: progress.handed(positions.popleft()), ended=ended)
        schedule = epoch.schedule
        flight = Flight(
            epoch.run(owner), transfer, self.pool, self.options, hooks, lambda: answered_now(schedule),
            lambda: (epoch.reason or "the epoch was stopped") if schedule.stopped else None,
        )  # fmt: skip
        self._flight = weakref.ref(flight)
        return Stage(flight)

    def stop(self, reason: str) -> None:
        """Drop the flight under way, if any."""
        flight = None if self._flight is None else self._flight()
        if flight is not None:
            flight.drop(reason)

    def release(self) -> None:
        """Drop the flight under way and let go of every pinned buffer."""
        self.stop("close() was called")
        if self.pool is not None:
            self.pool.close()
