"""Bounded read-ahead for plain iterables: one background thread, a fixed count of batches."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from ..common.units import positive_int

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
                # Boxed, and out of the box once queued: this thread holds no batch
                # the consumer took while it builds the next.
                box = [item]
                del item
                if not _put(ready, box, stop):
                    return
            _put(ready, [_DONE], stop)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            _put(ready, [_Failure(exc)], stop)

    thread = threading.Thread(target=fill, name="queuetune-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            out = [ready.get()]
            if out[0] is _DONE:
                return
            if isinstance(out[0], _Failure):
                raise out[0].error
            yield out.pop()  # holding no batch while waiting: one the consumer lets go is freed then
    finally:
        stop.set()
        thread.join()


def _put(ready: queue.Queue[Any], box: list[Any], stop: threading.Event) -> bool:
    """Queue the item in ``box`` and empty the box; False if stopped first."""
    while not stop.is_set():
        try:
            ready.put(box[0], timeout=0.05)
        except queue.Full:
            continue
        box.clear()
        return True
    return False
