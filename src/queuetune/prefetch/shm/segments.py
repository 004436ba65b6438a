"""One segment: a file in :data:`.files.ROOT` mapped into memory, its memory
taken before it is written (a full tmpfs is an error, not a SIGBUS), and the
sizes segments are made in."""

from __future__ import annotations

import errno
import mmap
import os
import uuid

from ...common.units import format_bytes
from ..errors import SharedMemoryFull
from . import files

MIN_BYTES = 64 * 1024
# Offsets of arrays in a segment; segment sizes are whole pages.
ALIGN = 64
PAGE = mmap.PAGESIZE
# A spare segment larger than the batches asked for by more than this share is removed, not lent.
OVERSIZE = 1 / 8


def map_segment(name: str) -> mmap.mmap:
    fd = os.open(files.ROOT / name, os.O_RDWR)
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def new_segment(prefix: str, size: int, reserve: bool = True) -> tuple[str, mmap.mmap]:
    """A new file of ``size`` bytes named with ``prefix``, and its mapping; its
    memory taken now, or with ``reserve=False`` as its parts are (:meth:`Arena.reserve`)."""
    name = f"{prefix}{uuid.uuid4().hex}"
    fd = os.open(files.ROOT / name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, size)
        if reserve:
            reserve_bytes(fd, 0, size)
        return name, mmap.mmap(fd, size)
    except BaseException:
        files.unlink(str(files.ROOT / name))
        raise
    finally:
        os.close(fd)


def reserve_bytes(fd: int, offset: int, size: int) -> None:
    """Take the memory of ``size`` bytes of a segment from ``offset`` now, before
    they are written: a full tmpfs is then an error here, not a SIGBUS in
    whichever process first writes to a page that has no room."""
    try:
        os.posix_fallocate(fd, offset, size)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return  # a file system that cannot: its pages are taken as they are written
        if exc.errno != errno.ENOSPC:
            raise
        raise SharedMemoryFull(
            errno.ENOSPC,
            f"no room for a shared-memory segment of {format_bytes(size)}: {files.describe_space()}. "
            "Give the container more (docker run --shm-size=..., or Kubernetes' emptyDir with medium: Memory "
            "at /dev/shm), point QUEUETUNE_SHM_DIR at a larger tmpfs, or lower the prefetcher's max_bytes",
        ) from None


def aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def worth_lending(segment: int, reserve: int) -> bool:
    """Whether a spare segment of ``segment`` bytes suits batches of ``reserve``
    bytes: large enough, and not more than :data:`OVERSIZE` larger (in whole pages).

    >>> worth_lending(rounded(100_000), 100_000), worth_lending(rounded(200_000), 100_000), worth_lending(500, 100_000)
    (True, False, False)
    """
    return reserve <= segment <= rounded(int(reserve * (1 + OVERSIZE)))


def pages(size: int) -> int:
    """``size`` bytes in whole pages."""
    return -(-size // PAGE) * PAGE


def rounded(size: int) -> int:
    """A segment's size for batches of ``size`` bytes: whole pages, with room for alignment."""
    size += 16 * ALIGN
    return -(-size // PAGE) * PAGE
