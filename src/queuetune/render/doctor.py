"""What ``queuetune doctor`` prints: the shared-memory pools found, and what became of the orphaned ones."""

from __future__ import annotations

from ..prefetch.shm import PoolFiles
from ..units import format_bytes


def shm_lines(found: list[PoolFiles], removed: list[PoolFiles], dry_run: bool) -> list[str]:
    """A line per pool of shared-memory files, then a summary.

    >>> live = PoolFiles("queuetune-7-ab-", 7, ("queuetune-7-ab-lock",), 0, orphaned=False)
    >>> gone = PoolFiles("queuetune-9-cd-", 9, ("queuetune-9-cd-1", "queuetune-9-cd-lock"), 2 << 20, orphaned=True)
    >>> print("\\n".join(shm_lines([live, gone], [gone], dry_run=False)))
    pid 7 (queuetune-7-ab-*): 1 file, 0 B, in use
    pid 9 (queuetune-9-cd-*): 2 files, 2.0 MiB, orphaned: removed
    removed 2 files (2.0 MiB) of 1 orphaned pool
    """
    gone = {pool.prefix for pool in removed}
    lines = []
    for pool in found:
        state = "in use"
        if pool.orphaned:
            state = "orphaned: would remove" if dry_run else "orphaned: removed"
            if not dry_run and pool.prefix not in gone:
                state = "orphaned: removed meanwhile by another process"
        count = len(pool.files)
        lines.append(
            f"pid {pool.owner} ({pool.prefix}*): {count} file{'s' * (count != 1)}, {format_bytes(pool.nbytes)}, {state}"
        )
    orphans = [pool for pool in found if pool.orphaned] if dry_run else removed
    if not orphans:
        lines.append("no orphaned shared-memory files")
        return lines
    files = sum(len(pool.files) for pool in orphans)
    size = format_bytes(sum(pool.nbytes for pool in orphans))
    verb = "would remove" if dry_run else "removed"
    lines.append(f"{verb} {files} files ({size}) of {len(orphans)} orphaned pool{'s' * (len(orphans) != 1)}")
    return lines
