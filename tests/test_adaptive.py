"""The depth controller on scripted observations."""

from __future__ import annotations

import pytest

from queuetune.prefetch.adaptive import DepthController


def feed(controller, pattern):
    """pattern: 'w' waited, 'f' ready with the queue full, '.' ready, not full."""
    changes = []
    for step in pattern:
        new = controller.observe(waited=step == "w", full=step == "f")
        if new is not None:
            changes.append(new)
    return changes


def test_grows_after_two_waits_among_the_last_four_requests():
    c = DepthController()
    assert feed(c, "w...w...w...") == []  # one wait in every four: batches come in bursts, not too few
    assert feed(c, "w") == []
    assert feed(c, "..w") == [2]  # two in the last four
    assert feed(c, "wwww") == [3, 4]
    c = DepthController(grow_after=3, window=3)
    assert feed(c, "ww.ww") == []
    assert feed(c, "w") == [2]


def test_a_wait_jumps_to_the_depth_the_workers_need():
    c = DepthController(depth=2)
    assert c.observe(waited=True, full=False, needed=13) == 13
    assert c.observe(waited=True, full=False, needed=13) is None  # there already
    assert c.observe(waited=False, full=False, needed=20) is None  # no wait, no change
    assert c.observe(waited=True, full=False, needed=20, limit=16) == 16  # within the budget
    assert c.observe(waited=True, full=False, needed=30, can_grow=False) is None  # every worker busy
    c = DepthController(depth=2, max_depth=6)
    assert c.observe(waited=True, full=False, needed=13) == 6


def test_shrinks_only_after_a_long_calm_with_the_queue_full():
    c = DepthController(depth=4, shrink_after=8)
    assert feed(c, "f" * 7 + "." + "f" * 7) == []
    assert feed(c, "f") == [3]


def test_a_wait_soon_after_shrinking_sets_a_floor():
    c = DepthController(depth=4, shrink_after=8)
    assert feed(c, "f" * 8) == [3]
    assert feed(c, "ww") == [4]
    assert c.floor == 4
    assert feed(c, "f" * 100) == []  # no more swinging between 3 and 4


def test_deepening_however_late_from_a_depth_shrinking_reached_sets_a_floor():
    """Waits that come long after the shrink (a consumer missing one batch in
    fifty at the shallower depth) still show it too shallow."""
    c = DepthController(depth=4, shrink_after=8)
    assert feed(c, "f" * 8) == [3]
    assert feed(c, "." * 40) == []  # ready, the queue not full: no reason to change
    assert feed(c, "ww") == [4]
    assert c.floor == 4
    assert feed(c, "f" * 100) == []
    grown = DepthController(depth=2, shrink_after=8)
    assert feed(grown, "." * 40 + "ww") == [3]  # deeper from a depth it started at: no floor
    assert grown.floor == 1


def test_never_past_max_depth_or_when_it_cannot_grow():
    c = DepthController(max_depth=3)
    assert feed(c, "w" * 20) == [2, 3]
    c = DepthController()
    assert [c.observe(waited=True, full=False, can_grow=False) for _ in range(5)] == [None] * 5


STEP = 0.003  # the consumer's typical step in the scripted observations below


def stall(controller, wait, **kwargs):
    """One request that waited ``wait`` seconds, the consumer's step being STEP."""
    return controller.observe(waited=True, full=False, wait=wait, step=STEP, **kwargs)


def test_one_long_wait_deepens_at_once_by_the_steps_it_cost():
    c = DepthController(depth=3)
    assert stall(c, 0.030) == 3 + 10  # 30 ms at 3 ms a step: 10 more batches under way
    assert c.depth == 13
    assert feed(c, "." * 5) == []  # the ready batches after the stall change nothing


