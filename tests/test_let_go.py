"""A batch the consumer lets go is freed then, not at its next request: neither
the probe's wrapper around a loader's iterator nor the read-ahead of plain
iterables holds the batch it handed over (the Prefetcher's own is in
``test_prefetcher.py``)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from helpers import assert_nothing_left_running
from queuetune.prefetch.read_ahead import read_ahead
from queuetune.record.recorder import Recorder, recorded
from queuetune.record.trace import TraceMeta


def arrays(n: int) -> Iterator[np.ndarray]:
    for i in range(n):
        yield np.full(10_000, i, dtype=np.float32)


def probed(n: int) -> tuple[Iterator[Any], Callable[[], None]]:
    recorder = Recorder(TraceMeta(), sample_memory=False)
    return recorded(arrays(n), recorder, lambda asked, got, batch: None), recorder.close


def read_ahead_of(n: int) -> tuple[Iterator[Any], Callable[[], None]]:
    return read_ahead(arrays(n), buffer=2), lambda: None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", [probed, read_ahead_of], ids=["probe", "read-ahead"])
def test_a_batch_let_go_is_freed_before_the_next_request(make):
    iterator, close = make(5)
    gc.disable()  # freed by its reference count, not by a later collection
    try:
        for i in range(3):
            batch = next(iterator)
            assert int(batch[0]) == i
            gone = weakref.ref(batch)
            del batch
            assert gone() is None, f"batch {i} is still held after the consumer let it go"
        assert [int(b[0]) for b in iterator] == [3, 4]
    finally:
        gc.enable()
        close()
    assert_nothing_left_running()
