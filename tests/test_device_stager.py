"""The device stage's staging copy off the consumer's thread (issue 62): each batch
ahead is staged into its pinned buffers and its copy started on the stage's own
thread, the consumer's thread only taking host batches and waiting, at a
hand-over, for that batch's staging. With a stand-in whose staging is slow,
blocks or fails: every batch once, in order, bit for bit (the host's batch, a
shared-memory segment's view, kept until staged), within ``device_depth``,
``device_bytes`` and ``pinned_bytes``; a staging's error names its batch after
the batches before it; ``close()`` waits for the staging under way alone, gives
every buffer back and leaves no stage thread; with the stage off no thread starts."""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
from tests.helpers import assert_nothing_left_running  # noqa: E402
from tests.test_device_stage import (  # noqa: E402
    DTYPES,
    SETTINGS,
    Batches,
    CopyFailed,
    FakeTransfer,
    assert_clean,
    assert_same,
    largest,
    read_to_failure,
    substituted,
)

from queuetune import Prefetcher, PrefetcherClosed  # noqa: E402
from queuetune.prefetch.device import stager as stager_module  # noqa: E402
from queuetune.prefetch.device.pinned import PinnedPool  # noqa: E402
from queuetune.prefetch.device.settings import DeviceOptions  # noqa: E402
from queuetune.prefetch.device.stage import Flight, Stage  # noqa: E402
from queuetune.prefetch.device.stager import Entry, Stager  # noqa: E402
from queuetune.prefetch.device.transfer import HostTransfer  # noqa: E402

STAGE_THREAD = "queuetune-stage"


@pytest.fixture(autouse=True)
def _nothing_made() -> Any:
    FakeTransfer.made.clear()
    yield
    FakeTransfer.made.clear()


class SlowStage(FakeTransfer):
    """A stand-in whose staging (one call a leaf, numbered in order) sleeps
    ``delays[n % len(delays)]`` seconds before it reads the host's leaf, fails at
    call ``fail``, and at call ``block`` waits for ``gate`` (``inside`` is set
    then). It records the calls and the threads they ran on."""

    def __init__(self, delays: tuple[float, ...] = (0.0,), fail: int | None = None, block: int | None = None) -> None:
        super().__init__()
        self.delays, self.fail_at, self.block = delays, fail, block
        self.calls: list[int] = []
        self.threads: set[str] = set()
        self.starts: set[str] = set()
        self.inside, self.gate = threading.Event(), threading.Event()

    def stage(self, leaf: Any, buffer: Any) -> Any:
        n = len(self.calls)
        self.calls.append(n)
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delays[n % len(self.delays)])
        if n == self.block:
            self.inside.set()
            assert self.gate.wait(60), "the gate was never opened"
        if n == self.fail_at:
            raise CopyFailed(f"staging {n} failed")
        return super().stage(leaf, buffer)

    def start(self, staged: list[Any]) -> Any:
        self.starts.add(threading.current_thread().name)
        return super().start(staged)


def stage_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == STAGE_THREAD]


def flight_of(prefetcher: Prefetcher) -> Any:
    staging = prefetcher._kept.staging
    assert staging is not None and staging._flight is not None
    flight = staging._flight()
    assert flight is not None
    return flight


def open_gate_once_stopped(stager: Stager, transfer: SlowStage) -> None:
    """Open ``transfer``'s gate once ``stager`` is stopped (so that the staging
    under way ends only after the stop)."""
    deadline = time.monotonic() + 60
    while not stager.stopped and time.monotonic() < deadline:
        time.sleep(0.002)
    transfer.gate.set()


def open_once_stopped(prefetcher: Prefetcher, transfer: SlowStage) -> threading.Thread:
    """A thread that opens ``transfer``'s gate once the prefetcher's stager is stopped."""
    opener = threading.Thread(
        target=open_gate_once_stopped, args=(flight_of(prefetcher).stager, transfer), name="test-gate-opener"
    )
    opener.start()
    return opener


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_staging_copy_and_the_copys_start_run_on_the_stage_thread(mode: str) -> None:
    source = Batches(6, [500, 800], "float32", "dict")
    with substituted(lambda: SlowStage(delays=(0.001,))):
        p = Prefetcher(source, max_bytes="8MiB", workers=2, mode=mode, device="cuda", device_depth=3)
    try:
        for _epoch in range(2):
            for i, batch in enumerate(p):
                assert_same(batch, source[i])
                assert len(stage_threads()) == 1  # one a flight, while it runs
            assert stage_threads() == []  # the epoch read to its end: its thread ended
        (fake,) = FakeTransfer.made
        assert isinstance(fake, SlowStage)
        assert fake.threads == {STAGE_THREAD} and fake.starts == {STAGE_THREAD}
        assert threading.current_thread().name not in fake.threads
    finally:
        assert_clean(p)


