"""What the device stage asks of a copy to the device (:class:`Transfer`, :class:`Copy`),
and :class:`HostTransfer`, a stand-in that copies on the host (for tests and examples:
see :mod:`.seam`)."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

#: numpy's dtypes a tensor can hold: arrays of these go to the device, others stay as they are.
_NAMES = "bool int8 int16 int32 int64 uint8 float16 float32 float64 complex64 complex128"
MOVABLE_DTYPES = frozenset(np.dtype(name) for name in _NAMES.split())


class Copy(Protocol):
    """One batch's copies to the device, started: its leaves on the device once waited
    for. ``timed``: the device times it (:meth:`elapsed` tells its time once done)."""

    timed: bool

    def ready(self) -> list[Any]:
        """The device's leaves, safe to use and to free on the consumer's stream (which
        waits on the copy's event alone); the copy's error, if it failed."""

    def finished(self) -> None:
        """Return once the copy has read its staging buffers (they may then be written again)."""

    def elapsed(self, wait: bool) -> float | None:
        """The copy's own seconds on the device, as the device timed it; None where
        it cannot tell (no device), or, unless ``wait``, where it is not done yet."""


class Transfer(Protocol):
    """How batches reach the device: pinned staging buffers, filled on the host, then
    copied to the device without the host waiting.

    ``lends``: the staged leaves themselves are handed over (pinned host memory,
    no device), so a buffer is the consumer's once handed over, never reused."""

    lends: bool

    def nbytes(self, leaf: Any) -> int | None:
        """The bytes ``leaf`` takes if it goes to the device, None if it stays as it is."""

    def allocate(self, nbytes: int) -> Any:
        """A new staging buffer of ``nbytes`` bytes (pinned host memory)."""

    def stage(self, leaf: Any, buffer: Any) -> Any:
        """``leaf`` copied into ``buffer``: the staged leaf, of ``leaf``'s dtype and shape."""

    def start(self, staged: list[Any]) -> Copy:
        """Start copying ``staged`` to the device; the host does not wait for it."""


class HostTransfer:
    """A transfer that stands in for the copy to a device on a machine without one:
    staging buffers are numpy byte arrays, the device's leaves new numpy arrays
    (so data that arrives is bit for bit what was built). Subclass it to delay or
    fail copies (see :mod:`.seam`).

    >>> transfer = HostTransfer()
    >>> leaf = np.arange(4, dtype=np.int32)
    >>> staged = transfer.stage(leaf, transfer.allocate(transfer.nbytes(leaf)))
    >>> transfer.start([staged]).ready()[0].tolist()
    [0, 1, 2, 3]
    """

    lends = False

    def nbytes(self, leaf: Any) -> int | None:
        if isinstance(leaf, np.ndarray) and leaf.dtype in MOVABLE_DTYPES and leaf.dtype.isnative:
            return int(leaf.nbytes)
        return None

    def allocate(self, nbytes: int) -> Any:
        return np.empty(nbytes, dtype=np.uint8)

    def stage(self, leaf: Any, buffer: Any) -> Any:
        staged = buffer[: leaf.nbytes].view(leaf.dtype).reshape(leaf.shape)
        staged[...] = leaf
        return staged

    def start(self, staged: list[Any]) -> Copy:
        return HostCopy([leaf.copy() for leaf in staged])


class HostCopy:
    """A copy done as it starts, its ``leaves`` ready as they are: a :class:`HostTransfer`'s, or
    pinned leaves lent with no device (``pin_memory=True`` alone)."""

    timed = False

    def __init__(self, leaves: list[Any]) -> None:
        self.leaves = leaves

    def ready(self) -> list[Any]:
        return self.leaves

    def finished(self) -> None:
        return None

    def elapsed(self, wait: bool) -> float | None:
        return None
