"""The prefetcher's depth controller: deepen while the consumer waits, shallow
again when the queue stays full and the consumer never waits, with hysteresis."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from ..common.units import nonnegative_int, positive_int


@dataclass
class DepthController:
    """Decides the depth (batches being built or ready) from what each request saw.

    - ``grow_after`` requests among the last ``window`` that found the next batch
      not ready: one deeper.
    - A wait while fewer batches are under way than the workers need (``needed``:
      the batches being built to keep pace with the consumer, plus the one it
      takes next; see :meth:`.BuildClock.needed`): at once to that depth. So a batch
      that takes hundreds of milliseconds to build against steps of a few does
      not take a dozen waits per worker to reach.
    - A wait after workers sat idle for the depth alone for half a build or more
      since the last wait (``lost``; see :meth:`.Stalls.held_back`): deeper by
      the batches the wait left the consumer short of (``short``, at least one;
      see :meth:`.BuildClock.short`). A consumer whose steps come in bursts drains
      what a deeper queue would have built meanwhile. Not in the first ``start``
      requests: the workers' first builds end unevenly (threads starting, pages
      touched for the first time), so a worker idle then is the start's, not a
      depth too small.
    - One wait of at least ``long_wait`` typical consumer steps (a stall: one long
      wait, then ready batches): deeper at once by about the steps the wait cost
      (``ceil(wait / step)``), so that as many more batches are under way when the
      next stall comes.
    - A wait while workers sat idle for the depth alone, as the consumer
      waited, for more than a share of their time (``idle``: how many sat so
      at once, given where that share is over 2 %; see
      :meth:`.Stalls.idle_workers`), where the consumer's waits take more
      than ``bound`` of its time (over about the last ``memory`` requests,
      each weighed by its seconds, an epoch's first wait left out: it waits
      for the workers, so their idle time is throughput lost): deeper by that
      many. Builds as long as hundreds of steps finish out of turn, and those
      behind a slow one wait for the depth however short the lull between
      two waits. Not in the first
      ``start`` requests of the controller's life (the first epoch's start,
      where the workers begin; later epochs keep them).
    - The last three rules (one wait at a time) deepen only while the waits cost
      the consumer more than ``slack`` of its time since the depth last changed
      (given ``spent`` and ``now`` with each wait): a queue that misses a batch now
      and then, for a few hundred microseconds in a second, is deep enough.
    - ``shrink_after`` requests in a row that found it ready with the queue full:
      one shallower. A wait soon after shrinking makes the depth it left a floor,
      and so does deepening, however late, from a depth shrinking reached: the
      controller does not swing between two depths (a consumer that waits now
      and then at the shallower one loses more than the slack, in waits spread
      over hundreds of requests).
    - Never deeper than ``max_depth``, nor than the ``limit`` (the depth the byte
      budget allows) passed with an observation.

    >>> c = DepthController()
    >>> [c.observe(waited=True, full=False) for _ in range(4)]
    [None, 2, None, 3]
    >>> c.observe(waited=True, full=False, needed=9)
    9
    >>> c.observe(waited=True, full=False, wait=0.100, step=0.003, limit=16)
    16
    >>> c.depth
    16
    """

    depth: int = 1
    max_depth: int = 64
    grow_after: int = 2
    window: int = 4
    shrink_after: int = 32
    long_wait: float = 4.0
    floor: int = 1
    slack: float = 0.005
    bound: float = 0.1
    memory: int = 16
    start: int = 0
    _recent: deque[bool] = field(default_factory=deque, repr=False)
    # When the depth last changed (or the first request asked), the seconds waited
    # since, and the time of the latest request.
    _since: float | None = field(default=None, repr=False)
    _spent: float = field(default=0.0, repr=False)
    _now: float | None = field(default=None, repr=False)
    _calm: int = field(default=0, repr=False)
    _since_shrink: int | None = field(default=None, repr=False)
    # The depths shrinking reached: deepened from one of them, the depth it left is a floor.
    _shrunk: set[int] = field(default_factory=set, repr=False)
    _requests: int = field(default=0, repr=False)
    # Requests over every epoch: the workers' first builds are the first epoch's.
    _seen: int = field(default=0, repr=False)
    # The seconds the consumer waited, and all its seconds, over about the last ``memory`` requests.
    _waited: float = field(default=0.0, repr=False)
    _lasted: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self.depth = positive_int(self.depth, "depth")
        self.max_depth = positive_int(self.max_depth, "max depth")
        self.grow_after = positive_int(self.grow_after, "grow_after")
        self.shrink_after = positive_int(self.shrink_after, "shrink_after")
        self.window = positive_int(self.window, "window")
        self.memory = positive_int(self.memory, "memory")
        self.start = nonnegative_int(self.start, "start")
        if self.grow_after > self.window:
            raise ValueError(f"grow_after {self.grow_after} is above window {self.window}")
        self._recent = deque(maxlen=self.window)
        if not self.long_wait > 1:
            raise ValueError(f"long_wait must be more than 1 step, got {self.long_wait}")
        if self.depth > self.max_depth:
            raise ValueError(f"depth {self.depth} is above max depth {self.max_depth}")

    def observe(
        self,
        waited: bool,
        full: bool,
        can_grow: bool = True,
        wait: float | None = None,
        step: float | None = None,
        limit: int | None = None,
        needed: int | None = None,
        lost: bool = False,
        short: float | None = None,
        spent: float | None = None,
        now: float | None = None,
        idle: int | None = None,
    ) -> int | None:
        """Note one request; return the new depth if it changes, else None.

        ``waited``: the next batch was not ready; ``full``: as many batches as the
        depth allows were built and waiting; ``can_grow``: deepening can help (a
        worker sits idle for the lack of depth) and the byte budget has room for
        one more batch. ``wait``: seconds the request waited; ``step``: the
        consumer's typical step in seconds (time from taking a batch to asking for
        the next); both needed for the long-wait rule. ``limit``: the deepest
        depth the byte budget allows. ``needed``: the depth that keeps as many
        workers building as the consumer's pace needs, once known. ``lost``:
        workers sat idle for the depth alone since the last wait; ``short``: the
        batches this wait left the consumer short of. ``spent``: the
        seconds this request waited, and ``now`` the time it got its batch (a
        clock's seconds, given with every request), for the slack rule; without
        them, that rule is off. ``idle``: workers idle for the depth alone at
        once, given where they sat so for a share of their time that matters.
        """
        self._requests += 1
        self._seen += 1
        lost = lost and self._requests > self.start
        if now is not None:
            self._clock(waited, spent, now)
        # Workers idle for the depth alone cost throughput where the consumer waits for them.
        if self._seen <= self.start or (now is not None and self._waited <= self.bound * self._lasted):
            idle = None
        if self._since_shrink is not None:
            self._since_shrink += 1
            if waited and self._since_shrink <= self.shrink_after:
                self.floor = max(self.floor, self.depth + 1)
                self._since_shrink = None
        self._recent.append(waited)
        if waited:
            self._calm = 0
            top = self.max_depth if limit is None else min(self.max_depth, limit)
            if not (can_grow or idle) or self.depth >= top:
                return None
            return self._deeper(top, wait, step, needed, lost, short, idle, spent, now)
        self._calm = self._calm + 1 if full else 0
        if self._calm >= self.shrink_after and self.depth > self.floor:
            self._since_shrink = 0
            self._shrunk.add(self.depth - 1)
            return self._set(self.depth - 1)
        return None

    @property
    def starting(self) -> bool:
        """Whether the requests so far are the first epoch's start, whose idle
        workers are the start's (see the rule for idle workers).

        >>> c = DepthController(start=1); c.starting, c.observe(waited=False, full=False), c.starting
        (True, None, False)
        """
        return self._seen < self.start

    def new_epoch(self) -> None:
        """Begin another epoch at the depth the last ended with: what the
        requests of the last taught stays (the depth, its floor), what they were
        counting towards is dropped.

        >>> c = DepthController(depth=5)
        >>> c.observe(waited=True, full=False); c.new_epoch(); c.depth
        5
        """
        self._recent.clear()
        self._calm = 0
        self._since = self._now = None
        self._spent = 0.0
        self._since_shrink = None
        self._requests = 0

    def _clock(self, waited: bool, spent: float | None, now: float) -> None:
        """Note the time of a request, ``now``, which waited ``spent`` seconds if it ``waited``."""
        if self._now is not None and now > self._now:
            keep = 1 - 1 / self.memory
            self._waited = self._waited * keep + (min(spent or 0.0, now - self._now) if waited else 0.0)
            self._lasted = self._lasted * keep + (now - self._now)
        self._now = now
        if self._since is None:
            self._since = now - (spent or 0.0)
        if waited and spent is not None:
            self._spent += spent

    def _deeper(
        self,
        top: int,
        wait: float | None,
        step: float | None,
        needed: int | None,
        lost: bool,
        short: float | None,
        idle: int | None,
        spent: float | None,
        now: float | None,
    ) -> int | None:
        """The depth after a wait that deepening can help, up to ``top``, by the
        rules for waits (see the class's text and :meth:`observe`), or None."""
        if wait is not None and step is not None and step > 0 and wait >= self.long_wait * step:
            return self._set(min(top, self.depth + math.ceil(wait / step)))
        if needed is not None and needed > self.depth:
            return self._set(min(top, needed))
        if (lost or idle or sum(self._recent) >= self.grow_after) and self._costly(spent, now):
            more = max(1, math.ceil(short)) if lost and short is not None else 1
            return self._set(min(top, self.depth + max(more, idle or 0)))
        return None

    def _costly(self, spent: float | None, now: float | None) -> bool:
        """Whether the waits since the depth last changed, this one included, cost
        more than ``slack`` of the time since (True when not told)."""
        if spent is None or now is None or self._since is None:
            return True
        return self._spent > self.slack * (now - self._since)

    def _set(self, depth: int) -> int:
        if depth > self.depth and self.depth in self._shrunk:
            self.floor = max(self.floor, self.depth + 1)
        self.depth = depth
        self._recent.clear()
        self._calm = 0
        self._since = self._now
        self._spent = 0.0
        return depth
