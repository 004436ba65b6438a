"""How long an epoch's latest builds took and how busy they kept a CPU
(:class:`BuildClock`), and what that says of the depth a consumer needs."""

from __future__ import annotations

import math
import statistics
from collections import deque

from .config import STEP_WINDOW

# Builds the mean build time is taken over: enough that a stall of one build in
# twenty-five counts as often as it comes.
BUILD_MEMORY = 128


class BuildClock:
    """The latest builds of an epoch: the seconds from submitting each to its
    being built (:meth:`learn`), and, where the workers tell them, the seconds
    each took in its worker and the CPU seconds it used (:meth:`learn_spent`).
    Medians are worked out when asked after something new is learnt, not at
    every build.

    >>> clock = BuildClock()
    >>> for seconds in (0.300, 0.400, 0.500):
    ...     clock.learn(seconds)
    >>> clock.typical, clock.needed(0.014, workers=12), clock.needed(0.200, workers=12), clock.needed(None, workers=12)
    (0.4, 13, 3, None)
    >>> clock.learn_spent(cpu=0.1, wall=0.2); clock.learn_spent(cpu=0.3, wall=0.4)
    >>> clock.cpu_share, round(clock.mean or 0, 3)
    (0.625, 0.3)
    """

    def __init__(self) -> None:
        # Seconds from submitting a batch to its being built, of the latest batches.
        self.builds: deque[float] = deque(maxlen=STEP_WINDOW)
        self._typical: float | None = None
        # CPU seconds a second of the latest builds, where the workers tell them.
        self.shares: deque[float] = deque(maxlen=STEP_WINDOW)
        self._share: float | None = None
        # The seconds of the latest builds in their workers (no queue, no trip back), and their sum.
        self.walls: deque[float] = deque(maxlen=BUILD_MEMORY)
        self._walls_sum = 0.0

    def learn(self, seconds: float) -> None:
        """Take in the seconds from submitting a batch to its being built."""
        self.builds.append(seconds)
        self._typical = None

    def learn_spent(self, cpu: float, wall: float) -> None:
        """Take in what a worker told of a build: its CPU seconds and its seconds (more than 0)."""
        self.shares.append(cpu / wall)
        self._share = None
        if len(self.walls) == self.walls.maxlen:
            self._walls_sum -= self.walls[0]
        self.walls.append(wall)
        self._walls_sum += wall

    @property
    def typical(self) -> float | None:
        """The median of the latest builds' seconds, None before the first."""
        if self._typical is None and self.builds:
            self._typical = statistics.median(self.builds)
        return self._typical

    @property
    def cpu_share(self) -> float | None:
        """The median CPU seconds a second of the latest builds (None until one is told)."""
        if self._share is None and self.shares:
            self._share = statistics.median(self.shares)
        return self._share

    @property
    def mean(self) -> float | None:
        """The mean seconds of the latest builds in their workers (stalls and all:
        what the workers' throughput depends on); None where the workers do not tell."""
        return self._walls_sum / len(self.walls) if self.walls else None

    def needed(self, step: float | None, workers: int) -> int | None:
        """The depth that keeps pace with a consumer taking a batch every ``step``
        seconds: the batches ``workers`` build meanwhile (the typical build time
        over the step, at most the workers) and the one it takes next; None
        until both are known."""
        typical = self.typical
        if step is None or step <= 0 or typical is None:
            return None
        return min(workers, math.ceil(typical / step)) + 1

    def short(self, spent: float, step: float | None, workers: int) -> float | None:
        """The batches a consumer taking one every ``step`` seconds went short of
        while it waited ``spent`` seconds: what it would have taken meanwhile,
        less what ``workers`` built (each one per typical build); None until
        both are known.

        >>> clock = BuildClock()
        >>> clock.learn(0.008)
        >>> clock.short(0.004, step=0.001, workers=4), clock.short(0.004, step=None, workers=4)
        (2.0, None)
        """
        typical = self.typical
        if step is None or step <= 0 or not typical:
            return None
        return spent * (1 / step - workers / typical)