def test_short_waits_still_need_two_among_the_last_four():
    c = DepthController(depth=3)
    # Just under the long-wait threshold (4 steps): one alone does nothing.
    assert stall(c, 3.9 * STEP) is None
    assert feed(c, "...") == []
    assert stall(c, 3.9 * STEP) is None
    assert stall(c, 3.9 * STEP) == 4
    # Without a step estimate (the first requests) a long wait is a short one.
    c = DepthController(depth=3)
    assert c.observe(waited=True, full=False, wait=1.0, step=None) is None
    assert c.observe(waited=True, full=False, wait=1.0, step=None) == 4


def test_a_long_wait_never_deepens_past_max_depth_the_budget_or_when_it_cannot_grow():
    c = DepthController(depth=3, max_depth=10)
    assert stall(c, 1.0) == 10
    assert stall(c, 1.0) is None
    c = DepthController(depth=3)
    assert stall(c, 1.0, limit=16) == 16  # the budget holds 16 batches
    assert stall(c, 1.0, limit=16) is None
    assert feed(c, "ww") == [17]  # only what the caller allows: here no limit passed
    c = DepthController(depth=3)
    assert stall(c, 1.0, limit=2) is None  # the budget already holds fewer than the depth
    assert c.depth == 3
    assert stall(c, 1.0, can_grow=False) is None
    assert c.depth == 3


def test_stalls_do_not_swing_the_depth():
    """Deepened by a stall, shallowed by a calm with the queue full, and a stall
    soon after: the depth it left becomes the floor, and stays."""
    c = DepthController(depth=2, shrink_after=8)
    assert stall(c, 0.1, limit=12) == 12
    assert feed(c, "f" * 8) == [11]
    assert stall(c, 0.1, limit=12) == 12
    assert c.floor == 12
    changes = []
    for _ in range(20):  # stalls now and then, long calms between them
        changes += feed(c, "f" * 30)
        new = stall(c, 0.1, limit=12)
        if new is not None:
            changes.append(new)
    assert changes == []
    assert c.depth == 12


@pytest.mark.parametrize(
    "kwargs",
    [
        {"depth": 0},
        {"max_depth": 0},
        {"depth": 5, "max_depth": 4},
        {"grow_after": 0},
        {"long_wait": 1},
        {"window": 0},
        {"grow_after": 5, "window": 4},
        {"memory": 0},
    ],
)
def test_bad_settings(kwargs):
    with pytest.raises(ValueError):
        DepthController(**kwargs)


def started(config, workers, sizes, schedules):
    """A schedule of six batches on ``workers`` with what its depth allows
    started, kept in ``schedules`` for the test to stop."""
    from queuetune.prefetch.schedule import Schedule

    schedule = Schedule(config, list(range(6)), workers, sizes)
    schedules.append(schedule)
    with schedule.lock:
        schedule.fill()
    return schedule


@pytest.mark.timeout(30)
def test_time_a_worker_sits_idle_for_the_depth_alone_counts_once_it_reaches_half_a_build():
    import threading
    import time

    from queuetune.prefetch.config import BatchSizes, EpochConfig
    from queuetune.prefetch.workers import ThreadWorkers

    sizes = BatchSizes()
    sizes.learn(100)

    def build(i):
        time.sleep(1.0)
        return bytes(100)

    workers = ThreadWorkers(2, build)
    schedules = []
    try:
        config = EpochConfig(max_bytes=10_000, depth=1, max_depth=8, ordered=True, timeout=None)
        schedule = started(config, workers, sizes, schedules)
        assert schedule.wait_for([schedule.tasks[0]], 10) is not None
        # built, not taken, and batch 1 not started for the depth alone: a worker sits idle,
        # for less than half a build (1 s) so far
        assert schedule.stalls.held_back_since is not None
        assert schedule.stalls.held_back(waited=True) is False
        time.sleep(0.6)
        assert schedule.stalls.held_back(waited=False) is False  # only a wait asks
        assert schedule.stalls.held_back(waited=True) is True
        assert schedule.stalls.held_back(waited=True) is False  # counted from the last wait
        budget = started(
            EpochConfig(max_bytes=150, depth=1, max_depth=8, ordered=True, timeout=None), workers, sizes, schedules
        )
        assert budget.wait_for([budget.tasks[0]], 10) is not None
        assert budget.stalls.held_back_since is None  # held back by the budget, which more depth cannot help
    finally:
        for each in schedules:
            each.stopped = True
        workers.shutdown(wait=True, unclaimed=[])
    assert not [t for t in threading.enumerate() if t.name.startswith("queuetune-prefetch")]