@pytest.mark.timeout(300)
@SETTINGS
@given(
    source=st.builds(
        Batches,
        count=st.integers(1, 8),
        sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=4),
        dtype=st.sampled_from(DTYPES),
        form=st.sampled_from(["array", "dict", "tuple", "list"]),
    ),
    depth=st.integers(1, 4),
    budget=st.sampled_from([None, 1.0, 2.5]),
    delays=st.lists(st.sampled_from([0.0, 0.001, 0.004]), min_size=1, max_size=5).map(tuple),
    mode=st.sampled_from(["thread", "process"]),
)
def test_slow_stagings_keep_order_bytes_and_budgets(
    source: Batches, depth: int, budget: float | None, delays: tuple[float, ...], mode: str
) -> None:
    """Each staging reads the host's leaf only after its delay: in process mode a
    segment given back before its staging was done would be built into again."""
    most = largest(source)
    device_bytes = None if budget is None else max(1, int(most * budget))
    pinned = max(1 << 16, 4 * most)
    with substituted(lambda: SlowStage(delays=delays)):
        p = Prefetcher(
            source, max_bytes="2MiB", workers=2, mode=mode, device="cuda",
            device_depth=depth, device_bytes=device_bytes, pinned_bytes=pinned,
        )  # fmt: skip
    try:
        for _epoch in range(2):
            got = 0
            for i, batch in enumerate(p):
                assert_same(batch, source[i])
                got += 1
            assert got == len(source)
        (fake,) = FakeTransfer.made
        assert fake.most_in_flight <= depth
        if device_bytes is not None:
            assert fake.most_bytes <= device_bytes
        assert p._kept.staging.pool.peak <= pinned
    finally:
        assert_clean(p)


@pytest.mark.timeout(300)
@SETTINGS
@given(
    count=st.integers(1, 8),
    fail=st.integers(0, 7),
    depth=st.integers(1, 4),
    delay=st.sampled_from([0.0, 0.003]),
    mode=st.sampled_from(["thread", "process"]),
)
def test_a_staging_error_names_its_batch_after_the_batches_before_it(
    count: int, fail: int, depth: int, delay: float, mode: str
) -> None:
    source = Batches(count, [64, 300], "int32", "array")  # one leaf a batch: staging n is batch n's
    with substituted(lambda: SlowStage(delays=(delay,), fail=fail)):
        p = Prefetcher(source, max_bytes="8MiB", workers=2, mode=mode, device="cuda", device_depth=depth)
    try:
        read_to_failure(p, source, fail, count)
        fake = FakeTransfer.made[0]
        assert isinstance(fake, SlowStage)
        fake.fail_at = None
        assert len(list(p)) == count  # the next epoch, its stagings made afresh
    finally:
        assert_clean(p)


@pytest.mark.timeout(120)
def test_close_waits_for_the_staging_under_way_alone() -> None:
    """Batch 1's staging blocks until the stage is stopped, batches 2 and 3 queued
    behind it: closing the flight ends it, stages none of those queued, gives
    every buffer back and leaves no thread."""
    source = [np.full(100, i, dtype=np.int32) for i in range(10)]
    transfer = SlowStage(block=1)
    pool = PinnedPool(transfer.allocate, 1 << 16)
    flight = Flight(iter(source), transfer, pool, DeviceOptions("cuda", True, 4, None, 1 << 16))
    stage = Stage(flight)
    assert_same(next(stage), source[0])
    assert transfer.inside.wait(60)
    assert [entry.number for entry in flight.entries] == [1, 2, 3]
    assert [entry.number for entry in flight.stager.queued] == [2, 3]
    opener = threading.Thread(target=open_gate_once_stopped, args=(flight.stager, transfer), name="test-gate-opener")
    opener.start()
    stage.close()
    opener.join(60)
    assert transfer.calls == [0, 1]  # those queued behind the blocked one were never staged
    assert stage_threads() == []
    assert flight.entries == deque() and [len(shelf) for shelf in pool.spare.values()] == [4]  # each batch taken
    pool.close()
    assert pool.held == 0
    with pytest.raises(PrefetcherClosed):
        next(stage)
    assert transfer.calls == [0, 1]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_close_from_another_thread_wakes_a_consumer_waiting_for_a_staging(mode: str) -> None:
    source = Batches(10, [1000], "float64", "array")
    with substituted(lambda: SlowStage(block=1)):
        p = Prefetcher(source, max_bytes="8MiB", workers=2, mode=mode, device="cuda", device_depth=3)
    outcome: list[BaseException | int] = []

    def consume() -> None:
        count = 0
        try:
            for _batch in p:
                count += 1
        except PrefetcherClosed as error:
            outcome.append(error)
        outcome.append(count)

    reader = threading.Thread(target=consume, name="test-consumer")
    reader.start()
    opener = None
    try:
        while not FakeTransfer.made:
            time.sleep(0.002)
        fake = FakeTransfer.made[0]
        assert isinstance(fake, SlowStage)
        assert fake.inside.wait(60)
        opener = open_once_stopped(p, fake)
        p.close()
        reader.join(60)
        assert not reader.is_alive()
        assert isinstance(outcome[0], PrefetcherClosed) and outcome[-1] == 1
        assert fake.calls == [0, 1]
        assert p._kept.staging.pool.held == 0
        assert stage_threads() == []
    finally:
        for made in FakeTransfer.made:
            if isinstance(made, SlowStage):
                made.gate.set()
        if opener is not None:
            opener.join(60)
        reader.join(60)
        assert_clean(p)


