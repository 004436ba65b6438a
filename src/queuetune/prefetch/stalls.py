"""What the consumer's waits tell the depth controller (:class:`Stalls`): whether
the batch it waited for was a stall that more depth can cover, and whether
workers sat idle for the depth alone while it waited."""

from __future__ import annotations

from collections.abc import Iterable

from ..record.clock import clock
from .build_clock import BuildClock
from .idle import IdleAccount
from .task import Task
from .workers import Workers

# Workers idle for the depth alone for more than this share of their time: deeper.
IDLE_SLACK = 0.02
# A batch still building this many typical builds after it was started is a
# stall itself (see :meth:`Stalls.stalled`).
STALL_BUILDS = 4
# Workers whose typical build is under this share of their count of consumer
# steps outpace the consumer enough for a deeper queue to fill between stalls.
OUTPACE = 0.75


class Stalls:
    """The stalls and the holds of one epoch's batches, ``ordered`` or not, built by
    ``workers`` at the pace of ``build_clock``; ``idle`` counts the workers idle
    for the depth alone. ``held_back_since``: since when a worker has sat idle
    for the depth alone (it finished a batch and could start no other), or None;
    the next batch started ends it. Read and changed with the schedule's lock held.

    >>> from queuetune.prefetch.workers import ThreadWorkers
    >>> stalls = Stalls(True, BuildClock(), IdleAccount(), ThreadWorkers(2, str))
    >>> stalls.build_clock.learn(1.0); stalls.held_back_since = clock() - 0.6
    >>> stalls.held_back(waited=False), stalls.held_back(waited=True), stalls.held_back(waited=True)
    (False, True, False)
    >>> stalls.workers.shutdown(wait=True, unclaimed=[])
    """

    def __init__(self, ordered: bool, build_clock: BuildClock, idle: IdleAccount, workers: Workers) -> None:
        self.ordered = ordered
        self.build_clock = build_clock
        self.idle = idle
        self.workers = workers
        self.held_back_since: float | None = None
        # The seconds of such idleness that ended since the consumer last waited.
        self.held_back_seconds = 0.0

    def end_hold(self) -> None:
        """A batch may start now: a worker idle for the depth alone is so no longer."""
        if self.held_back_since is not None:
            self.held_back_seconds += clock() - self.held_back_since
            self.held_back_since = None

    def held_back(self, waited: bool) -> bool:
        """On a request that ``waited``: whether, since the consumer last waited,
        workers sat idle for the depth alone for half a typical build or more in
        all (time the consumer now lacks, not the jitter of builds finishing a
        little out of order); then the count starts again. False on a request
        that did not wait."""
        if not waited:
            return False
        now = clock()
        lost = self.held_back_seconds
        if self.held_back_since is not None:
            lost += now - self.held_back_since
            self.held_back_since = now
        self.held_back_seconds = 0.0
        typical = self.build_clock.typical
        return typical is not None and lost >= typical / 2

    def idle_workers(self) -> int | None:
        """The most workers that sat idle for the depth alone at once while the
        consumer waited, since the depth last changed (or the epoch began: its
        first wait included), where in all they sat so for more than
        ``IDLE_SLACK`` of the workers' time, over a
        typical build or longer, in order; else None. Out of order a batch
        never waits behind another: a worker idle for the depth has nothing
        slow ahead of it to cover."""
        typical = self.build_clock.typical
        idle, seconds = self.idle.worker_seconds()
        if not self.ordered or typical is None or seconds < typical or seconds <= 0:
            return None
        mean = idle / seconds
        return self.idle.most if mean > IDLE_SLACK * self.workers.count else None

    def stalled(self, step: float | None, building: int, tasks: Iterable[Task]) -> bool:
        """Whether the batch just handed over was a stall that more depth can cover,
        with ``building`` batches of ``tasks`` (those not taken) being built.

        It held up the ones behind it: in order, with every batch behind it (if
        any) already built, or still building for more than ``STALL_BUILDS``
        typical builds since it was started: stalls themselves, as two seeded
        close together are (a stall, not a depth too small for the load, where
        the batches behind are building at the workers' pace). And the workers
        outpace the consumer by a third or more (typical build < ``OUTPACE`` x
        workers x ``step``, the consumer's typical step), so the queue fills
        between stalls, and at least one other builds behind a stall while the
        consumer, in order, takes nothing; otherwise more depth is memory the
        workers cannot fill (and a wait of a few steps, a worker's hiccup while
        they barely keep pace, would deepen by as many), and a plain iterable's
        one worker stops at the stall. Out of order, the others are handed over
        meanwhile: a wait says nothing.

        >>> from queuetune.prefetch.workers import ThreadWorkers
        >>> stalls = Stalls(True, BuildClock(), IdleAccount(), ThreadWorkers(8, str))
        >>> stalls.build_clock.learn(1.0)
        >>> behind = [Task(1, None, 0, submitted_at=clock() - 10)]
        >>> stalls.stalled(0.5, 1, behind)  # the one behind has built for 10 typical builds: a stall too
        True
        >>> stalls.stalled(0.5, 2, [*behind, Task(2, None, 0, submitted_at=clock())])  # one just started
        False
        >>> stalls.workers.shutdown(wait=True, unclaimed=[])
        >>> two = Stalls(True, BuildClock(), IdleAccount(), ThreadWorkers(2, str))
        >>> two.build_clock.learn(0.0045)
        >>> two.stalled(0.0025, 0, []), two.stalled(0.0040, 0, [])  # the workers build 1.1 and 1.8 x what it takes
        (False, True)
        >>> two.workers.shutdown(wait=True, unclaimed=[])
        """
        typical = self.build_clock.typical
        if not self.ordered or step is None or typical is None:
            return False
        count = self.workers.count
        if count < 2 or typical >= OUTPACE * count * step:
            return False
        if building == 0:
            return True
        since = clock() - STALL_BUILDS * typical
        return all(task.settled or task.submitted_at < since for task in tasks)