def test_a_wait_after_time_lost_to_the_depth_deepens_by_one():
    c = DepthController(depth=5)
    assert c.observe(waited=True, full=False, lost=True) == 6  # one wait is enough
    assert c.observe(waited=True, full=False, lost=True, can_grow=False) is None
    assert c.observe(waited=False, full=False, lost=True) is None
    assert c.observe(waited=True, full=False, lost=True, limit=6) is None  # the budget holds no more


def test_time_lost_in_the_first_requests_is_the_start_s_and_does_not_deepen():
    c = DepthController(depth=5, start=3, grow_after=4)  # no deepening for waits alone here
    assert c.observe(waited=True, full=False, lost=True, short=4.0) is None
    assert c.observe(waited=False, full=False) is None
    assert c.observe(waited=True, full=False, lost=True, short=4.0) is None  # the third request: still the start
    assert c.observe(waited=True, full=False, lost=True, short=4.0) == 9
    # the rules that go to what the workers need, or cover a stall, hold in the start too
    c = DepthController(depth=1, start=16)
    assert c.observe(waited=True, full=False, needed=5) == 5
    assert c.observe(waited=True, full=False, wait=0.100, step=0.003) == 5 + 34


def test_the_start_is_a_count_of_requests():
    with pytest.raises(ValueError, match="start"):
        DepthController(start=-1)
    with pytest.raises(TypeError, match="start"):
        DepthController(start=1.5)  # type: ignore[arg-type]


def test_waits_that_cost_less_than_the_slack_do_not_deepen_one_batch_at_a_time():
    c = DepthController(depth=5)
    t = 100.0
    assert c.observe(waited=False, full=False, now=t) is None
    # waits of 1 ms in a second of requests: 0.1 % of the consumer's time
    assert c.observe(waited=True, full=False, lost=True, spent=0.001, now=t + 1.0) is None
    assert c.observe(waited=True, full=False, spent=0.001, now=t + 1.001) is None  # two waits of the last four
    # 12 ms waited since the first request: over the slack (0.5 %), one deeper
    assert c.observe(waited=True, full=False, lost=True, spent=0.010, now=t + 1.02) == 6
    # the time counts again from the change
    assert c.observe(waited=True, full=False, lost=True, spent=0.001, now=t + 3.0) is None
    # the rules that jump are not held back by the slack
    assert c.observe(waited=True, full=False, needed=9, spent=0.0001, now=t + 5.0) == 9
    assert c.observe(waited=True, full=False, wait=0.100, step=0.003, spent=0.100, now=t + 60.0) == 9 + 34


def test_a_wait_after_time_lost_to_the_depth_deepens_by_the_batches_it_left_the_consumer_short_of():
    c = DepthController(depth=5)
    assert c.observe(waited=True, full=False, lost=True, short=3.2) == 9
    assert c.observe(waited=True, full=False, lost=True, short=0.2) == 10  # at least one
    assert c.observe(waited=True, full=False, lost=True, short=-1.0) == 11  # the workers outpace it: one
    assert c.observe(waited=True, full=False, lost=True, short=8, limit=12) == 12  # within the budget
    assert c.observe(waited=True, full=False, short=5.0) is None  # not after time lost: one wait says nothing


