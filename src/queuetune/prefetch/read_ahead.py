"""Bounded read-ahead for plain iterables: one background thread, a fixed count of batches."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from ..units import positive_int

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def read_ahead(source: Iterable[Any], buffer: int) -> Iterator[Any]:
    """Iterate ``source`` with a background thread that keeps up to ``buffer``
    built batches ready (plus the one it is building).

    Order is kept, every batch is delivered once, errors reach the consumer
    unchanged, and closing the generator (``break``, an exception, garbage
    collection) stops the thread.

    >>> list(read_ahead(range(5), buffer=2))
    [0, 1, 2, 3, 4]
    """
    buffer = positive_int(buffer, "prefetch buffer")
    iterator = iter(source)
    ready: queue.Queue[Any] = queue.Queue(maxsize=buffer)
    stop = threading.Event()

    def fill() -> None:
        try:
            for item in iterator:
                if not _put(ready, item, stop):
                    return
            _put(ready, _DONE, stop)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            _put(ready, _Failure(exc), stop)

    thread = threading.Thread(target=fill, name="queuetune-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()


def _put(ready: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            ready.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False
