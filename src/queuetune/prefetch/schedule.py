"""One epoch's batches under way: which to start next within the depth and the
byte budget, and what becomes of each as its build settles and it is handed over."""

from __future__ import annotations

import concurrent.futures as cf
import functools
import threading
from typing import Any

from ..record.recorder import clock
from .adaptive import DepthController
from .build_clock import BuildClock
from .config import STEP_WINDOW, BatchSizes, EpochConfig
from .idle import IdleAccount
from .ledger import ByteLedger
from .stalls import Stalls
from .task import Task
from .workers import END, Workers


def depth_controller(config: EpochConfig) -> DepthController:
    """The depth controller for epochs of ``config``: from its depth up to its
    ``max_depth``, or held at its depth where it is ``fixed``.

    >>> depth_controller(EpochConfig(1000, 4, 64, True, None, fixed=True)).max_depth
    4
    """
    return DepthController(
        depth=config.depth,
        max_depth=config.depth if config.fixed else config.max_depth,
        floor=config.depth if config.fixed else 1,
        start=STEP_WINDOW,
    )


class Schedule:
    """The batches of one epoch under way, within the depth and a budget in bytes.

    Before a batch is started, room for it is reserved in the byte budget's
    account (``ledger``, a :class:`.ByteLedger`); until a size is known the
    first batch is built alone to learn it. A batch starts only where a worker
    is free for it (``workers.gate``), so that it is reserved as the batches are
    as it starts, and only where the workers' own memory has room for it too
    (:meth:`.Workers.make_room`); one with none under way always starts, so that
    the consumer gets its next batch whatever it holds. A batch too large for
    the budget by itself is an ``error`` kept for the consumer. ``build_clock``
    times the builds, ``idle`` counts the workers idle for the depth alone, and
    ``stalls`` says what the consumer's waits tell the depth controller.

    ``plan``: what each batch is made of, or None for a plain iterable (read
    until its workers return :data:`.END`). The state is read and changed with
    ``lock`` held, by the consumer and by the callbacks of finished builds;
    ``changed`` (on that lock) is notified when a build is settled or the
    schedule stopped.

    >>> from queuetune.prefetch.workers import ThreadWorkers
    >>> release = threading.Event()
    >>> def make(i):
    ...     return bytes(300) if i == 0 or release.wait(5) else None
    >>> config = EpochConfig(max_bytes=1000, depth=4, max_depth=4, ordered=True, timeout=None)
    >>> schedule = Schedule(config, [0, 1, 2, 3], ThreadWorkers(2, make), BatchSizes())
    >>> with schedule.lock:
    ...     schedule.fill()
    >>> schedule.wait_for([schedule.tasks[0]], 5).position
    0
    >>> sorted(schedule.tasks), schedule.ledger.held, schedule.ledger.reserved  # 300 built, 2 x 300 reserved
    ([0, 1, 2], 300, 600)
    >>> schedule.stopped = True; release.set(); schedule.workers.shutdown(wait=True, unclaimed=[])
    """

    def __init__(
        self,
        config: EpochConfig,
        plan: list[Any] | None,
        workers: Workers,
        sizes: BatchSizes,
        controller: DepthController | None = None,
    ) -> None:
        self.config = config
        self.workers = workers
        self.sizes = sizes
        # Re-entrant: a future already done runs its callback at once, in the thread adding it, which holds it.
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.controller = controller or depth_controller(config)
        self.plan = plan
        self.total: int | None = None if plan is None else len(plan)
        self.tasks: dict[int, Task] = {}
        self.submitted = 0
        self.delivered = 0
        # Batches started whose build is not settled yet.
        self.building = 0
        self.ledger = ByteLedger(config.max_bytes, sizes)
        # How long the latest builds took, and how busy they kept a CPU.
        self.build_clock = BuildClock()
        # Workers idle for the depth alone, and what they cost the consumer.
        self.idle = IdleAccount()
        self.stalls = Stalls(config.ordered, self.build_clock, self.idle, workers)
        self.error: BaseException | None = None
        self.stopped = False
        self.exhausted = False

    def fill(self) -> None:
        """Start batches while the depth and the byte budget allow."""
        while self.can_start():
            if self.submitted > self.delivered and not self.workers.make_room(self.sizes.reserve):
                break
            position = self.submitted
            indices = self.plan[position] if self.plan is not None else None
            task = Task(position, indices, self.sizes.reserve, submitted_at=clock())
            self.tasks[position] = task
            self.ledger.reserve(task)
            self.submitted += 1
            self.building += 1
            self.end_hold()
            first = position == 0 and not self.sizes.known and not self.sizes.guess
            if first and self.workers.sized_first and self._ask_guess(task, start=True):
                return  # started once guessed (see _guessed)
            if not self._start(task):
                return
            if first:
                self._ask_guess(task, start=False)
        self._recount_idle()

    def _start(self, task: Task) -> bool:
        """Submit ``task`` to the workers; False where it could not be (it fails as its build would have)."""
        try:
            task.future = self.workers.submit(task.indices, task.reserved)
            task.future.add_done_callback(functools.partial(self._built, task))
        except Exception as exc:  # such as no room left in /dev/shm for its segment
            self._unstarted(task, exc)
            return False
        return True

    def _ask_guess(self, first: Task, start: bool) -> bool:
        """Have a worker guess the batches' size from the first batch's first
        sample: once guessed, the other workers start; with ``start``, the first
        batch too (else it is built alone meanwhile, to learn its size). False
        where no guess can be made."""
        if not self.config.guess or not isinstance(first.indices, list) or not first.indices:
            return False
        future = self.workers.guess(first.indices[0])
        if future is not None:
            future.add_done_callback(functools.partial(self._guessed, first, start))
        return future is not None

    def _guessed(self, first: Task, start: bool, future: cf.Future[int]) -> None:
        with self.lock:
            if self.stopped:
                return
            self.ledger.guessed(first, future)
            if start:
                first.submitted_at = clock()
                if not self._start(first):
                    return
            if self.sizes.guess or self.sizes.known:
                self.fill()

    def _unstarted(self, task: Task, exc: Exception) -> None:
        """A batch not started fails as its build would have: the consumer gets ``exc`` when it comes to it."""
        task.future = None
        task.failure = exc
        task.settled = True
        self.ledger.settle(task)
        self.building -= 1
        self.changed.notify_all()

    def can_start(self) -> bool:
        """Whether :meth:`fill` would start a batch now."""
        if not self._left_to_start():
            return False
        outstanding = self.submitted - self.delivered
        if outstanding >= self.controller.depth:
            return False
        gate = self.workers.gate
        if gate is not None and self.building >= gate:
            return False
        if not self.sizes.known and not self.sizes.guess:  # nothing built yet: learn the size from one batch
            return outstanding == 0
        return self._budget_has_room()

    def _left_to_start(self) -> bool:
        if self.stopped or self.error is not None or self.exhausted:
            return False
        return self.total is None or self.submitted < self.total

    def _budget_has_room(self) -> bool:
        """Whether the budget has room for one more batch (see :meth:`.ByteLedger.room`);
        with none under way there always is (see the class's text)."""
        return self.submitted == self.delivered or self.ledger.room(self.workers)

    def _can_start_but_for_depth(self) -> bool:
        gate = self.workers.gate
        if gate is not None and self.building >= gate:  # no worker free for it
            return False
        return self._left_to_start() and (self.sizes.known or self.sizes.guess > 0) and self._budget_has_room()

    def end_hold(self) -> None:
        """A batch may start now: a worker idle for the depth alone is so no longer
        (even if the batch is started a little later, on a worker)."""
        self.stalls.end_hold()
        self._recount_idle(0)

    def _recount_idle(self, idle: int | None = None) -> None:
        """Count again the workers idle for the depth alone (``idle``, else worked out)."""
        if idle is None:
            idle = 0
            if self.submitted - self.delivered >= self.controller.depth and self._can_start_but_for_depth():
                left = self.workers.count if self.total is None else self.total - self.submitted
                idle = max(0, min(self.workers.count - self.building, left))
        self.idle.recount(idle)

    def _built(self, task: Task, future: cf.Future[Any]) -> None:
        with self.lock:
            self.building -= 1  # first: the batches its account starts see its worker free
            try:
                self._account(task, future)
            finally:
                task.settled = True
                self._recount_idle()
                self.changed.notify_all()

    def _account(self, task: Task, future: cf.Future[Any]) -> None:
        self.ledger.settle(task)
        if future.cancelled():
            task.cancelled = True
            return
        task.failure = future.exception()
        if task.failure is not None:
            return
        batch = future.result()
        if batch is END:
            self.exhausted = True
            task.size = 0
            task.batch = END
            return
        self.build_clock.learn(clock() - task.submitted_at)
        spent = self.workers.spent(future)
        if spent is not None and spent[1] > 0:
            self.build_clock.learn_spent(*spent)
        if self.stopped:
            self.workers.discard(batch)
            return
        size = self.workers.size(batch)
        task.batch = batch
        self.ledger.built(task, size)
        if self.error is None:  # the first fault is the one to report
            self.error = self.ledger.fault(task, size)
        self.sizes.learn(size)
        self.fill()
        if self.stalls.held_back_since is None and self._can_start_but_for_depth():
            self.stalls.held_back_since = clock()

    def wait_for(self, tasks: list[Task], timeout: float | None) -> Task | None:
        """The first of ``tasks`` whose build is settled, waiting up to ``timeout``
        seconds for one (None: no limit); None if none is by then or the schedule
        is stopped meanwhile."""
        with self.lock:
            found = self.changed.wait_for(lambda: self.stopped or any(t.settled for t in tasks), timeout)
            if not found or self.stopped:
                return None
            return next(t for t in tasks if t.settled)

    def hand_over(self, task: Task) -> Any:
        """Take ``task``'s built batch out of the account as the consumer gets it;
        return the batch as the consumer gets it."""
        batch = task.batch
        task.batch = None
        # The future's callback holds the task: let go of the future, or the
        # batch lives on in that cycle until the garbage collector runs.
        task.future = None
        task.taken = True
        del self.tasks[task.position]
        if batch is END:
            return END
        self.idle.consumer_waits(False)
        self.delivered += 1
        self.ledger.taken(task)
        # Under the lock: a stop() from another thread sweeps the files.
        return self.workers.adopt(batch)

    def clear(self) -> None:
        """Forget every batch (the epoch is stopped and its workers are gone)."""
        self.tasks.clear()
        self.ledger.clear()
