"""Where a Prefetcher stands among its epochs (:class:`Place`): the next epoch's
number, the one under way and what of it was handed over, and a state loaded to
resume from; what its ``state_dict`` and ``load_state_dict`` read and write
(the state itself is :mod:`.resume`'s)."""

from __future__ import annotations

from typing import Any

from ..record.recorder import Recorder
from .epoch import Handed
from .options import PrefetchOptions, source_length
from .resume import Progress, Shape, read_state, state_of


def shape_of(options: PrefetchOptions, source: Any) -> Shape:
    """What a state must agree with to resume over ``source``."""
    return Shape(source_length(source), options.batch_size, options.drop_last, options.shuffle)


def refuse_iterable(source: Any) -> None:
    """Raise the error that says a Prefetcher over a plain iterable cannot be resumed."""
    raise TypeError(
        f"a Prefetcher over a plain iterable ({type(source).__name__}) cannot be resumed: "
        "it can only read its iterator again; give an indexable dataset (__getitem__ and __len__)"
    )


class Place:
    """Where a Prefetcher over an indexable source stands: ``next_epoch``, the
    number of the next epoch its loop begins; ``progress``, the epoch under way
    and what of it was handed over; ``resumed``, one loaded to resume from.

    >>> place = Place()
    >>> place.resume(Progress(epoch=3, batches=4, done=1))
    >>> place.next_epoch, place.resumed.done
    (3, 1)
    """

    def __init__(self) -> None:
        self.next_epoch = 0
        self.progress: Progress | None = None
        self.resumed: Progress | None = None

    def next_plan(self, options: PrefetchOptions, source: Any, recorder: Recorder) -> tuple[list[Any], Handed]:
        """The next epoch's plan (the batches left of it, where it resumes one) and
        its progress, which its hand-overs update; marked in ``recorder``."""
        progress = self.resumed or Progress(epoch=self.next_epoch)
        self.resumed = None
        plan = options.plan(source_length(source), progress.epoch)
        progress.batches = len(plan)
        self.progress = progress
        self.next_epoch = progress.epoch + 1
        left = progress.remaining()
        # The recorder's epoch this one will be (it begins with its first batch), and this prefetcher's.
        recorder.mark("sampler_epoch", {"epoch": recorder.epoch + 1, "sampler": progress.epoch})
        if progress.done or progress.also:
            recorder.mark("resumed", {"epoch": recorder.epoch + 1, "batches": len(plan) - len(left)})
        return [plan[i] for i in left], Handed(progress, left)

    def state(self, options: PrefetchOptions, source: Any) -> dict[str, Any]:
        """The state to resume from where this stands (see :func:`.resume.state_of`);
        over a plain iterable, a ``TypeError``: it cannot be resumed."""
        if not options.indexable:
            refuse_iterable(source)
        progress = self.resumed or self.progress
        return state_of(progress, self.next_epoch, options.seed, shape_of(options, source))

    @staticmethod
    def read(state: dict[str, Any], options: PrefetchOptions, source: Any) -> tuple[Progress, int]:
        """The epoch to resume from ``state`` and the seed of its order; a state of
        another source, or with batches past an epoch of this one, is a ``ValueError``
        (and any state, over a plain iterable, a ``TypeError``)."""
        if not options.indexable:
            refuse_iterable(source)
        epoch, done, also, seed = read_state(state, shape_of(options, source))
        batches = options.batches(source_length(source))
        if done > batches or any(i >= batches for i in also):
            raise ValueError(f"the state has batches past the {batches} of an epoch of this source")
        return Progress(epoch=epoch, batches=batches, done=done, also=also), seed

    def resume(self, progress: Progress) -> None:
        """Resume from ``progress`` as the next loop begins."""
        self.next_epoch = progress.epoch
        self.resumed = progress
