"""What a worker process's allocator keeps after its builds, handed back to the system.

glibc's ``malloc`` keeps the memory its process freed for the next allocations,
and once a large block has been freed it serves blocks of that size from its
heap rather than from ``mmap``: a worker that decoded large images holds that
memory as long as it lives, though nothing uses it between epochs. Between two
epochs, where its worker is idle, :func:`hand_back` gives it back
(``malloc_trim``); the next epoch's first builds take their pages again. Where
the C library is not glibc (musl, macOS), nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
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
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
        libc.mallinfo2.argtypes, libc.mallinfo2.restype = [], _MallInfo2
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


def _resident() -> int:
    """The bytes this process holds in memory (its RSS), 0 where unknown."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_PAGE = mmap.PAGESIZE
