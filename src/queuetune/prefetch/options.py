"""The Prefetcher's settings (:class:`PrefetchOptions`): its keyword arguments
checked once, each bad one a ``ValueError`` or ``TypeError`` naming it, and
kept as one frozen record that the rest of the prefetcher reads.

>>> from queuetune.prefetch import Prefetcher
>>> with Prefetcher(list(range(10)), max_bytes="1MiB", workers=3) as p:
...     options = p.options
>>> options.max_bytes, options.workers, options.depth, options.mode, options.indexable
(1048576, 3, 4, 'thread', True)
>>> Prefetcher(list(range(10)), max_bytes="1MiB", mode="threads")
Traceback (most recent call last):
...
ValueError: mode must be 'thread' or 'process', got 'threads'
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.context
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..common import cores
from ..common.units import _shown, parse_bytes, positive_int
from ..frameworks import detect
from .batch import make_batch
from .config import EpochConfig
from .device import seam
from .device.settings import DeviceOptions, device_options
from .resume import epoch_order

#: How a Prefetcher's workers run: threads of this process, or processes of their own.
Mode = Literal["thread", "process"]
MODES: tuple[Mode, ...] = ("thread", "process")


@dataclass(frozen=True)
class PrefetchOptions:
    """What a :class:`~queuetune.prefetch.Prefetcher` was asked for, checked (see
    its text for what each means). ``workers``: those an epoch starts with (1
    with ``auto``, which adds more up to ``max_workers``); ``depth``: the depth
    it starts at; ``seed``: the one given, or drawn as it was made (so that a
    state taken later holds the order it drew); ``indexable``: the source has
    ``__getitem__`` and a length (else it is a plain iterable, read by one thread);
    ``device``: the device stage's settings, None where it is off.
    """

    max_bytes: int
    mode: Mode
    workers: int
    auto: bool
    max_workers: int | None
    multiprocessing_context: multiprocessing.context.BaseContext | None
    adaptive: bool
    depth: int
    max_depth: int
    ordered: bool
    batch_size: int | None
    collate_fn: Callable[[list[Any]], Any] | None
    shuffle: bool
    seed: int
    drop_last: bool
    sample_memory: bool
    timeout: float | None
    trace_epochs: int | None
    indexable: bool
    device: DeviceOptions | None = None

    @property
    def start_method(self) -> str:
        """How worker processes start: the given context's method, or Python's default."""
        context = self.multiprocessing_context or multiprocessing.get_context()
        return context.get_start_method()

    def batches(self, count: int) -> int:
        """The batches an epoch over ``count`` items makes.

        >>> from queuetune.prefetch import Prefetcher
        >>> with Prefetcher(list(range(5)), max_bytes=1000, batch_size=2) as p:
        ...     p.options.batches(5)
        3
        """
        if self.batch_size is None:
            return count
        return count // self.batch_size if self.drop_last else -(-count // self.batch_size)

    def plan(self, count: int, epoch: int) -> list[Any]:
        """What each batch of epoch ``epoch`` over ``count`` items is made of: a
        batch index, or sample indices.

        >>> from queuetune.prefetch import Prefetcher
        >>> with Prefetcher(list(range(5)), max_bytes=1000, batch_size=2, drop_last=True) as p:
        ...     p.options.plan(5, 0)
        [[0, 1], [2, 3]]
        """
        order = epoch_order(count, self.shuffle, self.seed, epoch)
        if self.batch_size is None:
            return order
        size = self.batch_size
        groups = [order[i : i + size] for i in range(0, count, size)]
        if self.drop_last and groups and len(groups[-1]) < size:
            groups.pop()
        return groups

    def build(self, source: Any, index: int) -> Any:
        """Batch ``index`` of ``source`` (of the unshuffled order), built in the calling thread.

        >>> from queuetune.prefetch import Prefetcher
        >>> with Prefetcher(list(range(5)), max_bytes=1000, batch_size=2) as p:
        ...     p.options.build(p.source, 2).tolist()
        [4]
        """
        if not self.indexable:
            raise TypeError("a plain iterable has no batch index")
        if self.batch_size is None:
            return source[index]
        start = index * self.batch_size
        stop = min(start + self.batch_size, source_length(source))
        return make_batch(source, list(range(start, stop)), self.batch_size, self.collate_fn)

    def epoch_config(self) -> EpochConfig:
        """What each epoch is given of these options."""
        return EpochConfig(
            max_bytes=self.max_bytes,
            depth=self.depth,
            max_depth=self.max_depth,
            ordered=self.ordered or not self.indexable,
            timeout=self.timeout,
            fixed=not self.adaptive,
            guess=self.indexable and self.batch_size is not None and self.collate_fn is None,
        )

    @classmethod
    def checked(
        cls,
        source: Any,
        *,
        max_bytes: int | str | float,
        workers: int | str | None,
        max_workers: int | None,
        mode: str,
        adaptive: bool,
        depth: int | None,
        max_depth: int,
        ordered: bool,
        batch_size: int | None,
        collate_fn: Callable[[list[Any]], Any] | None,
        shuffle: bool,
        seed: int | None,
        drop_last: bool,
        sample_memory: bool,
        timeout: float | None,
        trace_epochs: int | None,
        multiprocessing_context: str | multiprocessing.context.BaseContext | None,
        **stage: Any,
    ) -> PrefetchOptions:
        """The options of a Prefetcher given these (with its defaults; ``stage``: the
        device stage's, see :func:`.device.settings.device_options`); a bad one is an error naming it."""
        budget, waited, trace_epochs = _limits(max_bytes, timeout, trace_epochs)
        how, indexable = _check_mode(mode), is_indexable(source)
        auto, count, most = _workers(workers, max_workers, mode, indexable)
        context = _check_context(multiprocessing_context, mode)
        adaptive = _flag(adaptive, "adaptive")
        start_depth, max_depth = _depths(depth, max_depth, auto, adaptive, count)
        ordered, shuffle = _flag(ordered, "ordered"), _flag(shuffle, "shuffle")
        drop_last, sample_memory = _flag(drop_last, "drop_last"), _flag(sample_memory, "sample_memory")
        batch_size = None if batch_size is None else positive_int(batch_size, "batch size")
        collate_fn, drawn = _check_collate(collate_fn, batch_size), _check_seed(seed)
        if not indexable:
            _check_iterable(source, mode, auto, count, batch_size)
        return cls(
            budget,
            how,
            count,
            auto,
            most,
            context,
            adaptive,
            start_depth,
            max_depth,
            ordered,
            batch_size,
            collate_fn,
            shuffle,
            drawn,
            drop_last,
            sample_memory,
            waited,
            trace_epochs,
            indexable,
            seam.checked(device_options(**stage, max_bytes=budget)),
        )


def _limits(
    max_bytes: int | str | float, timeout: Any, trace_epochs: int | None
) -> tuple[int, float | None, int | None]:
    """The budget in bytes, the timeout and the epochs a trace keeps, checked."""
    budget = parse_bytes(max_bytes, "max_bytes")
    waited = _check_timeout(timeout)
    if trace_epochs is not None:
        trace_epochs = positive_int(trace_epochs, "trace epochs")
    return budget, waited, trace_epochs


def _check_mode(mode: str) -> Mode:
    """``mode``, one of :data:`MODES`, where this process may start worker processes if it asks for them."""
    if mode not in MODES:
        raise ValueError(f"mode must be 'thread' or 'process', got {mode!r}")
    if mode == "process" and multiprocessing.current_process().daemon:
        raise ValueError(
            f"mode='process' cannot start worker processes here: {multiprocessing.current_process().name} "
            "is a daemonic process, and multiprocessing lets those have no children; use mode='thread'"
        )
    return "process" if mode == "process" else "thread"


def _workers(
    workers: int | str | None, max_workers: int | None, mode: str, indexable: bool
) -> tuple[bool, int, int | None]:
    """Whether workers are "auto", the workers an epoch starts with, and the most with "auto"."""
    if workers is None:
        workers = 2 if indexable else 1
    auto = isinstance(workers, str)
    if auto and workers != "auto":
        raise ValueError(f"workers must be a positive integer or 'auto', got {workers!r}")
    most = _check_max_workers(max_workers, auto, mode)
    return auto, 1 if auto else positive_int(workers, "workers"), most


def _depths(depth: int | None, max_depth: int, auto: bool, adaptive: bool, workers: int) -> tuple[int, int]:
    """The depth to start at and the most depth, checked."""
    max_depth = positive_int(max_depth, "max depth")
    if depth is None and auto and not adaptive:
        raise ValueError("workers='auto' with adaptive=False needs a depth")
    if depth is None:
        # Every worker building from the first request, and adaptive, one
        # more: a worker that finishes before its batch is taken starts the next.
        depth = min(workers + 1 if adaptive and workers > 1 else workers, max_depth)
    start_depth = positive_int(depth, "depth")
    if start_depth > max_depth:
        raise ValueError(f"depth {depth} is above max_depth {max_depth}")
    return start_depth, max_depth


def _check_iterable(source: Any, mode: str, auto: bool, workers: int, batch_size: int | None) -> None:
    """What a plain iterable, read by one thread, cannot be given."""
    if source is None or not hasattr(source, "__iter__") or isinstance(source, (str, bytes, dict)):
        raise TypeError(f"Prefetcher needs an indexable dataset or an iterable, got {type(source).__name__}")
    if mode == "process":
        raise ValueError("a plain iterable is read by one thread: use mode='thread'")
    if auto:
        raise ValueError("a plain iterable is read by one thread: workers='auto' needs an indexable source")
    if workers > 1:
        raise ValueError(
            f"workers={workers} with a plain iterable ({type(source).__name__}): a plain iterable "
            "is read by one thread; give an indexable dataset (one with __getitem__ and __len__) or workers=1"
        )
    if batch_size is not None:
        raise ValueError("batch_size needs an indexable source")


def _check_context(value: Any, mode: str) -> multiprocessing.context.BaseContext | None:
    if value is None:
        return None
    if mode != "process":
        raise ValueError("multiprocessing_context needs mode='process': thread mode starts no process")
    if isinstance(value, str):
        methods = multiprocessing.get_all_start_methods()
        if value not in methods:
            raise ValueError(
                f"multiprocessing_context must be one of {', '.join(map(repr, methods))} "
                f"or a multiprocessing context, got {value!r}"
            )
        return multiprocessing.get_context(value)
    if isinstance(value, multiprocessing.context.BaseContext):
        return value
    raise TypeError(
        f"multiprocessing_context must be a start method name or a multiprocessing context, got {type(value).__name__}"
    )


def default_max_workers(mode: str) -> int:
    """The most workers ``workers="auto"`` adds unless told: one per core in
    process mode; in thread mode four per core, from 8 to 32 (a build that
    waits on I/O or runs outside the GIL needs no core of its own).

    >>> default_max_workers("process") == cores.available()
    True
    """
    count = cores.available()
    return count if mode == "process" else min(32, max(8, 4 * count))


def _check_max_workers(value: Any, auto: bool, mode: str) -> int | None:
    """The most workers for workers="auto": ``value``, or :func:`default_max_workers`."""
    if value is None:
        return default_max_workers(mode) if auto else None
    if not auto:
        raise ValueError("max_workers needs workers='auto' (a fixed count is given as workers=N)")
    return positive_int(value, "max workers")


def _flag(value: Any, name: str) -> bool:
    """``value`` if it is a real boolean (``bool`` or ``numpy.bool_``): ``"no"`` is not False.

    >>> _flag(np.bool_(True), "shuffle")
    True
    >>> _flag("no", "shuffle")
    Traceback (most recent call last):
    ...
    TypeError: shuffle must be True or False, got 'no' (str)
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {_shown(value)} ({type(value).__name__})")
    return bool(value)


def _check_collate(collate_fn: object, batch_size: int | None) -> Callable[[list[Any]], Any] | None:
    if collate_fn is not None and not callable(collate_fn):
        raise TypeError(
            f"collate_fn must be a callable or None, got {_shown(collate_fn)} ({type(collate_fn).__name__})"
        )
    if collate_fn is not None and batch_size is None:
        raise ValueError("collate_fn needs batch_size")
    return collate_fn


def _check_seed(seed: Any) -> int:
    """``seed``, or one drawn now where it is None (so that a state taken later
    holds the order this prefetcher drew)."""
    if seed is None:
        return random.SystemRandom().randrange(2**63)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer or None, got {_shown(seed)} ({type(seed).__name__})")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None, got {seed}")
    return int(seed)


def _check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")
    return float(timeout)


def is_indexable(source: Any) -> bool:
    if not hasattr(source, "__getitem__") or isinstance(source, (str, bytes, dict)):
        return False
    try:
        source_length(source)
    except TypeError:
        return False
    return True


def source_length(source: Any) -> int:
    try:
        count = detect(source).batch_count(source)
    except TypeError:  # not iterable: a map-style dataset
        count = None
    if count is None:
        count = len(source)
    return int(count)
