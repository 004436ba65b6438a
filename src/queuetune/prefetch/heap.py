"""How a worker process's allocator keeps and gives back the memory of its builds.

glibc's ``malloc`` keeps the memory its process freed for the next allocations,
and once a large block has been freed it serves blocks of that size from its
heap rather than from ``mmap``: a worker that decoded large images holds that
memory as long as it lives, though nothing uses it between epochs. Between two
epochs, where its worker is idle, :func:`hand_back` gives it back
(``malloc_trim``); the next epoch's first builds take their pages again.

Within an epoch the opposite holds. A worker joins each sample into its batch
as it is built and lets go of it (:mod:`.stream`), so after every sample the
free memory at the top of its heap is all that sample's build used; glibc gives
that top back to the system once it passes its trim threshold (twice the
largest block freed so far), and the next sample takes the same pages again,
each a page fault: a JPEG decoded, cropped and normalized took 760 faults a
sample where a DataLoader's worker, which holds a batch's samples until it
stacks them, took 180, and a third more CPU. :func:`keep_for_builds` sets the
thresholds where glibc's own rule ends for blocks of 32 MiB and more (blocks up
to 32 MiB from the heap, its top kept up to 64 MiB), so that a worker keeps
between samples what one sample's build uses, as DataLoader's worker does.
Where the C library is not glibc (musl, macOS), nothing is done.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
from typing import Any


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _libc() -> Any:
    try:
        # The C library the process runs on, without ctypes.util.find_library, which
        # runs ldconfig in a subprocess: a worker calls this as it starts.
        libc = ctypes.CDLL(None)
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
        libc.mallinfo2.argtypes, libc.mallinfo2.restype = [], _MallInfo2
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    except (OSError, AttributeError):  # not glibc, or a glibc before 2.33
        return None
    return libc


def kept() -> int | None:
    """The bytes the allocator keeps free in its heap (None where it cannot tell).

    >>> kept() is None or kept() >= 0
    True
    """
    libc = _libc()
    return None if libc is None else int(libc.mallinfo2().fordblks)


def hand_back() -> int:
    """Give back to the system what the allocator keeps free; the bytes the
    process held in memory before less those it holds now (0 where nothing
    could be done).

    >>> hand_back() >= 0
    True
    """
    libc = _libc()
    if libc is None:
        return 0
    before = _resident()
    libc.malloc_trim(0)
    return max(0, before - _resident())


# mallopt's parameters (malloc.h) and glibc's ceiling for its own mmap threshold on 64-bit machines.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 1024 * 1024
# Set by the user for the process: each names a threshold :func:`keep_for_builds` leaves as set.
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def keep_for_builds() -> bool:
    """In a worker process, have the allocator keep between two samples what
    one sample's build uses (see the module's text); False where nothing was
    set (not glibc, or the process's environment sets the thresholds itself).

    >>> MMAP_THRESHOLD // 2**20, 2 * MMAP_THRESHOLD // 2**20  # blocks from the heap up to, its top kept up to (MiB)
    (32, 64)
    """
    libc = _libc()
    if libc is None or any(name in os.environ for name in _USER_SETTINGS):
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD)
    )


def _resident() -> int:
    """The bytes this process holds in memory (its RSS), 0 where unknown."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_PAGE = mmap.PAGESIZE
