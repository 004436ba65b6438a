"""Errors as they were raised: a build's exception that cannot travel between
processes reaches the consumer at its own batch with its type, message and
traceback; and one epoch at a time, whatever the threads do."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from helpers import assert_nothing_left_running
from queuetune import Prefetcher
from queuetune.prefetch import shm
from queuetune.prefetch.errors import PrefetcherClosed, WorkerDied, WorkerError


class TwoArgs(Exception):
    """Unpickles as ``TwoArgs(message)``: one argument short."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what} is {why}")


class HoldsALock(Exception):
    """Cannot be pickled at all."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class FailsAt:
    """Eight small batches; the fourth (index 3) raises ``error``."""

    def __init__(self, error: str) -> None:
        self.error = error

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> np.ndarray:
        if i == 3:
            if self.error == "two-args":
                raise TwoArgs("item 3", "corrupt")
            raise HoldsALock("item 3 is corrupt")
        return np.full(16, i)


def read(prefetcher: Prefetcher) -> tuple[list[int], BaseException | None]:
    got: list[int] = []
    try:
        for batch in prefetcher:
            got.append(int(batch[0]))
    except Exception as exc:
        return got, exc
    return got, None


@pytest.mark.timeout(60)
@pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")
@pytest.mark.parametrize("error", ["two-args", "holds-a-lock"])
def test_an_exception_that_cannot_travel_reaches_its_own_batch_with_its_words(error):
    name = "TwoArgs" if error == "two-args" else "HoldsALock"
    with Prefetcher(FailsAt(error), max_bytes="1MiB", mode="process", workers=2, adaptive=False, depth=2) as p:
        for _ in range(2):  # and again: the next epoch's workers meet it as well
            got, exc = read(p)
            assert got == [0, 1, 2]
            assert isinstance(exc, WorkerError) and not isinstance(exc, WorkerDied)
            assert exc.type_name == name and exc.message == "item 3 is corrupt"
            assert "batch 3 of the epoch (index 3)" in str(exc) and name in str(exc)
            # The worker's traceback: where it was raised, in the source's own code.
            assert "__getitem__" in exc.remote_traceback and f"raise {name}(" in exc.remote_traceback
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_thread_mode_raises_the_exception_itself():
    with Prefetcher(FailsAt("two-args"), max_bytes="1MiB", workers=2) as p:
        got, exc = read(p)
    assert got == [0, 1, 2] and type(exc) is TwoArgs and str(exc) == "item 3 is corrupt"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "mode", ["thread", pytest.param("process", marks=pytest.mark.skipif(not shm.available(), reason="needs /dev/shm"))]
)
def test_a_second_thread_cannot_read_while_an_epoch_is_read_and_close_ends_it(mode):
    batches = [np.full(16, i) for i in range(20)]
    p = Prefetcher(batches, max_bytes="1MiB", mode=mode, workers=1)
    first, release = threading.Event(), threading.Event()
    got: list[int] = []
    ended: list[BaseException] = []

    def reader() -> None:
        try:
            for batch in p:
                got.append(int(batch[0]))
                first.set()
                release.wait(30)
        except BaseException as exc:
            ended.append(exc)

    thread = threading.Thread(target=reader, name="reader")
    thread.start()
    try:
        assert first.wait(30)
        with pytest.raises(RuntimeError, match="already being read by thread 'reader'"):
            iter(p)
        with pytest.raises(RuntimeError, match="one epoch at a time"):
            for _ in p:
                pass
        p.close()
    finally:
        release.set()
        thread.join(30)
    assert not thread.is_alive()
    assert got == [0] and len(ended) == 1 and isinstance(ended[0], PrefetcherClosed)
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_once_a_reader_leaves_its_loop_another_thread_reads_a_whole_epoch():
    batches = [np.full(16, i) for i in range(10)]
    with Prefetcher(batches, max_bytes="1MiB", workers=2) as p:
        left = threading.Event()

        def reader() -> None:
            for _batch in p:
                break
            left.set()

        thread = threading.Thread(target=reader)
        thread.start()
        thread.join(30)
        assert left.is_set()
        assert [int(b[0]) for b in p] == list(range(10))


@pytest.mark.timeout(60)
def test_a_reader_thread_that_ended_mid_epoch_does_not_block_the_next():
    batches = [np.full(16, i) for i in range(10)]
    kept = []
    with Prefetcher(batches, max_bytes="1MiB", workers=2) as p:

        def reader() -> None:
            iterator = iter(p)
            next(iterator)
            kept.append(iterator)  # still suspended mid-epoch when the thread ends

        thread = threading.Thread(target=reader)
        thread.start()
        thread.join(30)
        assert [int(b[0]) for b in p] == list(range(10))
        with pytest.raises(PrefetcherClosed, match="a new epoch began"):
            next(kept[0])
