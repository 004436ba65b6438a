"""The byte account of one epoch's batches (:class:`ByteLedger`): what is
reserved for batches being built, what batches built and not taken hold, and
whether one more fits the budget."""

from __future__ import annotations

import concurrent.futures as cf
import math

from ..common.units import format_bytes
from .config import BatchSizes
from .errors import BudgetExceeded
from .task import Task
from .workers import Workers

# A batch's size guessed from one sample is reserved this much larger, and this
# many bytes more: room for what joining the samples adds.
GUESS_MARGIN = 1.25
GUESS_SLACK = 4096


class ByteLedger:
    """The bytes of one epoch's batches within ``max_bytes``: ``reserved`` for
    batches being built, ``held`` by the ``ready`` batches built and not taken.

    Before a batch is started, room for it is reserved: the largest of the
    latest batches (``sizes``, kept across epochs; more while they grow). When
    a batch is built, its reservation becomes its real size; when the consumer
    takes it, its bytes leave the account. So the bytes of batches built or
    being built and not yet taken stay within ``max_bytes``, but for the growth
    of those under way when the batches grew: such a batch is held, and none
    starts until the bytes fit again. A batch larger than ``max_bytes`` by
    itself is a :class:`.BudgetExceeded` (:meth:`fault`).

    >>> ledger = ByteLedger(1000, BatchSizes())
    >>> ledger.sizes.learn(300)
    >>> task = Task(0, [0], ledger.sizes.reserve); ledger.reserve(task)
    >>> ledger.reserved
    300
    >>> ledger.settle(task); ledger.built(task, 400); ledger.held, ledger.reserved, ledger.ready
    (400, 0, 1)
    >>> ledger.taken(task); ledger.held, ledger.ready
    (0, 0)
    """

    def __init__(self, max_bytes: int, sizes: BatchSizes) -> None:
        self.max_bytes = max_bytes
        self.sizes = sizes
        self.ready = 0
        self.held = 0
        self.reserved = 0

    def reserve(self, task: Task) -> None:
        """``task`` starts: its reservation enters the account."""
        self.reserved += task.reserved

    def reserve_as(self, task: Task, reserved: int) -> None:
        """``task``, started, is reserved ``reserved`` bytes from now (a guess of its size)."""
        self.reserved += reserved - task.reserved
        task.reserved = reserved

    def guessed(self, first: Task, future: cf.Future[int]) -> None:
        """The bytes of a sample of ``first`` (the first batch) a worker measured:
        the batches' size guessed from it, to which ``first`` is held too where it
        is still building. Failed or cancelled, or with a size known meanwhile,
        nothing: the first batch's own build says what went wrong, if anything."""
        if future.cancelled() or future.exception() is not None or self.sizes.known:
            return
        guess = math.ceil(future.result() * GUESS_MARGIN) + GUESS_SLACK
        self.sizes.guess = guess
        if not first.settled:
            self.reserve_as(first, guess)

    def settle(self, task: Task) -> None:
        """``task``'s build is over (or never began): its reservation leaves the account."""
        self.reserved -= task.reserved

    def built(self, task: Task, size: int) -> None:
        """``task``'s batch is built, ``size`` bytes, ready to be taken."""
        task.size = size
        self.held += size
        self.ready += 1

    def taken(self, task: Task) -> None:
        """The consumer took ``task``'s batch: its bytes leave the account."""
        self.ready -= 1
        self.held -= task.size or 0

    def room(self, workers: Workers) -> bool:
        """Whether the budget has room for one more batch as large as the largest
        lately: in the batches' bytes, and in the workers' memory where they keep
        some (process workers' shared memory)."""
        reserve = self.sizes.reserve
        return self.held + self.reserved + reserve <= self.max_bytes and workers.room(reserve)

    def limit(self) -> int | None:
        """The most batches as large as the largest lately that the budget holds;
        before the first batch is built its size is unknown (no guess): 1."""
        largest = self.sizes.reserve
        return self.max_bytes // largest if largest else (None if self.sizes.known else 1)

    def fault(self, task: Task, size: int) -> BudgetExceeded | None:
        """The error if the batch just built is larger than the whole budget by itself.
        A batch larger than those before that fits is held: no batch starts until
        the bytes in flight leave room again."""
        max_bytes = self.max_bytes
        if size <= max_bytes:
            return None
        return BudgetExceeded(
            f"batch {task.position} of the epoch: {format_bytes(size)} ({size} bytes) does not fit in "
            f"max_bytes={format_bytes(max_bytes)} ({max_bytes} bytes) by itself: give a larger max_bytes "
            "or make the batches smaller"
        )

    def clear(self) -> None:
        """Forget every batch (the epoch is stopped and its workers are gone)."""
        self.held = self.reserved = self.ready = 0
