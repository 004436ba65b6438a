"""The Prefetcher's process mode under each start method (fork, forkserver, spawn),
and where its own forks happen."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import re
import signal
import threading
import traceback

import numpy as np
import psutil
import pytest

from helpers import assert_nothing_left_running
from queuetune import Prefetcher, WorkerDied
from queuetune.prefetch import shm
from queuetune.prefetch.workers import BEHIND

pytestmark = pytest.mark.timeout(120)

METHODS = ["fork", "forkserver", "spawn"]
# Above shm.MIN_BYTES, so the arrays come back through shared memory.
ITEM = 300_000


class Numbered:
    """Picklable, for spawn and forkserver: batch i holds i, and the pid that built it."""

    def __init__(self, n: int, fail_at: int | None = None, delay: float = 0.0, item: int = ITEM) -> None:
        self.n, self.fail_at, self.delay, self.item = n, fail_at, delay, item

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < self.n:
            raise IndexError(i)
        if i == self.fail_at:
            raise KeyError(f"record {i} is corrupt")
        if self.delay:
            threading.Event().wait(self.delay)
        return {"i": i, "x": np.full(self.item, i % 251, np.uint8), "pid": os.getpid()}


def started_as(pid: int) -> str:
    """How a worker process was started, read from the process table."""
    process = psutil.Process(pid)
    line = " ".join(process.cmdline())
    if "spawn_main" in line:
        return "spawn"
    if "forkserver" in " ".join(psutil.Process(process.ppid()).cmdline()):
        return "forkserver"
    return "fork" if process.ppid() == os.getpid() else "unknown"


# Small items are copied into shared memory as they are built; large ones behind the next build.
@pytest.mark.parametrize("item", [ITEM, 2 * BEHIND])
@pytest.mark.parametrize("method", METHODS)
def test_every_batch_once_in_order_under_each_start_method(method, item):
    p = Prefetcher(
        Numbered(12, item=item),
        max_bytes="64MiB",
        workers=2,
        mode="process",
        multiprocessing_context=method,
        sample_memory=False,
    )
    with p:
        for _ in range(2):  # each epoch starts new workers
            seen = []
            for batch in p:
                if not seen:
                    assert started_as(int(batch["pid"])) == method
                x = batch["x"]
                # Each let go of before the next: were they kept, the budget would have no room for
                # more segments, and the next batches would come through the pipe.
                seen.append((int(batch["i"]), bool((x == x.flat[0]).all()), int(x.flat[0]), x.shape, int(batch["pid"])))
                seen[-1] += (isinstance(x.base, ctypes.Array),)  # mapped, not unpickled
                del batch, x
            assert [i for i, *_ in seen] == list(range(12))
            assert all(same and value == i % 251 and shape == (item,) for i, same, value, shape, _, _ in seen)
            assert all(mapped for *_, mapped in seen)
            assert os.getpid() not in {pid for *_, pid, _ in seen}
        trace = p.trace()
    assert trace.meta.settings["start_method"] == method
    assert len(trace.produced) == len(trace.consumed) == 24
    assert shm.sweep(os.getpid()) == 0
    assert_nothing_left_running()


def test_a_context_object_is_taken_as_it_is():
    context = multiprocessing.get_context("spawn")
    with Prefetcher(Numbered(3), max_bytes="4MiB", workers=1, mode="process", multiprocessing_context=context) as p:
        assert [int(b["i"]) for b in p] == [0, 1, 2]
        assert p.trace().meta.settings["start_method"] == "spawn"
    assert_nothing_left_running()


def test_the_default_is_pythons_default_start_method():
    with Prefetcher(Numbered(2), max_bytes="4MiB", workers=1, mode="process") as p:
        assert [int(b["i"]) for b in p] == [0, 1]
        assert p.trace().meta.settings["start_method"] == multiprocessing.get_start_method()
    assert_nothing_left_running()


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_worker_error_reaches_the_consumer_with_its_traceback(method):
    with Prefetcher(
        Numbered(8, fail_at=3), max_bytes="4MiB", workers=2, mode="process", multiprocessing_context=method
    ) as p:
        got = []
        with pytest.raises(KeyError, match="record 3 is corrupt") as info:
            for batch in p:
                got.append(int(batch["i"]))
        assert got == [0, 1, 2]
        assert "__getitem__" in "".join(traceback.format_exception(info.value))
    assert_nothing_left_running()


@pytest.mark.faults
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_killed_worker_is_a_clear_error_and_the_next_epoch_starts_new_ones(method):
    p = Prefetcher(
        Numbered(30, delay=0.01),
        max_bytes="4MiB",
        workers=2,
        mode="process",
        multiprocessing_context=method,
        sample_memory=False,
    )
    got, victim = [], None
    try:
        with pytest.raises(WorkerDied) as info:
            for batch in p:
                got.append(int(batch["i"]))
                if len(got) == 3:
                    victim = int(batch["pid"])
                    os.kill(victim, signal.SIGKILL)
        # The error names the worker killed and how it ended. Through the
        # forkserver, Python can read a killed child's status as 255 (its
        # popen_forkserver.poll, when the status cannot be read back).
        how = "killed by SIGKILL" if method == "spawn" else "(killed by SIGKILL|exit code 255)"
        assert re.search(f"pid {victim}, {how}", str(info.value))
        assert got == list(range(len(got))) and len(got) < 30
        assert [int(b["i"]) for b in p] == list(range(30))
    finally:
        p.close()
    assert shm.sweep(os.getpid()) == 0
    assert_nothing_left_running()


class Unpicklable(Numbered):
    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.lock = threading.Lock()


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_source_that_cannot_be_pickled_is_a_clear_error_and_fork_copies_it(method):
    p = Prefetcher(Unpicklable(4), max_bytes="4MiB", workers=1, mode="process", multiprocessing_context=method)
    with pytest.raises(TypeError, match=rf"started with '{method}'.*must be picklable.*'fork' or mode='thread'"):
        iter(p)
    p.close()
    with Prefetcher(Unpicklable(4), max_bytes="4MiB", workers=1, mode="process", multiprocessing_context="fork") as q:
        assert [int(b["i"]) for b in q] == [0, 1, 2, 3]
    assert_nothing_left_running()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"multiprocessing_context": "threads"}, ValueError, "must be one of 'fork', 'spawn', 'forkserver'"),
        ({"multiprocessing_context": 3}, TypeError, "start method name or a multiprocessing context, got int"),
        ({"multiprocessing_context": "spawn", "mode": "thread"}, ValueError, "needs mode='process'"),
    ],
)
def test_bad_contexts_are_refused(kwargs, error, match):
    kwargs.setdefault("mode", "process")
    with pytest.raises(error, match=match):
        Prefetcher(Numbered(2), max_bytes="4MiB", **kwargs)


# Forks seen while the test below runs: the stack of the forking thread and the
# queuetune threads alive. A hook registered with os.register_at_fork stays for
# the life of the process, so it records only while FORKS is a list.
FORKS: list[tuple[list[str], list[str]]] | None = None


def _before_fork() -> None:
    if FORKS is not None:
        functions = [frame.name for frame in traceback.extract_stack()]
        FORKS.append((functions, sorted(t.name for t in threading.enumerate() if t.name.startswith("queuetune"))))


os.register_at_fork(before=_before_fork)


def test_workers_are_forked_before_any_lock_or_thread_of_the_epoch():
    """Every fork happens where the first epoch is created, not while a batch
    is submitted under the epoch's lock, and while no queuetune thread is alive
    (the pipe reader is paused, the memory sampler starts with the first
    batch); the second epoch forks nothing (its workers are the first's). The
    records of both epochs still arrive."""
    global FORKS
    FORKS = []
    try:
        with Prefetcher(Numbered(10), max_bytes="8MiB", workers=2, mode="process", multiprocessing_context="fork") as p:
            for _ in range(2):
                assert [int(b["i"]) for b in p] == list(range(10))
        forks = list(FORKS)
        trace = p.trace()
    finally:
        FORKS = None
    assert len(forks) == 2  # two workers, kept for the second epoch
    assert len(trace.produced) == len(trace.consumed) == 20
    assert sorted(r.key for r in trace.produced) == sorted(r.key for r in trace.consumed)
    for functions, threads in forks:
        assert "_start_workers" in functions
        assert "fill" not in functions and "_submit" not in functions  # the schedule's, under its lock
        assert threads == []
    assert_nothing_left_running()
