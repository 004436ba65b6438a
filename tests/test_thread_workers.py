"""The prefetcher's worker threads and the memory sampler beside them."""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time

import numpy as np
import psutil
import pytest

from helpers import assert_nothing_left_running
from queuetune import Prefetcher
from queuetune.prefetch import shm
from queuetune.prefetch import workers as workers_module
from queuetune.prefetch.workers import ProcessWorkers, ThreadWorkers
from queuetune.record.recorder import Channel, MemorySampler


def test_each_build_runs_in_a_worker_thread_and_a_failure_reaches_the_future():
    def build(i):
        if i == 3:
            raise KeyError(i)
        return i * 10, threading.current_thread().name

    workers = ThreadWorkers(2, build)
    try:
        futures = [workers.submit(i) for i in range(5)]
        results = [f.result(10) if i != 3 else None for i, f in enumerate(futures)]
        with pytest.raises(KeyError):
            futures[3].result(10)
    finally:
        workers.shutdown(wait=True, unclaimed=[])
    assert [r[0] for r in results if r is not None] == [0, 10, 20, 40]
    assert {r[1] for r in results if r is not None} <= {"queuetune-prefetch_0", "queuetune-prefetch_1"}
    assert_nothing_left_running()


def test_shutdown_cancels_the_builds_not_started_and_refuses_more():
    release = threading.Event()
    started = []

    def build(i):
        started.append(i)
        release.wait(10)
        return i

    workers = ThreadWorkers(1, build)
    first = workers.submit(0)
    queued = [workers.submit(i) for i in (1, 2)]
    deadline = time.monotonic() + 10
    while not started and time.monotonic() < deadline:
        time.sleep(0.01)
    workers.shutdown(wait=False, unclaimed=[])
    assert all(f.cancelled() for f in queued)
    release.set()
    assert first.result(10) == 0  # a build running finishes in the background
    with pytest.raises(RuntimeError, match="shut down"):
        workers.submit(3)
    workers.shutdown(wait=True, unclaimed=[])  # again: nothing more to do
    assert started == [0]
    assert_nothing_left_running()


def test_a_deferred_action_runs_on_a_worker_between_builds_and_none_after_shutdown():
    release = threading.Event()
    order = []

    def build(i):
        order.append(("build", i))
        release.wait(10)
        return i

    workers = ThreadWorkers(1, build)
    try:
        first = workers.submit(0)
        assert workers.defer(lambda: order.append(("action", threading.current_thread().name)))
        second = workers.submit(1)
        release.set()
        assert (first.result(10), second.result(10)) == (0, 1)
    finally:
        workers.shutdown(wait=True, unclaimed=[])
    assert order == [("build", 0), ("action", "queuetune-prefetch_0"), ("build", 1)]
    assert not workers.defer(lambda: order.append(("action", "after shutdown")))
    assert len(order) == 3
    assert_nothing_left_running()


def test_an_action_still_queued_at_shutdown_is_dropped_not_run():
    release = threading.Event()
    ran = []
    workers = ThreadWorkers(1, lambda i: release.wait(10))
    workers.submit(0)
    assert workers.defer(lambda: ran.append(True))
    workers.shutdown(wait=False, unclaimed=[])
    release.set()
    workers.shutdown(wait=True, unclaimed=[])
    assert ran == []
    assert_nothing_left_running()


class Started:
    """Map-style: item i is an array of i; an event per item, set as its build starts."""

    def __init__(self, n):
        self.events = [threading.Event() for _ in range(n)]

    def __len__(self):
        return len(self.events)

    def __getitem__(self, i):
        self.events[i].set()
        return np.full(1000, i)


