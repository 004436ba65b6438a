"""workers="auto": the worker controller's rules, and a prefetcher whose workers it decides."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from helpers import assert_nothing_left_running
from queuetune import Prefetcher
from queuetune.prefetch.crew import Facts, WorkerController
from queuetune.prefetch.workers import ThreadWorkers


def feed(c, now, requests, *, step, wait=0.0, all_busy=True, build=0.010, share=0.05, idle=None):
    """``requests`` requests to ``c``, each a step then a wait; the changes and the time after."""
    changes = []
    for _ in range(requests):
        now += step + wait
        changed = c.observe(now, step=step, waited=wait, all_busy=all_busy, facts=lambda: Facts(build, share, idle))
        if changed is not None:
            changes.append(changed)
    return changes, now


# --- the controller's rules -----------------------------------------------------------


def test_a_wait_with_every_worker_busy_goes_at_once_to_the_workers_the_pace_needs():
    c = WorkerController(workers=1, max_workers=16, cores=2)
    changes, now = feed(c, 0.0, 3, step=0.002, all_busy=False, build=0.0095)
    assert changes == []
    changes, _ = feed(c, now, 1, step=0.002, wait=0.008, build=0.0095)
    assert changes == [6]  # ceil(9.5 ms / 2 ms x 1.2 headroom)


@pytest.mark.parametrize(("known", "expected"), [(0, [7]), (1, [7]), (2, [6]), (30, [6])])
def test_a_need_read_from_the_first_two_steps_gets_one_worker_more(known, expected):
    c = WorkerController(workers=1, max_workers=16, cores=2)
    changes, now = feed(c, 0.0, known, step=0.002, all_busy=False, build=0.0095)
    changes, _ = feed(c, now, 1, step=0.002, wait=0.008, build=0.0095)
    assert changes == expected  # steps known at the wait: known + 1


def test_a_first_need_already_met_adds_none():
    c = WorkerController(workers=6, max_workers=16, cores=2)
    changes, _ = feed(c, 0.0, 1, step=0.002, wait=0.008, build=0.0095)  # ceil(4.75 x 1.2) = 6 workers
    assert changes == []


def test_a_wait_while_a_worker_is_idle_adds_none():
    c = WorkerController(workers=1, max_workers=16, cores=2)
    changes, _ = feed(c, 0.0, 40, step=0.002, wait=0.008, all_busy=False, build=0.0095)
    assert changes == []


@pytest.mark.parametrize(("idle", "expected"), [(0.3, []), (1.2, [2]), (3.0, [4])])
def test_builds_that_use_a_core_get_no_more_workers_than_the_idle_cores_run(idle, expected):
    c = WorkerController(workers=1, max_workers=16, cores=4)
    changes, _ = feed(c, 0.0, 1, step=0.002, wait=0.008, build=0.020, share=1.0, idle=idle)
    assert changes == expected


def test_never_more_than_max_workers():
    c = WorkerController(workers=1, max_workers=3, cores=2)
    changes, now = feed(c, 0.0, 1, step=0.001, wait=0.050, build=0.050)
    assert changes == [3]
    changes, _ = feed(c, now, 400, step=0.001, wait=0.050, build=0.050)
    assert changes == [] and c.workers == 3


def test_an_addition_that_does_not_raise_the_rate_is_undone_and_retried_only_after_the_backoff():
    # Two workers, the consumer waits 2 ms a batch at every step, whatever their number.
    c = WorkerController(workers=2, max_workers=8, cores=8, backoff=2.0)
    waiting = {"step": 0.004, "wait": 0.002, "build": 0.006}  # need 1.5 x 1.2: only the slow rule adds
    changes, now = feed(c, 0.0, 50, **waiting)  # a window is 0.25 s: 42 requests here
    assert changes == [3]  # a window of waits with every worker building: one more
    changes, now = feed(c, now, 50, **waiting)
    assert changes == [2]  # the same rate at 3: back to 2
    changes, now = feed(c, now, 250, **waiting)  # 1.5 s, within the 2 s backoff
    assert changes == []
    changes, now = feed(c, now, 150, **waiting)  # past it: tried again, undone again
    assert changes == [3, 2]
    changes, now = feed(c, now, 500, **waiting)  # 3 s, within the doubled 4 s backoff
    assert changes == []


def test_an_addition_is_kept_when_the_waits_scatter_too_much_to_tell_it_did_not_help():
    # Waits of 0 and 10 ms in turn, before the addition and after: the same mean, but
    # stalls this scattered could hide a gain; a worker too many costs less than one too few.
    c = WorkerController(workers=2, max_workers=8, cores=8)
    changes, now = [], 0.0
    for i in range(200):
        wait = 0.010 * (i % 2)
        now += 0.004 + wait
        facts = lambda: Facts(build=0.006, cpu_share=0.05, idle_cores=None)  # noqa: E731
        changed = c.observe(now, step=0.004, waited=wait, all_busy=True, facts=facts)
        if changed is not None:
            changes.append(changed)
    assert changes[:2] == [3, 4]  # never back to 2


def test_an_addition_after_a_window_without_waits_is_not_judged_by_it():
    # A quiet window, then stalls: the jump to the need cannot show a gain against
    # a window that did not wait, and is kept.
    c = WorkerController(workers=2, max_workers=8, cores=8)
    changes, now = feed(c, 0.0, 50, step=0.004, build=0.006)
    assert changes == []
    changes, now = feed(c, now, 1, step=0.004, wait=0.050, build=0.016)  # a stall: need 4 x 1.2
    assert changes == [5]
    changes, now = feed(c, now, 60, step=0.004, wait=0.002, build=0.016)
    assert 2 not in changes and c.workers >= 5


def test_an_addition_that_raises_the_rate_is_kept():
    c = WorkerController(workers=2, max_workers=8, cores=8)
    changes, now = feed(c, 0.0, 40, step=0.004, wait=0.004, build=0.006)
    assert changes == [3]
    changes, now = feed(c, now, 100, step=0.004, wait=0.001, build=0.006)  # waits cut by 3/4
    assert c.workers >= 3 and 2 not in changes


def test_idle_workers_are_removed_one_at_a_time_but_never_below_one():
    c = WorkerController(workers=4, max_workers=8, cores=8)
    changes, _ = feed(c, 0.0, 2000, step=0.010, build=0.005)  # the consumer's pace needs half a worker
    assert changes == [3, 2, 1]
    assert c.workers == 1


def test_a_removal_that_makes_the_consumer_wait_is_undone():
    c = WorkerController(workers=3, max_workers=8, cores=8)
    changes, now = feed(c, 0.0, 90, step=0.010, build=0.011)  # need 1.1: one fewer than 3 is still idle
    assert changes == []  # three quiet windows are not enough
    changes, now = feed(c, now, 15, step=0.010, build=0.011)
    assert changes == [2]  # the fourth
    changes, now = feed(c, now, 30, step=0.010, wait=0.003, all_busy=False, build=0.011)
    assert changes == [3]  # slower with 2 and the consumer waits: 3 again
    changes, _ = feed(c, now, 150, step=0.010, build=0.011)
    assert changes == []  # 3 is the floor for the backoff


def test_the_epochs_end_adds_no_worker():
    c = WorkerController(workers=1, max_workers=8, cores=8)
    facts = lambda: Facts(build=0.010, cpu_share=0.05, idle_cores=None)  # noqa: E731
    assert c.observe(1.0, step=0.002, waited=0.008, all_busy=True, facts=facts, can_start=False) is None
    assert c.observe(1.1, step=0.002, waited=0.008, all_busy=True, facts=facts) == 7  # 6, and 1 for two steps


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"workers": 4, "max_workers": 2}, ValueError, "above max_workers"),
        ({"workers": 0}, ValueError, "workers must be a positive integer"),
        ({"max_workers": 1.5}, TypeError, "max workers"),
    ],
)
def test_bad_controller_settings_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        WorkerController(**kwargs)


# --- elastic worker threads --------------------------------------------------------------


def _alive():
    return sum(t.name.startswith("queuetune-prefetch") and t.is_alive() for t in threading.enumerate())


@pytest.mark.timeout(30)
def test_thread_workers_resize_starts_and_ends_real_threads():
    workers = ThreadWorkers(1, lambda i: i, capacity=4)
    try:
        assert (workers.count, workers.capacity, workers.gate, _alive()) == (1, 4, 1, 1)
        workers.resize(4)
        assert _alive() == 4
        workers.resize(2)
        deadline = time.monotonic() + 10
        while _alive() > 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _alive() == 2
        assert [workers.submit(i).result(10) for i in range(5)] == [0, 1, 2, 3, 4]
        with pytest.raises(ValueError, match="from 1 to 4"):
            workers.resize(5)
    finally:
        workers.shutdown(wait=True, unclaimed=[])
    assert_nothing_left_running()


# --- a prefetcher with workers="auto" ----------------------------------------------------


class Sleepy:
    """Batch ``i``: an array of ``i``, built in ``seconds`` of sleep (a build that waits on I/O)."""

    def __init__(self, count: int, seconds: float) -> None:
        self.count, self.seconds = count, seconds

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> np.ndarray:
        time.sleep(self.seconds)
        return np.full(1000, i)


def _worker_marks(p):
    return [m.value for m in p.trace().marks if m.kind == "workers"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_slow_builds_get_more_workers_and_every_batch_arrives_once_in_order(mode):
    with Prefetcher(Sleepy(150, 0.010), max_bytes="4MiB", workers="auto", max_workers=4, mode=mode) as p:
        seen = []
        for batch in p:
            time.sleep(0.001)
            seen.append(int(batch[0]))
        marks = _worker_marks(p)
        assert seen == list(range(150))
        assert marks[0] == 1 and max(marks) > 1
        assert all(1 <= m <= 4 for m in marks)
        assert p.trace().meta.settings["workers"] == "auto"
        assert p.trace().meta.settings["max_workers"] == 4
    assert_nothing_left_running()


@pytest.mark.timeout(120)
def test_an_epoch_starts_with_the_workers_the_last_ended_with_and_sheds_those_it_does_not_need():
    source = Sleepy(120, 0.008)
    with Prefetcher(source, max_bytes="4MiB", workers="auto", max_workers=6) as p:
        for _ in p:
            time.sleep(0.001)
        learnt = p.workers
        assert learnt > 1
        seen = []
        for batch in p:  # a consumer slower than one worker: the others idle
            time.sleep(0.020)
            seen.append(int(batch[0]))
        marks = _worker_marks(p)
        assert seen == list(range(120))
        second = marks[len(marks) - marks[::-1].index(learnt) - 1 :]
        assert second[0] == learnt
        assert p.workers < learnt
    assert_nothing_left_running()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"workers": "many"}, ValueError, "positive integer or 'auto'"),
        ({"workers": 2.5}, TypeError, "workers must be a positive integer"),
        ({"workers": 2, "max_workers": 4}, ValueError, "max_workers needs workers='auto'"),
        ({"workers": "auto", "max_workers": 0}, ValueError, "max workers must be a positive integer"),
        ({"workers": "auto", "adaptive": False}, ValueError, "needs a depth"),
    ],
)
def test_bad_worker_settings_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        Prefetcher(Sleepy(3, 0.0), max_bytes="1MiB", **kwargs)


def test_auto_workers_need_an_indexable_source():
    with pytest.raises(ValueError, match="workers='auto' needs an indexable source"):
        Prefetcher(iter(range(3)), max_bytes="1MiB", workers="auto")
