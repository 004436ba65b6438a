"""The files of the shared-memory pools in :data:`ROOT`: their names, the lock a
pool's processes hold, the room left, and the sweeps that remove what a pool
killed or closed left behind (used by :mod:`.pool`, by ``queuetune doctor`` and
by the report's shared-memory lines)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ...common.units import format_bytes
from .. import lifeline

#: Where the segments are: /dev/shm, or the folder QUEUETUNE_SHM_DIR names (a larger
#: tmpfs where /dev/shm is small, as Docker's 64 MiB default is). Read once, at import.
ROOT = Path(os.environ.get("QUEUETUNE_SHM_DIR") or "/dev/shm")
PREFIX = "queuetune-"
# The name, after a pool's prefix, of the file its processes hold a lock on.
LOCK = "lock"


def available() -> bool:
    """Whether /dev/shm can be used here."""
    return ROOT.is_dir() and os.access(ROOT, os.W_OK)


def sweep(owner: int) -> int:
    """Remove every file left for receiver ``owner``; return how many."""
    return _sweep(f"{PREFIX}{owner}-")


def sweep_pool(prefix: str) -> int:
    """Remove every file of the pool whose names start with ``prefix`` (:attr:`Pool.prefix`); return how many."""
    if not prefix.startswith(PREFIX):
        raise ValueError(f"not the prefix of a pool's files: {prefix!r}")
    return _sweep(prefix)


def _sweep(prefix: str) -> int:
    # The lock file last: while it is there, a sweeper of orphans asks it before anything else.
    paths = sorted(ROOT.glob(f"{prefix}*"), key=lambda path: path.name == f"{prefix}{LOCK}")
    for path in paths:
        unlink(str(path))
    return len(paths)


@dataclass(frozen=True)
class PoolFiles:
    """The files of one pool found in :data:`ROOT`: the names' ``prefix``, the
    ``owner``'s pid, the file names, their bytes, and whether the pool is
    ``orphaned``: no process of its owner's holds it any more."""

    prefix: str
    owner: int
    files: tuple[str, ...]
    nbytes: int
    orphaned: bool


_POOL_NAME = re.compile(rf"({re.escape(PREFIX)}([0-9]+)-[0-9a-f]+-)")


def pools() -> list[PoolFiles]:
    """Every pool whose files are in :data:`ROOT`, by owner.

    A pool holds its lock file (``flock``) from its start to its close, and
    its worker processes hold it with it; the kernel lets go of the lock when
    the last of them ends, however it ends. A pool whose lock is free, or
    (made by a version without lock files) whose owner's pid runs no process,
    is orphaned.

    >>> from queuetune.prefetch.shm.pool import Pool
    >>> pool = Pool(os.getpid())
    >>> [p.orphaned for p in pools() if p.prefix == pool.prefix]
    [False]
    >>> pool.close()
    """
    found: dict[tuple[str, int], list[Path]] = {}
    for path in ROOT.glob(f"{PREFIX}*"):
        match = _POOL_NAME.match(path.name)
        if match is not None:
            found.setdefault((match.group(1), int(match.group(2))), []).append(path)
    result = []
    for (prefix, owner), paths in sorted(found.items()):
        with _claimed(prefix, owner) as orphaned:
            pass
        result.append(
            PoolFiles(prefix, owner, tuple(sorted(p.name for p in paths)), sum(_size(p) for p in paths), orphaned)
        )
    return result


def sweep_orphans() -> list[PoolFiles]:
    """Remove the files of every orphaned pool (see :func:`pools`); return those removed.

    >>> from queuetune.prefetch.shm.pool import Pool
    >>> pool = Pool(os.getpid())
    >>> pool.prefix in {p.prefix for p in sweep_orphans()}  # a live pool stays
    False
    >>> pool.close()
    """
    removed = []
    for pool in pools():
        if not pool.orphaned:
            continue
        with _claimed(pool.prefix, pool.owner) as orphaned:
            if orphaned:  # still: not taken meanwhile
                _sweep(pool.prefix)
                removed.append(pool)
    return removed


@contextlib.contextmanager
def _claimed(prefix: str, owner: int) -> Iterator[bool]:
    """Whether the pool of ``prefix`` is orphaned, holding its lock meanwhile if it is."""
    try:
        fd = os.open(ROOT / f"{prefix}{LOCK}", os.O_RDWR)
    except FileNotFoundError:
        yield not lifeline.alive(owner)
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def space() -> tuple[int, int]:
    """The bytes of :data:`ROOT`'s file system: in all, and free now.

    >>> total, free = space(); 0 <= free <= total
    True
    """
    usage = shutil.disk_usage(ROOT)
    return usage.total, usage.free


def describe_space() -> str:
    """:data:`ROOT` and its room, as a clause for an error message.

    >>> describe_space().startswith(f"{ROOT} holds ")
    True
    """
    total, free = space()
    return f"{ROOT} holds {format_bytes(total)}, {format_bytes(free)} free now"


def release_file(path: str) -> None:
    """Remove a segment no process uses any more, its memory with it: cut to nothing
    first, so that its pages go now even where a worker still maps it (a worker
    lets go of its mappings of removed segments only as its next build starts)."""
    try:
        os.truncate(path, 0)
    except OSError:
        pass
    unlink(path)


def unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
