"""Workers idle for the depth alone (:class:`IdleAccount`): how many sit so now,
and the worker-seconds they sat so while the consumer waited for its next
batch, which is what more depth would have given it."""

from __future__ import annotations

from ..record.clock import clock


class IdleAccount:
    """The workers idle for the depth alone (they finished a batch and could
    start no other): ``workers`` now, ``most`` at once while the consumer
    waited, and the worker-seconds they sat so while it waited, since
    ``since`` (:meth:`worker_seconds`). Read and changed with the schedule's
    lock held.

    >>> account = IdleAccount()
    >>> account.recount(2); account.worker_seconds()[0]  # the consumer is not waiting: nothing lost
    0.0
    >>> account.consumer_waits(True); account.most
    2
    >>> account.consumer_waits(False); account.anew(); account.worker_seconds()[0], account.most
    (0.0, 0)
    """

    def __init__(self) -> None:
        self.since = clock()
        self.workers = 0
        self.most = 0
        # Whether the consumer is waiting for its next batch (see :meth:`consumer_waits`).
        self.waiting = False
        self._seconds = 0.0
        self._at = self.since

    def recount(self, idle: int) -> None:
        """``idle`` workers sit idle for the depth alone from now; the last
        count's worker-seconds are added to the sum."""
        if idle == self.workers == 0:
            return  # none idle before or now: nothing to add; the clock starts when one is
        self._tick()
        self.workers = idle
        if self.waiting:
            self.most = max(self.most, idle)

    def consumer_waits(self, waiting: bool) -> None:
        """The consumer begins (``waiting``) or ends a wait for its next batch.
        Workers idle for the depth alone count only meanwhile: idle while it
        takes batches already built, they start again one per batch it takes,
        and what they build is ready as its pace asks for it (builds that end
        together, taken a step apart); idle while it waits, they leave it
        waiting for what they could have built."""
        if waiting == self.waiting:
            return  # no change: nothing to count (a hand-over's end of no wait reads no clock)
        self._tick()
        self.waiting = waiting
        if waiting:
            self.most = max(self.most, self.workers)

    def worker_seconds(self) -> tuple[float, float]:
        """The worker-seconds workers sat idle for the depth alone while the
        consumer waited since :attr:`since`, and the seconds since then."""
        now = clock()
        waiting = self.workers * (now - self._at) if self.waiting else 0.0
        return self._seconds + waiting, now - self.since

    def anew(self) -> None:
        """Start the sum again from now: the depth changed, or the first epoch's
        start goes on. A later epoch counts from its beginning: its workers are
        kept, so those idle behind its first batch are throughput lost, as
        behind any other."""
        self._seconds = 0.0
        self.since = self._at = clock()
        self.most = self.workers if self.waiting else 0

    def _tick(self) -> None:
        """Add the worker-seconds idle since the last count, where the consumer waited meanwhile."""
        now = clock()
        if self.waiting:
            self._seconds += self.workers * (now - self._at)
        self._at = now
