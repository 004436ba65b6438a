"""What each epoch of a prefetcher is given: its settings (:class:`EpochConfig`) and
the record of batch sizes that outlives it (:class:`BatchSizes`)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# Steps of the consumer the typical step (their median) is taken over, and builds
# the typical build time is taken over.
STEP_WINDOW = 16


@dataclass(frozen=True)
class EpochConfig:
    """The settings of one epoch, as the prefetcher's handle resolved them.

    ``max_bytes``: the byte budget; ``depth``: the depth it starts at;
    ``max_depth``: the deepest the controller may go, unless ``fixed``: then
    the depth stays at ``depth`` (``adaptive=False``), neither deeper nor
    shallower; ``ordered``: hand batches over in order (a plain iterable's
    always are); ``timeout``: seconds the consumer waits for one batch, or None;
    ``guess``: before any batch's size is known, the workers may guess it from
    one sample (see :meth:`.Workers.guess`), so that more than one batch is
    built from the first request.

    >>> EpochConfig(max_bytes=1 << 20, depth=1, max_depth=64, ordered=True, timeout=None)
    EpochConfig(max_bytes=1048576, depth=1, max_depth=64, ordered=True, timeout=None, fixed=False, guess=False)
    """

    max_bytes: int
    depth: int
    max_depth: int
    ordered: bool
    timeout: float | None
    fixed: bool = False
    guess: bool = False


#: The latest batches whose largest is what a batch not yet built is reserved:
#: one large batch long ago does not hold the depth down for good.
SIZE_WINDOW = 64
#: While the largest batch grows, a batch not yet built is reserved as large as
#: it would have grown this many batches on at the rate it grew over the latest
#: ``RISE_WINDOW``: the batches built ahead are that far on.
AHEAD, RISE_WINDOW = 8, 16


@dataclass
class BatchSizes:
    """What the epochs learn of the batches' sizes, kept by the handle from one epoch
    to the next: the largest of the latest :data:`SIZE_WINDOW` batches built (what
    a batch not yet built is reserved in the budget), the last batch's size, and
    whether any was measured (the largest may be 0: batches with no arrays in
    them); before that, a ``guess`` (0: none).

    >>> sizes = BatchSizes(guess=400)
    >>> sizes.reserve
    400
    >>> sizes.learn(300); sizes.learn(200)
    >>> sizes.largest, sizes.last, sizes.reserve
    (300, 200, 300)
    >>> for _ in range(SIZE_WINDOW): sizes.learn(100)
    >>> sizes.reserve  # the 300-byte batch is out of the window
    100
    >>> growing = BatchSizes()
    >>> for size in (100, 200, 300): growing.learn(size)
    >>> growing.reserve  # 100 more a batch: room for 8 batches more of growth
    1100
    """

    known: bool = False
    guess: int = 0
    last: int = 0
    # The largest after each of the latest batches, oldest first.
    _largest: deque[int] = field(default_factory=lambda: deque(maxlen=RISE_WINDOW + 1), repr=False)
    # (number, size) of the latest batches, each larger than every one after it: the first is the largest.
    _peaks: deque[tuple[int, int]] = field(default_factory=deque, repr=False)
    _count: int = 0

    @property
    def largest(self) -> int:
        """The largest of the latest :data:`SIZE_WINDOW` batches (0 before the first)."""
        return self._peaks[0][1] if self._peaks else 0

    @property
    def reserve(self) -> int:
        """What a batch not yet built is reserved in the budget: the largest of the
        latest, and as much more as it grows over :data:`AHEAD` batches while it
        grows; or the guess."""
        if not self.known:
            return self.guess
        seen = self._largest
        rise = max(0, seen[-1] - seen[0]) * AHEAD // max(1, len(seen) - 1)
        return self.largest + rise

    def learn(self, size: int) -> None:
        """Take in the size of a batch just built."""
        peaks = self._peaks
        while peaks and peaks[-1][1] <= size:
            peaks.pop()
        peaks.append((self._count, size))
        self._count += 1
        while peaks[0][0] <= self._count - 1 - SIZE_WINDOW:
            peaks.popleft()
        self._largest.append(self.largest)
        self.last = size
        self.known = True
