"""How many workers build a prefetcher's batches at once, with ``workers="auto"``:
more while the consumer waits for builds and the machine has cores for them,
fewer when they idle, and back to the count before whenever a change did not
pay for itself in throughput."""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from ..common.units import positive_int

# Standard errors of its waits by which a window's rate may be read higher or lower.
ERRORS = 2.0
# A need read from fewer of the consumer's steps than this gets one worker more.
FEW_STEPS = 3


class Facts(NamedTuple):
    """What the builds and the machine show, when a decision asks: the mean
    build's seconds in its worker and a build's CPU seconds a second (None
    until known), the idle cores lately (None until measured).

    >>> Facts(build=0.010, cpu_share=0.05, idle_cores=None).build
    0.01
    """

    build: float | None
    cpu_share: float | None
    idle_cores: float | None


@dataclass
class Window:
    """What the consumer's requests saw since ``start``: how many, the seconds they
    waited, their steps (time from taking a batch to asking for the next), and how
    many waits found every worker building.

    >>> w = Window(0.0)
    >>> w.batches, w.waited, w.rate()
    (0, 0.0, None)
    """

    start: float
    batches: int = 0
    waits: int = 0
    busy_waits: int = 0
    waited: float = 0.0
    waited_squared: float = 0.0
    steps: list[float] = field(default_factory=list)
    # The share of the window's time the consumer waited, once it closed.
    waiting: float = 0.0

    def rate(self, errors: float = 0.0) -> float | None:
        """Batches a second the consumer would take at its median step and its mean
        wait here: a consumer's pause (one long step) does not count against the
        workers, a longer wait does. ``errors``: the mean wait taken that many
        standard errors longer (negative: shorter, down to none), for a reading
        of the rate as low (or high) as the waits' scatter allows."""
        if not self.batches or not self.steps:
            return None
        mean = self.waited / self.batches
        spread = math.sqrt(max(0.0, self.waited_squared / self.batches - mean * mean) / self.batches)
        return 1.0 / max(1e-9, statistics.median(self.steps) + max(0.0, mean + errors * spread))


@dataclass
class Trial:
    """A change of the worker count on probation: the count before, the window
    measured before (None when there was no full window to measure it by)."""

    before: int
    window: Window | None


