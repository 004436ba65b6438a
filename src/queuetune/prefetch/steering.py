"""The decisions one epoch makes on each of the consumer's requests
(:class:`Steering`): the depth, from what the request saw, and with
``workers="auto"`` how many workers build; then what the depth allows is started."""

from __future__ import annotations

import statistics
from collections import deque

from ..common.cores import IdleCores
from ..record.recorder import Recorder, clock
from .config import STEP_WINDOW
from .crew import Facts, WorkerController
from .schedule import Schedule
from .task import Seen


class Steering:
    """The depth controller's decisions on the requests of an epoch of
    ``schedule``, and with a ``crew`` (``workers="auto"``) the worker
    controller's, each change marked in ``recorder``. ``steps``: the consumer's
    latest steps (from one batch handed over to its next request).

    >>> from queuetune.prefetch.config import BatchSizes, EpochConfig
    >>> from queuetune.prefetch.task import Seen
    >>> from queuetune.prefetch.workers import ThreadWorkers
    >>> from queuetune.record.trace import TraceMeta
    >>> config = EpochConfig(max_bytes=100, depth=1, max_depth=4, ordered=True, timeout=None)
    >>> schedule = Schedule(config, [0, 1], ThreadWorkers(1, str), BatchSizes())
    >>> recorder = Recorder(TraceMeta(loader="demo"), sample_memory=False)
    >>> steering = Steering(schedule, recorder)
    >>> with schedule.lock:
    ...     steering.decide(Seen(False, False, can_grow=False, limit=None), None, 0.0, 0.1)
    >>> schedule.controller.depth; schedule.workers.shutdown(wait=True, unclaimed=[]); recorder.close()
    1
    """

    def __init__(self, schedule: Schedule, recorder: Recorder, crew: WorkerController | None = None) -> None:
        self.schedule = schedule
        self.recorder = recorder
        self.crew = crew
        self.steps: deque[float] = deque(maxlen=STEP_WINDOW)
        # Whether a worker has been asked to start what the depth allows and has not yet.
        self.deferred = False
        self.idle_cores = IdleCores() if crew is not None else None
        if self.idle_cores is not None:
            self.idle_cores.read(clock())  # the first reading, which the first decision's is measured from

    def decide(self, seen: Seen, step: float | None, asked: float, got: float) -> None:
        """The decisions on a request asked at ``asked`` and answered at ``got``,
        ``step`` after the batch before was (None for the first), with the
        schedule's lock held."""
        schedule, controller = self.schedule, self.schedule.controller
        if step is not None:
            self.steps.append(step)
        if self.crew is not None:
            self._staff(seen, step, asked, got)
        if seen.waited:
            changed = self._deepen(seen, asked, got)
        else:
            changed = controller.observe(False, seen.full, now=got)
        if changed is not None:
            self.recorder.mark("depth", changed)
        if changed is not None or controller.starting:
            schedule.idle.anew()

    def start_more(self) -> None:
        """After a hand-over, with the lock held: start what the depth now allows,
        on a worker where the workers can (see :meth:`_fill`), else here."""
        schedule = self.schedule
        if not schedule.can_start():
            return
        # A batch may start: no worker waits for the depth from now on.
        schedule.end_hold()
        if not self.deferred:
            self.deferred = schedule.workers.defer(self._fill)
            if not self.deferred:
                schedule.fill()

    def _fill(self) -> None:
        """Start what the depth allows, on a thread of the workers' (see
        :meth:`.Workers.defer`): the consumer goes back to its step sooner. On
        the worker thread about to build it, the build begins after that step
        did: begun just before it, a build as long as the step ends its wait as
        the step does, and its work runs on the core where the consumer is
        woken (``benchmarks/jittery_phase.py``)."""
        with self.schedule.lock:
            self.deferred = False
            self.schedule.fill()

    def _staff(self, seen: Seen, step: float | None, asked: float, got: float) -> None:
        """The worker controller's decision on a request."""
        assert self.crew is not None
        workers = self.schedule.workers
        count = self.crew.observe(
            got,
            step=step,
            waited=got - asked if seen.waited else 0.0,
            all_busy=seen.all_busy,
            facts=self._facts,
            can_start=seen.left,
        )
        if count is not None and count != workers.count:
            workers.resize(count)
            self.recorder.mark("workers", count)

    def _facts(self) -> Facts:
        assert self.idle_cores is not None
        build_clock = self.schedule.build_clock
        return Facts(build_clock.mean, build_clock.cpu_share, self.idle_cores.read(clock()))

    def _deepen(self, seen: Seen, asked: float, got: float) -> int | None:
        """The depth controller's decision on a request that waited from ``asked``
        to ``got``; the new depth, or None."""
        schedule = self.schedule
        step = statistics.median(self.steps) if self.steps else None
        # A stall leaves the workers idle while it lasts, even when
        # they were all busy when it was asked for.
        stalled = schedule.stalls.stalled(step, schedule.building, schedule.tasks.values())
        held_back = schedule.stalls.held_back(True)
        idle = schedule.stalls.idle_workers()
        return schedule.controller.observe(
            True,
            seen.full,
            # A worker idle for the depth alone while the consumer waited: more depth helps.
            can_grow=seen.can_grow or stalled or held_back,
            limit=seen.limit,
            wait=got - asked if stalled else None,
            step=step,
            needed=schedule.build_clock.needed(step, schedule.workers.count),
            lost=held_back,
            short=schedule.build_clock.short(got - asked, step, schedule.workers.count) if held_back else None,
            spent=got - asked,
            now=got,
            idle=idle,
        )
