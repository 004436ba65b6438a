"""The clock every record is timed with, and a thread's busy time."""

from __future__ import annotations

import contextlib
import os
import threading
import time

clock = time.monotonic


class _Schedstat:
    """This thread's ``/proc/thread-self/schedstat``, open (the file stays the
    thread's that opened it), closed with the thread's locals."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)

    def waited(self) -> float:
        """Seconds the thread has been ready to run and waiting for a core."""
        return int(os.pread(self.fd, 64, 0).split()[1]) / 1e9

    def __del__(self) -> None:
        with contextlib.suppress(OSError, TypeError):  # TypeError: at interpreter exit
            os.close(self.fd)


_THREAD = threading.local()


def busy_time() -> float:
    """Seconds this thread has been busy: its CPU time, and the time it was ready
    and waited for a core (Linux's schedstat, exact while the thread runs), so
    that the difference over a build is the time it did not wait on I/O or a
    lock, however busy the machine; where schedstat cannot be read, the CPU time
    alone. About 3 µs a call.

    >>> began = busy_time(); sum(range(10**5)) > 0 and busy_time() >= began
    True
    """
    stat: _Schedstat | bool | None = getattr(_THREAD, "schedstat", None)
    if stat is None or (isinstance(stat, _Schedstat) and stat.pid != os.getpid()):
        try:
            stat = _THREAD.schedstat = _Schedstat()
        except OSError:
            stat = _THREAD.schedstat = False
    if isinstance(stat, _Schedstat):
        try:
            return time.thread_time() + stat.waited()
        except (OSError, ValueError, IndexError):
            pass
    return time.thread_time()