def test_workers_idle_for_the_depth_deepen_by_as_many_where_the_consumer_waits_for_them():
    c = DepthController(depth=13)
    t = 100.0
    assert c.observe(waited=False, full=False, now=t) is None
    # the consumer waits half its time, every worker busy as it asks (can_grow False)
    for i in range(1, 9):
        assert c.observe(waited=True, full=False, can_grow=False, spent=0.050, now=t + 0.1 * i) is None
    # three sat idle at once behind a slow batch since the last change
    assert c.observe(waited=True, full=False, can_grow=False, idle=3, spent=0.050, now=t + 0.9) == 16
    assert c.observe(waited=True, full=False, can_grow=False, idle=10, spent=0.050, now=t + 1.0, limit=20) == 20
    assert c.observe(waited=False, full=False, idle=3, now=t + 1.1) is None  # only a wait asks


def test_idle_workers_do_not_deepen_where_the_consumer_seldom_waits():
    c = DepthController(depth=4)
    t = 100.0
    assert c.observe(waited=False, full=False, now=t) is None
    # a wait of 2 ms every 100 ms: over the slack (0.5 %), far under the bound (10 %): the consumer is the slower
    for i in range(1, 40):
        assert c.observe(waited=True, full=False, can_grow=False, idle=2, spent=0.002, now=t + 0.1 * i) is None
    # then it waits 60 % of its time: after a few such requests the average passes the bound
    changes = [
        c.observe(waited=True, full=False, can_grow=False, idle=2, spent=0.060, now=t + 4.0 + 0.1 * i)
        for i in range(1, 9)
    ]
    assert changes[0] is None and 6 in changes


def test_idle_workers_in_the_first_requests_are_the_first_epoch_s_start_only():
    c = DepthController(depth=5, start=3, grow_after=4)
    assert [c.observe(waited=True, full=False, can_grow=False, idle=2) for _ in range(3)] == [None] * 3
    c.new_epoch()  # the workers are kept: a new epoch is no new start
    assert c.observe(waited=True, full=False, can_grow=False, idle=2) == 7


@pytest.mark.timeout(30)
def test_the_schedule_adds_up_the_worker_seconds_idle_for_the_depth_alone_while_the_consumer_waits():
    import threading
    import time

    from queuetune.prefetch.config import BatchSizes, EpochConfig
    from queuetune.prefetch.workers import ThreadWorkers

    sizes = BatchSizes()
    sizes.learn(100)
    release = threading.Event()

    def build(i):
        if i == 0:
            release.wait(10)  # the slow batch at the head
        else:
            time.sleep(0.01)
        return bytes(100)

    workers = ThreadWorkers(3, build)
    schedules = []
    try:
        for ordered in (True, False):
            config = EpochConfig(max_bytes=10_000, depth=3, max_depth=8, ordered=ordered, timeout=None)
            schedule = started(config, workers, sizes, schedules)
            assert schedule.wait_for([schedule.tasks[1]], 10) is not None
            assert schedule.wait_for([schedule.tasks[2]], 10) is not None
            time.sleep(0.1)
            # batches 1 and 2 built behind batch 0, nothing more may start: two workers idle,
            # but the consumer has not asked for batch 0 yet, so they cost it nothing
            assert schedule.idle.worker_seconds()[0] == 0
            with schedule.lock:
                schedule.idle.consumer_waits(True)  # it asks for batch 0
            time.sleep(0.3)
            idle, _ = schedule.idle.worker_seconds()
            assert idle >= 2 * 0.3  # counted for each worker, not once
            assert schedule.stalls.idle_workers() == (2 if ordered else None)
            schedule.idle.anew()
            assert schedule.idle.worker_seconds()[0] < idle
            release.set()
            assert schedule.wait_for([schedule.tasks[0]], 10) is not None
            release.clear()
    finally:
        release.set()
        for each in schedules:
            each.stopped = True
        workers.shutdown(wait=True, unclaimed=[])
    assert not [t for t in threading.enumerate() if t.name.startswith("queuetune-prefetch")]
