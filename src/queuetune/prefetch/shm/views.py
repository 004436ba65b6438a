"""A shipped batch opened as arrays and tensors over its segments (:func:`views`),
each segment given back once the last view into it is gone."""

from __future__ import annotations

import ctypes
import mmap
import weakref
from collections.abc import Callable
from typing import Any

from ...frameworks import TENSORS
from . import packing
from .packing import Piece, Shipped, replace
from .segments import map_segment


def views(
    shipped: Shipped, mapped: Callable[[str], mmap.mmap | None], gone: Callable[[str], None]
) -> tuple[Any, dict[str, Any]]:
    """The batch of ``shipped`` with its pieces as arrays (and tensors) over the
    segments, and the holder of each segment by name. ``mapped(name)``: the
    receiver's mapping of a segment (None where it has none: mapped here);
    ``gone(name)`` runs once the last view into segment ``name`` is gone.

    >>> import numpy as np, os
    >>> from queuetune.prefetch.shm.arena import ship
    >>> from queuetune.prefetch.shm.pool import Pool
    >>> pool = Pool(os.getpid())
    >>> shipped = ship(np.arange(20_000.0), pool.lend(200_000), pool.shelf)
    >>> given = []
    >>> batch, holders = views(shipped, lambda name: None, given.append)
    >>> float(batch[-1]), list(holders) == list(shipped.segments())
    (19999.0, True)
    >>> del batch, holders; given == list(shipped.segments())
    True
    >>> pool.close()
    """
    holders: dict[str, Any] = {}

    def view(piece: Any) -> Any:
        if not isinstance(piece, Piece):
            return piece
        holder = holders.get(piece.name)
        if holder is None:
            mapping = mapped(piece.name)
            if mapping is None:  # a segment made by a worker that the receiver has not seen
                mapping = map_segment(piece.name)
            holders[piece.name] = holder = (ctypes.c_char * len(mapping)).from_buffer(mapping)
        array = packing.laid_out(memoryview(holder), piece)
        return array if piece.kind == "numpy" else TENSORS[piece.kind].from_array(array, piece.tensor_dtype)

    batch = replace(shipped.batch, view)
    # Each holder is its arrays' base: its finalizer gives the segment back once the last
    # view is gone. Made once every view is: a batch that failed halfway gives back nothing.
    for name, holder in holders.items():
        weakref.finalize(holder, gone, name)
    return batch, holders