@pytest.mark.timeout(300)
@SETTINGS
@given(
    count=st.integers(1, 8),
    read=st.integers(0, 8),
    depth=st.integers(1, 4),
    delays=st.lists(st.sampled_from([0.0, 0.002, 0.005]), min_size=1, max_size=3).map(tuple),
    mode=st.sampled_from(["thread", "process"]),
    how=st.sampled_from(["break", "resume"]),
)
def test_slow_stagings_break_and_resume_exactly_once(
    count: int, read: int, depth: int, delays: tuple[float, ...], mode: str, how: str
) -> None:
    read = min(read, count)
    source = Batches(count, [300], "int64", "array")
    expected = [source[i].tobytes() for i in range(count)]
    with substituted(lambda: SlowStage(delays=delays)):
        p = Prefetcher(source, max_bytes="1MiB", mode=mode, workers=2, device="cuda", device_depth=depth)
    try:
        it = iter(p)
        got = [next(it).tobytes() for _ in range(read)]
        if how == "break":
            del it  # a loop left with break
            assert [b.tobytes() for b in p] == expected  # the next epoch: every batch once
            return
        state = p.state_dict()
        p.close()
        with substituted(lambda: SlowStage(delays=delays)):
            resumed = Prefetcher(source, max_bytes="1MiB", mode=mode, device="cuda", device_depth=depth)
        try:
            resumed.load_state_dict(state)
            if read < count:
                got += [b.tobytes() for b in resumed]
            assert got == expected
            assert [b.tobytes() for b in resumed] == expected
        finally:
            assert_clean(resumed)
    finally:
        assert_clean(p)


@pytest.mark.timeout(60)
def test_close_from_the_stage_thread_itself_leaves_the_staging_under_way_to_it() -> None:
    """A finalizer that drops the flight may run on the stage thread (the garbage
    collector runs where it is triggered): the entry it stages is given back by
    that thread once staged, never while it still writes it."""
    closed: list[Entry | None] = []

    class Closing(HostTransfer):
        def stage(self, leaf: Any, buffer: Any) -> Any:
            closed.append(stager.close())
            assert pool.held > 0  # its buffer not given back under it
            return super().stage(leaf, buffer)

    transfer = Closing()
    pool = PinnedPool(transfer.allocate, 1 << 12)
    stager = Stager(transfer, pool)
    entry = Entry(0, leaves=[np.arange(8)], buffers=pool.take([64]) or [])
    stager.submit(entry)
    assert stager.thread is not None
    stager.thread.join(30)
    assert not stager.thread.is_alive()
    assert closed == [entry] and entry.error is None
    assert entry.copy is None and entry.buffers == []  # no copy started once stopped; its buffer given back
    assert [len(shelf) for shelf in pool.spare.values()] == [1]
    assert stager.wait(entry) is False  # stopped: never handed over
    pool.close()
    assert pool.held == 0


