"""What each epoch of a prefetcher is given: its settings (:class:`EpochConfig`) and
the record of batch sizes that outlives it (:class:`BatchSizes`)."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass
class BatchSizes:
    """What the epochs learn of the batches' sizes, kept by the handle from one epoch
    to the next: the largest batch built so far (what a batch not yet built is
    reserved in the budget), and whether any was measured (the largest may be 0:
    batches with no arrays in them); before that, a ``guess`` (0: none).

    >>> sizes = BatchSizes(guess=400)
    >>> sizes.reserve
    400
    >>> sizes.learn(300); sizes.learn(200)
    >>> sizes, sizes.reserve
    (BatchSizes(largest=300, known=True, guess=400), 300)
    """

    largest: int = 0
    known: bool = False
    guess: int = 0

    @property
    def reserve(self) -> int:
        """What a batch not yet built is reserved in the budget: the largest so far, or the guess."""
        return self.largest if self.known else self.guess

    def learn(self, size: int) -> None:
        """Take in the size of a batch just built."""
        self.largest = max(self.largest, size)
        self.known = True
