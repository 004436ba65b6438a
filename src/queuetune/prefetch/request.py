"""What one of the consumer's requests sees of a :class:`.Schedule`: the batches
it may take next (:func:`next_up`), and what it found, for the depth
controller (:func:`seen`). Read with the schedule's lock held."""

from __future__ import annotations

from .schedule import Schedule
from .task import Seen, Task


def next_up(schedule: Schedule) -> list[Task]:
    """The batches one of which the consumer takes next: the next in order, or
    with ``ordered=False`` every one started and not taken.

    >>> from queuetune.prefetch.config import BatchSizes, EpochConfig
    >>> from queuetune.prefetch.workers import ThreadWorkers
    >>> config = EpochConfig(max_bytes=100, depth=1, max_depth=4, ordered=True, timeout=None)
    >>> schedule = Schedule(config, [0, 1], ThreadWorkers(1, str), BatchSizes())
    >>> schedule.tasks[0] = Task(0, 0, 0)
    >>> [task.position for task in next_up(schedule)], seen(schedule, waited=True).limit
    ([0], 1)
    >>> schedule.workers.shutdown(wait=True, unclaimed=[])
    """
    if schedule.config.ordered:
        task = schedule.tasks.get(schedule.delivered)
        return [] if task is None else [task]
    return [t for t in schedule.tasks.values() if not t.taken]


def seen(schedule: Schedule, waited: bool) -> Seen:
    """What a request finds, for the depth controller; ``waited``: the batch it
    takes is not built yet. A request that did not wait cannot deepen: what
    only deepening needs (``can_grow``, ``limit``) is not worked out for it."""
    full = schedule.ledger.ready >= schedule.controller.depth
    # Depth helps only while a worker sits idle for the lack of it, not
    # for the lack of batches left to start (the epoch's end).
    left = not schedule.exhausted and (schedule.total is None or schedule.submitted < schedule.total)
    if not waited:
        return Seen(False, full, can_grow=False, limit=None, left=left)
    busy = schedule.building >= schedule.workers.count
    return Seen(
        waited=waited,
        full=full,
        can_grow=not busy and left,
        # Before the first batch is built its size is unknown: no deeper yet.
        limit=schedule.ledger.limit(),
        all_busy=busy,
        left=left,
    )


def answered_now(schedule: Schedule) -> bool:
    """Whether the consumer's next request would be answered without waiting for
    a build: its batch is built, or the epoch has ended or failed. Takes the
    schedule's lock."""
    with schedule.lock:
        if schedule.stopped or schedule.error is not None:
            return True
        if schedule.total is not None and schedule.delivered >= schedule.total:
            return True
        pending = next_up(schedule)
        return any(task.settled for task in pending) if pending else schedule.exhausted
