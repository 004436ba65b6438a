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

from .arena import Arena, allocate, building, reserve, ship
from .files import (
    PoolFiles,
    available,
    describe_space,
    pools,
    space,
    sweep,
    sweep_orphans,
    sweep_pool,
)
from .packing import LOCAL_REFS, Copy, Piece, Shipped, copy, portable, unshared
from .pool import Pool
from .segments import MIN_BYTES, OVERSIZE
from .shelf import Lease, Shelf
from .spares import CALM, MISSED, SPARE

__all__ = [
    "CALM",
    "LOCAL_REFS",
    "MIN_BYTES",
    "MISSED",
    "OVERSIZE",
    "SPARE",
    "Arena",
    "Copy",
    "Lease",
    "Piece",
    "Pool",
    "PoolFiles",
    "Shelf",
    "Shipped",
    "allocate",
    "available",
    "building",
    "copy",
    "describe_space",
    "pools",
    "portable",
    "reserve",
    "ship",
    "space",
    "sweep",
    "sweep_orphans",
    "sweep_pool",
    "unshared",
]