@pytest.mark.timeout(60)
def test_the_consumer_starts_the_first_batch_and_the_worker_threads_start_the_rest(monkeypatch):
    starters = []
    original = ThreadWorkers.submit

    def submit(self, indices, reserve=0):
        starters.append(threading.get_ident())
        return original(self, indices, reserve)

    monkeypatch.setattr(ThreadWorkers, "submit", submit)
    n, depth = 40, 3
    source = Started(n)
    got = []
    with Prefetcher(source, workers=2, adaptive=False, depth=depth, max_bytes="1MiB", sample_memory=False) as p:
        for batch in p:
            got.append(int(batch[0]))
            # The batch this hand-over let start: once a worker has, ask for the next.
            ahead = len(got) + depth - 1
            if ahead < n:
                assert source.events[ahead].wait(10)
    assert got == list(range(n))
    assert len(starters) == n
    assert starters.count(threading.get_ident()) == 1
    assert_nothing_left_running()


@pytest.mark.timeout(90)
def test_in_process_mode_the_start_a_hand_over_lets_go_is_made_on_the_workers_starter_thread(monkeypatch):
    threads = []
    original = ProcessWorkers.submit

    def submit(self, indices, reserve=0):
        threads.append(threading.current_thread().name)
        return original(self, indices, reserve)

    monkeypatch.setattr(ProcessWorkers, "submit", submit)
    n, depth = 30, 3
    source = [np.full(1000, i) for i in range(n)]
    got = []
    with Prefetcher(source, mode="process", workers=2, adaptive=False, depth=depth, max_bytes="1MiB") as p:
        for batch in p:
            got.append(int(batch[0]))
            # The batch this hand-over let start: once it has, ask for the next.
            deadline = time.monotonic() + 10
            while len(threads) < min(n, len(got) + depth) and time.monotonic() < deadline:
                time.sleep(0.005)
    assert got == list(range(n))
    assert len(threads) == n
    # The first fill (the depth's batches) starts on the consumer's thread or on the
    # pool's thread that tells the size guess, whichever sees the guess first (a
    # guess already told when its callback is added runs it at once, on the
    # consumer's thread); every batch a hand-over lets start, on the starter thread.
    assert threading.current_thread().name not in threads[depth:]
    assert threads.count("queuetune-starter") >= n - 2 * depth
    assert_nothing_left_running()


@pytest.mark.timeout(90)
def test_in_process_mode_a_batch_let_go_of_returns_its_segment_on_the_starter_thread(monkeypatch):
    where = []
    take_back = shm.Pool._take_back

    def spy(self):
        where.append(threading.current_thread().name)
        return take_back(self)

    monkeypatch.setattr(shm.Pool, "_take_back", spy)
    n = 30
    source = [np.full(200_000, i) for i in range(n)]  # 1.6 MB each: built in shared memory
    got = []
    with Prefetcher(source, mode="process", workers=2, adaptive=False, depth=3, max_bytes="64MiB") as p:
        for batch in p:
            got.append(int(batch[0]))
            del batch
            time.sleep(0.01)
    assert got == list(range(n))
    # Each batch let go of is taken back once; the consumer's thread only queues it.
    assert where.count("queuetune-starter") >= n
    assert where.count(threading.current_thread().name) <= n // 3
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_process_workers_drop_what_their_starter_was_asked_and_had_not_begun_at_shutdown(monkeypatch):
    drained = threading.Event()
    drain = workers_module.threads.drain

    def drain_and_tell(jobs):
        taken = drain(jobs)
        drained.set()
        return taken

    monkeypatch.setattr(workers_module.threads, "drain", drain_and_tell)
    channel = Channel(list().append, processes=True)
    workers = ProcessWorkers(1, [np.zeros(10)], None, None, channel, multiprocessing.get_context("fork"))
    ran = []
    try:
        assert workers.defer(lambda: drained.wait(10))  # begun, or dropped, before shutdown drains
        assert workers.defer(lambda: ran.append(threading.current_thread().name))
    finally:
        workers.shutdown(wait=True, unclaimed=[])
        channel.close()
    assert ran == []
    assert not workers.defer(lambda: ran.append("after shutdown"))
    assert ran == []
    assert_nothing_left_running()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ordered", [True, False])
