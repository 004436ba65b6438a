"""Where a Prefetcher stands, as a small plain state a new process resumes from.

An epoch's order is drawn from the seed and the epoch's number alone
(:func:`epoch_order`), so a state needs only those and the batches of the
current epoch already handed over: those before ``done``, and any after it
(``also``) that ``ordered=False`` handed over early (at most the depth). A
batch built but not yet handed over is in neither, and is built again.
Nothing of the machine is kept: the resumed prefetcher may have another
worker count, mode or ``max_bytes``.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any

#: The version of the state this queuetune writes and reads.
STATE_VERSION = 1
#: The key that names a Prefetcher's state (and its version).
STATE_KEY = "queuetune_prefetcher"


def epoch_order(count: int, shuffle: bool, seed: int, epoch: int) -> list[int]:
    """The order of ``count`` items in epoch ``epoch``: as they are, or shuffled
    by a generator seeded with ``seed`` and the epoch alone, so that any epoch's
    order is drawn again in another process without those before it.

    >>> epoch_order(5, False, 0, 3)
    [0, 1, 2, 3, 4]
    >>> epoch_order(6, True, 7, 2) == epoch_order(6, True, 7, 2) != epoch_order(6, True, 7, 3)
    True
    """
    order = list(range(count))
    if shuffle:
        random.Random(f"queuetune:{seed}:{epoch}").shuffle(order)
    return order


@dataclass
class Progress:
    """The epoch under way (``epoch``, numbered from 0) and the positions of its
    plan handed over: every one before ``done`` and those in ``also``; ``ended``
    once the epoch's loop has ended (read to its end, left or failed), so that
    the next loop is the next epoch.

    >>> p = Progress(epoch=0, batches=4)
    >>> for position in (0, 2, 1): p.handed(position)
    >>> p.done, sorted(p.also)
    (3, [])
    """

    epoch: int = 0
    batches: int = 0
    done: int = 0
    also: set[int] = field(default_factory=set)
    ended: bool = False
    # A state may be taken from another thread than the consumer's, which notes hand-overs.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def handed(self, position: int) -> None:
        """Note that the batch at ``position`` of the epoch's plan was handed over."""
        with self._lock:
            self.also.add(position)
            while self.done in self.also:
                self.also.discard(self.done)
                self.done += 1

    def now(self) -> tuple[int, list[int]]:
        """``done`` and ``also`` (sorted) as they are at one moment."""
        with self._lock:
            return self.done, sorted(self.also)

    def remaining(self) -> list[int]:
        """The positions of the epoch's plan not handed over, in order."""
        return [i for i in range(self.done, self.batches) if i not in self.also]


@dataclass(frozen=True)
class Shape:
    """What a state must agree with to be resumed: the source's length
    (``samples``: its items), ``batch_size``, ``drop_last`` and ``shuffle``."""

    samples: int
    batch_size: int | None
    drop_last: bool
    shuffle: bool


def state_of(progress: Progress | None, next_epoch: int, seed: int, shape: Shape) -> dict[str, Any]:
    """The state of a prefetcher at ``progress`` (None before its first epoch,
    which is then ``next_epoch``), as plain JSON-able data.

    >>> shape = Shape(samples=10, batch_size=4, drop_last=False, shuffle=True)
    >>> state = state_of(Progress(epoch=2, batches=3, done=1), 2, 5, shape)
    >>> state["epoch"], state["done"], state["also"], state["seed"]
    (2, 1, [], 5)
    """
    done, also = progress.now() if progress is not None else (0, [])
    if progress is None or progress.ended or (done >= progress.batches and not also):
        epoch, done, also = (next_epoch if progress is None else progress.epoch + 1), 0, []
    else:
        epoch = progress.epoch
    return {
        STATE_KEY: STATE_VERSION,
        "epoch": epoch,
        "done": done,
        "also": also,
        "seed": seed,
        "samples": shape.samples,
        "batch_size": shape.batch_size,
        "drop_last": shape.drop_last,
        "shuffle": shape.shuffle,
    }


def read_state(state: Any, shape: Shape) -> tuple[int, int, set[int], int]:
    """The epoch, ``done``, ``also`` and seed of ``state``, checked against this
    prefetcher's ``shape``; a ``ValueError`` or ``TypeError`` naming what does
    not fit.

    >>> shape = Shape(samples=10, batch_size=4, drop_last=False, shuffle=True)
    >>> read_state(state_of(None, 0, 5, shape), shape)
    (0, 0, set(), 5)
    >>> read_state({**state_of(None, 0, 5, shape), "samples": 12}, shape)
    Traceback (most recent call last):
    ...
    ValueError: the state is of a source of 12 items, and this one has 10: resume over the same source
    """
    if not isinstance(state, dict):
        raise TypeError(f"a Prefetcher's state is the dict its state_dict() gave, got {type(state).__name__}")
    version = state.get(STATE_KEY)
    if version is None:
        raise ValueError(f"not a Prefetcher's state (no {STATE_KEY!r} key): give what state_dict() returned")
    if version != STATE_VERSION:
        raise ValueError(f"a Prefetcher's state of version {version!r}: this queuetune reads version {STATE_VERSION}")
    for name, unit in (("samples", "items"), ("batch_size", None), ("drop_last", None), ("shuffle", None)):
        theirs, ours = state.get(name), getattr(shape, name)
        if theirs != ours:
            if unit:
                why = f"the state is of a source of {theirs} {unit}, and this one has {ours}"
                why += ": resume over the same source"
            else:
                why = f"the state was taken with {name}={theirs!r}, and this Prefetcher has {name}={ours!r}"
            raise ValueError(why)
    epoch, done, seed = (_count(state, name) for name in ("epoch", "done", "seed"))
    also = state.get("also")
    if not isinstance(also, list) or not all(isinstance(i, int) and i > done for i in also):
        raise ValueError(f"the state's 'also' must list positions after 'done' ({done}), got {also!r}")
    return epoch, done, set(also), seed


def _count(state: dict[str, Any], name: str) -> int:
    value = state.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"the state's {name} must be a non-negative integer, got {value!r}")
    return value
