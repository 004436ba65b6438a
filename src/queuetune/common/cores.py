"""The machine's cores: how many this process may run on, and how many sat idle lately."""

from __future__ import annotations

import os
from collections.abc import Iterable

import psutil

# Seconds between two readings of the machine's CPU times: /proc/stat counts in
# ticks of 10 ms, so a shorter interval says little.
INTERVAL = 0.1


def available() -> int:
    """The cores this process may run on (its CPU affinity), at least 1.

    >>> available() >= 1
    True
    """
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def idle_seconds() -> float | None:
    """The idle seconds (idle and waiting on I/O) of the cores this process may run
    on, summed over them since boot; None where the machine's times cannot be read.

    >>> idle_seconds() is None or idle_seconds() >= 0
    True
    """
    try:
        per_core = psutil.cpu_times(percpu=True)
    except (psutil.Error, OSError):
        return None
    try:
        allowed: Iterable[int] = os.sched_getaffinity(0)
    except AttributeError:  # not on Linux
        allowed = range(len(per_core))
    return sum(per_core[i].idle + getattr(per_core[i], "iowait", 0.0) for i in allowed if i < len(per_core))


class IdleCores:
    """How many of the available cores sat idle between its two latest readings.

    :meth:`read` is cheap to call often: it reads the machine's CPU times at
    most every ``interval`` seconds, and otherwise returns what it found last
    (None until two readings lie ``interval`` apart).

    >>> import time
    >>> meter = IdleCores()
    >>> meter.read(0.0) is None
    True
    >>> time.sleep(0.2)
    >>> 0 <= meter.read(0.2) <= available()
    True
    """

    def __init__(self, interval: float = INTERVAL) -> None:
        self.interval = interval
        self.cores = available()
        self._all = psutil.cpu_count() or self.cores
        self._last: tuple[float, float, float] | None = None
        self.idle: float | None = None

    def read(self, now: float) -> float | None:
        """Idle cores over the latest interval, read at ``now`` (a clock's seconds) if one has passed."""
        if self._last is not None and now - self._last[0] < self.interval:
            return self.idle
        times = psutil.cpu_times()
        idle = times.idle + getattr(times, "iowait", 0.0)
        total = sum(times)
        if self._last is not None and total > self._last[2]:
            share = (idle - self._last[1]) / (total - self._last[2])
            # Cores outside this process's affinity count as busy: it cannot use them.
            self.idle = max(0.0, min(self.cores, share * self._all - (self._all - self.cores)))
        self._last = (now, idle, total)
        return self.idle