def test_a_start_asked_of_a_worker_that_has_not_come_is_made_by_the_consumer(monkeypatch, ordered):
    monkeypatch.setattr(ThreadWorkers, "defer", lambda self, action: True)  # asked, never done
    n = 30
    with Prefetcher(Started(n), workers=2, ordered=ordered, max_bytes="1MiB", sample_memory=False) as p:
        got = [int(batch[0]) for batch in p]
    assert sorted(got) == list(range(n))
    assert not ordered or got == list(range(n))
    assert_nothing_left_running()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode, kind", [("thread", ThreadWorkers), ("process", ProcessWorkers)])
def test_a_batch_that_cannot_be_started_is_the_consumers_error_at_that_batch(monkeypatch, mode, kind):
    calls = []
    original = kind.submit

    def submit(self, indices, reserve=0):
        calls.append(indices)
        if len(calls) == 6:
            raise OSError(28, "No space left on device")
        return original(self, indices, reserve)

    monkeypatch.setattr(kind, "submit", submit)
    got = []
    with Prefetcher(Started(20), workers=2, mode=mode, max_bytes="1MiB", sample_memory=False) as p:
        with pytest.raises(OSError, match="No space left on device"):
            for batch in p:
                got.append(int(batch[0]))
    assert got == [0, 1, 2, 3, 4]
    assert_nothing_left_running()


def test_workers_nobody_shut_down_end_their_threads_once_let_go():
    workers = ThreadWorkers(3, str)
    assert workers.submit(7).result(10) == "7"
    del workers
    gc.collect()
    assert_nothing_left_running()


def test_the_memory_sampler_looks_for_child_processes_only_for_loaders_that_have_them(monkeypatch):
    looked = []
    children = psutil.Process.children

    def counted(self, recursive=False):
        looked.append(recursive)
        return children(self, recursive=recursive)

    monkeypatch.setattr(psutil.Process, "children", counted)
    samples = []
    MemorySampler(samples.append, children=False).sample()
    assert looked == [] and samples[-1].n_children == 0 and samples[-1].rss > 0
    MemorySampler(samples.append).sample()
    assert looked == [True]
    looked.clear()
    with Prefetcher(list(range(8)), max_bytes=1 << 20, workers=2) as prefetcher:
        assert list(prefetcher) == list(range(8))
    assert looked == []
    assert_nothing_left_running()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("early", [False, True], ids=["after its first seconds", "in its first seconds"])
def test_the_memory_sampler_reads_costly_children_seldom_and_its_own_rss_at_every_sample(monkeypatch, early):
    if not early:
        monkeypatch.setattr(MemorySampler, "EARLY_SECONDS", 0.0)
    reads = []

    def slow_children(self, recursive=False):
        reads.append(time.monotonic())
        began = time.thread_time()
        while time.thread_time() - began < 0.010:  # CPU, as reading /proc and smaps_rollup costs
            pass
        return []

    monkeypatch.setattr(psutil.Process, "children", slow_children)
    samples = []
    sampler = MemorySampler(samples.append, interval=0.005)
    began = time.monotonic()
    sampler.start()
    time.sleep(0.4)
    sampler.stop()
    elapsed = time.monotonic() - began
    # 10 ms or more a reading, within 2 % of a core (10 % in the sampler's first
    # seconds): one every 0.5 s (0.1 s) or less often, besides the ones at start, the
    # next (the start's reading, made before a loader's workers exist, does not put
    # it off) and at stop, while the process's own RSS was read every few milliseconds.
    assert 2 <= len(reads) <= 3 + int(elapsed / (0.1 if early else 0.5))
    assert len(samples) >= 10
    assert all(s.rss > 0 and s.n_children == 0 for s in samples)
    assert_nothing_left_running()