@dataclass
class WorkerController:
    """Decides how many workers build at once, from what each request of the consumer saw.

    - **More at once**: a request that waited while every worker was building,
      when ``workers`` are fewer than the pace needs with ``headroom``
      (``need``: the mean build, stalls and all, over the consumer's typical
      step), goes at once to ``ceil(need * headroom)`` workers; one more when
      fewer than ``FEW_STEPS`` steps are known (a run's first steps are its
      slowest, so the need read from them is low, and a worker too few costs
      throughput until a window shows it, half a second). **One more**: a
      window in which the consumer waited more than ``slack`` of its time, most
      of its waits with every worker building (a stall, a slow build: more
      workers start the batches behind it sooner).
    - **Cores**: never more workers than the idle cores can run: each one uses
      ``cpu_share`` of a core while it builds (CPU seconds per second of a build:
      about 1 for Python or numpy work, near 0 for a build that waits on I/O or
      sleeps), so an addition of ``k`` needs ``k * cpu_share`` idle cores (half a
      core of leeway).
    - **Fewer**: ``quiet`` windows in a row in which the consumer did not wait,
      when one worker fewer would still be at most ``busy_below`` busy keeping
      its pace: one fewer (never urgent: an idle worker costs a thread, or a
      process that idles anyway; one window without a stall says little).
    - **Probation**: after each change, the next window's rate (the consumer's
      batches a second, :meth:`Window.rate`) is compared with the window's
      before. An addition is undone when it surely did not raise it by
      ``min_gain``: not even at the readings of the two windows most in its
      favour, two standard errors of their waits apart (a worker too many
      costs a thread or an idle process; one too few, throughput); one that
      ends the waiting stays, and so does one made after a window without
      waits (a stall that came after it: no gain could show). A removal is undone when the consumer waits and
      the rate fell by ``min_gain`` or more. A change
      that fails is undone, and the count it tried is out of bounds for
      ``backoff`` seconds (twice as long after each failure, reset by a success):
      so the count stops rising when throughput stops rising.
    - A window lasts at least ``window`` seconds, ``window_batches`` requests and
      four mean builds (the new workers' first builds come in it).

    >>> c = WorkerController(workers=1, max_workers=8, cores=2)
    >>> facts = lambda: Facts(build=0.009, cpu_share=0.05, idle_cores=None)
    >>> c.observe(0.010, step=0.002, waited=0.006, all_busy=True, facts=facts)
    7
    >>> c.observe(0.012, step=0.002, waited=0.001, all_busy=True, facts=facts)
    >>> c.workers
    7
    """

    workers: int = 1
    max_workers: int = 8
    cores: int = 1
    window: float = 0.25
    window_batches: int = 16
    min_gain: float = 0.02
    slack: float = 0.01
    busy_below: float = 0.75
    headroom: float = 1.2
    quiet: int = 4
    backoff: float = 2.0
    _window: Window | None = field(default=None, repr=False)
    _trial: Trial | None = field(default=None, repr=False)
    # The latest full window and the count it was measured at.
    _measured: tuple[int, Window] | None = field(default=None, repr=False)
    # Counts out of bounds after a failed change: above ``_ceiling`` / below ``_floor`` until the time given.
    _ceiling: tuple[int, float] | None = field(default=None, repr=False)
    _floor: tuple[int, float] | None = field(default=None, repr=False)
    _wait: float = field(default=0.0, repr=False)
    _steps: deque[float] = field(default_factory=lambda: deque(maxlen=16), repr=False)
    # How long a window lasts at least: ``window``, or four mean builds once one is known.
    _length: float = field(default=0.0, repr=False)
    # Windows in a row, since the latest change, in which the consumer did not wait.
    _quiet: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        self.max_workers = positive_int(self.max_workers, "max workers")
        self.workers = positive_int(self.workers, "workers")
        self.cores = positive_int(self.cores, "cores")
        if self.workers > self.max_workers:
            raise ValueError(f"workers {self.workers} is above max_workers {self.max_workers}")
        self._wait = self.backoff
        self._length = self.window

    def observe(
        self,
        now: float,
        *,
        step: float | None,
        waited: float,
        all_busy: bool,
        facts: Callable[[], Facts],
        can_start: bool = True,
    ) -> int | None:
        """Note one request; return the new worker count if it changes, else None.

        ``now``: when the request got its batch (a clock's seconds); ``step``: the
        consumer's step before it (None for the first); ``waited``: seconds it
        waited; ``all_busy``: every worker was building when it began to wait;
        ``facts``: what the builds and the machine show now (:class:`Facts`),
        asked only when a decision needs them (it runs at every batch, on the
        consumer's thread); ``can_start``: batches are left to start (at the end
        of an epoch more workers cannot help).
        """
        window = self._window
        if window is None:
            window = self._window = Window(now - waited - (step or 0.0))
        window.batches += 1
        window.waited += waited
        window.waited_squared += waited * waited
        if step is not None:
            window.steps.append(step)
            self._steps.append(step)
        if waited > 0:
            window.waits += 1
            window.busy_waits += all_busy
            # Not while a removal is on probation; during an addition's, a need
            # that grew (a stall raised the mean build) still goes at once.
            adding = self._trial is None or self._trial.before < self.workers
            if all_busy and can_start and adding:
                known = self._learn(facts())
                need = self._need(known.build)
                if need is not None:
                    want = math.ceil(need * self.headroom - 1e-9)
                    if want > self.workers and len(self._steps) < FEW_STEPS:
                        want += 1
                    target = self._addable(want, now, known)
                    if target > self.workers:
                        return self._change(target, now)
        if now - window.start < self._length or window.batches < self.window_batches:
            return None
        known = self._learn(facts())
        return self._close(window, now, self._need(known.build), known, can_start)

    def _learn(self, known: Facts) -> Facts:
        """Take in the facts just asked: the window's length follows the mean build."""
        self._length = max(self.window, 4 * (known.build or 0.0))
        return known

    def _need(self, build: float | None) -> float | None:
        """Workers that keep pace with the consumer: the mean build over the typical step."""
        if build is None or not self._steps:
            return None
        return build / max(1e-6, statistics.median(self._steps))

    def _addable(self, target: int, now: float, known: Facts) -> int:
        """``target``, or fewer: within max_workers, a failed count's ceiling and the idle cores."""
        top = self.max_workers
        if self._ceiling is not None:
            count, until = self._ceiling
            if now < until:
                top = min(top, count)
            else:
                self._ceiling = None
        share = max(0.05, known.cpu_share if known.cpu_share is not None else 1.0)
        idle = known.idle_cores if known.idle_cores is not None else max(0.0, self.cores - self.workers * share)
        room = math.floor((idle + 0.5) / share)
        return max(self.workers, min(target, top, self.workers + room))

    def _close(
        self,
        window: Window,
        now: float,
        need: float | None,
        known: Facts,
        can_start: bool,
    ) -> int | None:
        """Judge the trial, or decide on one more or one fewer, as a window closes."""
        rate = window.rate()
        waiting = window.waiting = window.waited / max(1e-9, now - window.start)
        self._window = Window(now)
        trial, self._trial = self._trial, None
        if trial is not None and trial.window is not None and rate is not None:
            if not self._paid(trial.before, trial.window, window, waiting):
                failed = self.workers
                if failed > trial.before:
                    self._ceiling = (trial.before, now + self._wait)
                else:
                    self._floor = (trial.before, now + self._wait)
                self._wait *= 2
                self._measured = (trial.before, trial.window)
                return self._set(trial.before)
            self._wait = self.backoff
        if rate is not None:
            self._measured = (self.workers, window)
        if trial is not None:
            return None
        if waiting > self.slack and can_start and window.busy_waits * 2 > window.waits:
            target = self._addable(self.workers + 1, now, known)
            if target > self.workers:
                return self._change(target, now)
        self._quiet = self._quiet + 1 if waiting <= self.slack else 0
        if self._quiet >= self.quiet and need is not None and self.workers > self._lowest(now):
            if need <= self.busy_below * (self.workers - 1):
                return self._change(self.workers - 1, now)
        return None

    def _paid(self, before: int, earlier: Window, later: Window, waiting: float) -> bool:
        """Whether the change from ``before`` workers kept its promise (see the
        class), from the windows ``earlier`` and ``later`` than it."""
        if waiting <= self.slack:
            return True
        if self.workers > before:
            if earlier.waiting <= self.slack:  # nothing to gain could show against a window that did not wait
                return True
            high, low = later.rate(-ERRORS), earlier.rate(ERRORS)
            return high is not None and low is not None and high / low - 1 >= self.min_gain
        after, then = later.rate(), earlier.rate()
        return after is not None and then is not None and after / then - 1 >= -self.min_gain

    def _lowest(self, now: float) -> int:
        if self._floor is not None:
            count, until = self._floor
            if now < until:
                return count
            self._floor = None
        return 1

    def _change(self, workers: int, now: float) -> int:
        measured = self._measured
        before = measured[1] if measured is not None and measured[0] == self.workers else None
        self._trial = Trial(self.workers, before)
        self._window = Window(now)
        self._quiet = 0
        return self._set(workers)

    def _set(self, workers: int) -> int:
        self.workers = workers
        return workers