@pytest.mark.timeout(120)
def test_the_stage_off_starts_no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    original = stager_module.Stager.__init__

    def counting(self: Stager, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(stager_module.Stager, "__init__", counting)
    source = Batches(5, [100], "float32", "array")
    with Prefetcher(source, max_bytes="1MiB", workers=2) as p:
        for i, batch in enumerate(p):
            assert_same(batch, source[i])
            assert stage_threads() == []
    assert made == []
    with substituted(FakeTransfer), Prefetcher(source, max_bytes="1MiB", device="cuda") as p:
        assert len(list(p)) == 5
    assert len(made) == 1  # where the stage is on, the same count sees it
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_a_copy_started_on_the_stage_thread_runs_on_the_side_stream_and_is_waited_for_on_the_consumers() -> None:
    """CudaTransfer with torch's CUDA calls stood in for, each thread with a current
    stream of its own (as torch's is): the copies started on the stage thread run
    on the side stream, named explicitly, not on that thread's current stream; the
    consumer's current stream, on its own thread, waits on their event and is
    recorded on each tensor."""
    import contextlib
    from types import SimpleNamespace

    from queuetune.prefetch.device.cuda import CudaTransfer

    calls: list[tuple[str, str]] = []
    local = threading.local()

    class FakeStream:
        def __init__(self, name: str) -> None:
            self.name = name

        def wait_event(self, event: object) -> None:
            calls.append(("waits on the event", self.name))

    def current(device: object = None) -> FakeStream:
        stack = getattr(local, "stack", None)
        return stack[-1] if stack else FakeStream(f"default of {threading.current_thread().name}")

    @contextlib.contextmanager
    def on(stream: FakeStream) -> Any:
        local.stack = [*getattr(local, "stack", []), stream]
        try:
            yield
        finally:
            local.stack.pop()

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            pass

        def record(self, stream: FakeStream) -> None:
            calls.append(("event recorded", stream.name))

        def synchronize(self) -> None:
            calls.append(("event synchronised", threading.current_thread().name))

    class Tensor:
        def to(self, device: str, non_blocking: bool = False) -> Tensor:
            assert non_blocking
            calls.append(("copied", current().name))
            return Tensor()

        def record_stream(self, stream: FakeStream) -> None:
            calls.append(("recorded", stream.name))

    transfer = CudaTransfer.__new__(CudaTransfer)
    cuda = SimpleNamespace(stream=on, Event=Event, current_stream=current)
    transfer.torch, transfer.device, transfer.lends = SimpleNamespace(cuda=cuda), "cuda", False
    transfer.stream = FakeStream("side")
    started: list[Any] = []
    stage = threading.Thread(target=lambda: started.append(transfer.start([Tensor(), Tensor()])), name=STAGE_THREAD)
    stage.start()
    stage.join(30)
    leaves = started[0].ready()
    assert len(leaves) == 2
    consumer = f"default of {threading.current_thread().name}"
    assert calls == [
        ("event recorded", "side"),
        ("copied", "side"),
        ("copied", "side"),
        ("event recorded", "side"),
        ("waits on the event", consumer),
        ("recorded", consumer),
        ("recorded", consumer),
    ]


class TimedCopies(FakeTransfer):
    """A stand-in whose copies the device times: copy ``n`` took ``(n + 1)`` ms,
    and the device tells it only after ``polls`` looks that did not wait."""

    def __init__(self, polls: int) -> None:
        super().__init__()
        self.polls = polls

    def start(self, staged: list[Any]) -> Any:
        copy = super().start(staged)
        copy.timed, copy.looks = True, 0

        def elapsed(wait: bool) -> float | None:
            copy.looks += 1
            if not wait and copy.looks <= self.polls:
                return None
            return (copy.number + 1) / 1000

        copy.elapsed = elapsed
        return copy


@pytest.mark.timeout(300)
@SETTINGS
@given(
    count=st.integers(1, 8),
    polls=st.integers(0, 4),
    depth=st.integers(1, 3),
    cut=st.one_of(st.none(), st.integers(0, 7)),
    mode=st.sampled_from(["thread", "process"]),
)
def test_each_batch_handed_over_is_marked_once_in_order_with_the_time_its_device_gave(
    count: int, polls: int, depth: int, cut: int | None, mode: str
) -> None:
    """A copy's time is marked once the device has it: at a later hand-over, or as
    the epoch ends (read to its end, or broken off), waited for then."""
    source = Batches(count, [64], "float32", "array")
    with substituted(lambda: TimedCopies(polls)):
        p = Prefetcher(source, max_bytes="4MiB", workers=2, mode=mode, device="cuda", device_depth=depth)
    try:
        handed = 0
        for _ in p:
            handed += 1
            if cut is not None and handed > cut:
                break
        assert len(list(p)) == count  # a whole epoch after it
        marks = [m.value for m in p.trace().marks if m.kind == "device_copy"]
        assert [v["batch"] for v in marks] == [*range(handed), *range(count)]
        # Copies are numbered as they start: the epoch broken off started some it never handed over.
        assert all(v["copy"] is not None and v["copy"] > 0 for v in marks)
        assert all(v["staging"] >= 0 for v in marks)
        device = p.report().device
        assert device is not None and device.copy_median_seconds is not None
        assert device.copy_max_seconds == max(v["copy"] for v in marks)
        assert device.staging_median_seconds is not None
    finally:
        assert_clean(p)
