"""Process mode's shared-memory segments: batches built in reused segments, handed
over as views, never overwritten while a view of them is alive, and no file left."""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

from helpers import assert_nothing_left_running
from queuetune import Prefetcher
from queuetune.analysis.report import analyze
from queuetune.common.units import format_bytes
from queuetune.prefetch import shm, workers
from queuetune.prefetch.errors import PrefetcherClosed, WorkerDied
from queuetune.record.recorder import Channel
from queuetune.record.trace import Trace
from queuetune.render.text import report_rows

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")

SAMPLE = 32 * 1024  # float32 values: 128 KiB a sample, above shm.MIN_BYTES


def files(prefix: str = "") -> list[str]:
    return sorted(p.name for p in shm.files.ROOT.glob(f"{prefix or f'queuetune-{os.getpid()}-'}*"))


def segments(prefix: str) -> list[str]:
    """The pool's segments: its files but its lock file."""
    return [name for name in files(prefix) if name != f"{prefix}lock"]


class Samples:
    """Sample i: SAMPLE float32 values, all i, and its label i (numpy or torch)."""

    def __init__(self, n: int, kind: str = "numpy") -> None:
        self.n, self.kind = n, kind

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        x = np.full(SAMPLE, float(i), dtype=np.float32)
        if self.kind == "torch":
            import torch

            return torch.from_numpy(x), i
        return x, i


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["numpy", pytest.param("torch", marks=pytest.mark.torch)])
def test_batches_come_in_reused_segments_and_a_kept_batch_is_never_overwritten(kind, monkeypatch):
    batch, depth, n = 4, 3, 40
    kept = []
    made = []  # the segments the workers made, as this process adopts each
    adopt = shm.ledger.Ledger.adopt

    def adopted(self, name):
        if name not in self.maps:
            made.append(name)
        return adopt(self, name)

    monkeypatch.setattr(shm.ledger.Ledger, "adopt", adopted)
    with Prefetcher(
        Samples(batch * n, kind),
        batch_size=batch,
        mode="process",
        workers=2,
        adaptive=False,
        depth=depth,
        max_bytes="64MiB",
    ) as p:
        for position, (x, y) in enumerate(p):
            assert type(x).__module__.split(".")[0] == ("torch" if kind == "torch" else "numpy")
            assert x.shape == (batch, SAMPLE)
            assert [int(v) for v in y] == list(range(position * batch, (position + 1) * batch))
            if position % 10 == 0:
                kept.append((position, x))  # held on to: its segment must not be lent again
            del x, y
        gc.collect()
    for position, x in kept:
        values = np.asarray(x)
        expected = np.repeat(np.arange(position * batch, (position + 1) * batch, dtype=np.float32), SAMPLE)
        assert np.array_equal(values.reshape(-1), expected)
    # 40 batches in fewer segments. The working set is the depth, the batches kept, the
    # spares and the batch the consumer holds while the next is started (11 here); a
    # worker that finds the shelf empty makes one more, as a busy machine's timing may
    # have it (11 to 16 were made in runs on 2 cores, busy or not), so the bound is
    # loose, but below a segment a batch.
    assert len(made) == len(set(made)) and depth + len(kept) <= len(made) <= 3 * n // 4
    assert files() == []
    del kept
    assert_nothing_left_running()


@pytest.mark.timeout(120)
def test_batches_that_grow_and_shrink_and_a_collate_fn_of_ones_own_arrive_whole():
    sizes = [1, 8, 2, 16, 3, 16, 1]  # samples a batch: more than the lent segment holds spills into a new one

    class Uneven:
        def __len__(self):
            return len(sizes)

        def __getitem__(self, i):
            return {"x": np.full((sizes[i], SAMPLE), float(i), dtype=np.float32), "i": i}

    with Prefetcher(Uneven(), mode="process", workers=2, adaptive=False, depth=3, max_bytes="64MiB") as p:
        got = [(int(b["i"]), b["x"].shape[0], float(b["x"].min()), float(b["x"].max())) for b in p]
    assert got == [(i, s, float(i), float(i)) for i, s in enumerate(sizes)]

    def pairs(items):  # a collate_fn of the user's own: its arrays are copied into the segment
        return np.concatenate([x for x, _ in items]), [y for _, y in items]

    with Prefetcher(Samples(12), batch_size=3, collate_fn=pairs, mode="process", workers=2, max_bytes="64MiB") as p:
        got = [(x.reshape(3, SAMPLE)[:, 0].tolist(), y, isinstance(x.base, ctypes.Array)) for x, y in p]
    assert got == [([3.0 * b, 3.0 * b + 1, 3.0 * b + 2], [3 * b, 3 * b + 1, 3 * b + 2], True) for b in range(4)]
    assert files() == []
    assert_nothing_left_running()


def built(pool: shm.Pool, value: float, size: int = 200_000) -> shm.Shipped:
    """A batch of ``size`` bytes built under the pool's next lease and settled, as a worker's would be."""
    lease = pool.lend(size)
    shipped = shm.ship(np.full(size // 4, value, dtype=np.float32), lease, pool.shelf)
    pool.settle(shipped, lease)
    return shipped


def test_a_pool_shelves_few_spares_and_tells_workers_what_it_dropped():
    pool = shm.Pool(os.getpid(), least=shm.SPARE)
    try:
        batches = [built(pool, i) for i in range(5)]  # the shelf is empty: five new segments
        names = [b.segments().pop() for b in batches]
        assert len(set(names)) == 5 and segments(pool.prefix) == sorted(names)
        assert f"{pool.prefix}lock" in files(pool.prefix)
        opened = [pool.open(b) for b in batches]
        assert pool.held() == 5 and [int(a[0]) for a in opened] == [0, 1, 2, 3, 4]
        del opened
        gc.collect()
        assert pool.held() == 0 and len(pool.shelf.names()) == shm.SPARE  # the others were removed
        lease = pool.lend(200_000)
        assert len(segments(pool.prefix)) == shm.SPARE and len(lease.dropped) == 5 - shm.SPARE
        taken = shm.ship(np.ones(50_000, dtype=np.float32), lease, pool.shelf)
        assert taken.lent in pool.shelf.names() | set(names) and taken.lent not in lease.dropped
        assert taken.made == {} and pool.held() == 0  # taken by a build, not settled yet
        pool.settle(taken, lease)
        assert pool.held() == 1
        unused = pool.lend(200_000)
        small = shm.ship([1, 2], unused, pool.shelf)  # nothing large: no segment taken
        assert small.lent is None and small.made == {}
    finally:
        pool.close()
    assert files(pool.prefix) == []


def test_a_pool_keeps_a_second_spare_only_while_its_workers_miss_it():
    pool = shm.Pool(os.getpid())  # from 1 to SPARE spares
    try:
        batches = [built(pool, i) for i in range(3)]
        for b in batches:
            pool.discard(b)
        assert pool.held() == 0 and len(pool.shelf.names()) == 1 == pool.wanted  # two removed: one is wanted
        a, b = pool.lend(200_000), pool.lend(200_000)
        first = shm.ship(np.ones(50_000, dtype=np.float32), a, pool.shelf)
        second = shm.ship(np.ones(50_000, dtype=np.float32), b, pool.shelf)  # the shelf is empty: made anew
        assert first.lent is not None and second.lent is None and second.made
        pool.settle(first, a)
        pool.settle(second, b)  # made soon after one was removed: a miss
        assert pool.wanted == 2
        for shipped in (first, second):
            pool.discard(shipped)
        assert pool.held() == 0 and len(pool.shelf.names()) == 2
        for i in range(shm.CALM):  # builds that find a spare, taken and given back each time
            again = built(pool, i)
            assert again.lent is not None and not again.made
            pool.discard(again)
        assert pool.held() == 0 and pool.wanted == 1 and len(pool.shelf.names()) == 1
    finally:
        pool.close()
    assert files(pool.prefix) == []


def test_every_segment_and_every_grant_count_against_the_budget():
    size = shm.segments.rounded(200_000)
    pool = shm.Pool(os.getpid(), budget=3 * size, least=shm.SPARE)
    try:
        assert pool.room(200_000) and pool.lend(200_000).grant == size and pool.committed == size
        pool = shm.Pool(os.getpid(), budget=3 * size, least=shm.SPARE)
        batches = [built(pool, i) for i in range(3)]
        assert pool.bytes == pool.committed == 3 * size and pool.held() == 3
        assert not pool.room(200_000) and not pool.make_room(200_000)  # three batches fill it
        lease = pool.lend(200_000)
        assert lease.grant == 0  # no room: this batch's arrays come through the pipe
        piped = shm.ship(np.full(50_000, 3.0, dtype=np.float32), lease, pool.shelf)
        assert piped.segments() == set() and piped.made == {} and piped.shared == 0
        pool.settle(piped, lease)
        assert float(pool.open(piped).sum()) == 150_000 and pool.committed == 3 * size
        opened = [pool.open(b) for b in batches[:2]]  # handed over and in use: still held, still counted
        assert pool.committed == 3 * size and pool.held() == 3
        del opened
        gc.collect()
        # let go of: two spares, still in the pool's files, so in the budget
        assert pool.held() == 1 and len(pool.shelf.names()) == 2 and pool.bytes == 3 * size
        assert pool.room(200_000) and pool.make_room(200_000)  # a spare is removed for the grant
        assert len(pool.shelf.names()) == 1 and pool.bytes == 2 * size
        lease = pool.lend(200_000)
        assert lease.grant == size and pool.committed == 3 * size
        taken = shm.ship(np.ones(50_000, dtype=np.float32), lease, pool.shelf)  # takes the spare
        assert taken.lent is not None and taken.made == {}
        assert pool.make_room(200_000)  # the grant it forfeited is room again
        pool.settle(taken, lease)
        assert pool.committed == pool.bytes == 2 * size
        pool.discard(batches[2])  # never to be handed over: a spare again
        assert pool.held() == 1 and pool.committed <= 3 * size
    finally:
        pool.close()
    assert files(pool.prefix) == [] and pool.bytes == pool.committed == 0


def test_a_spare_segment_of_a_size_the_batches_no_longer_take_is_dropped():
    pool = shm.Pool(os.getpid())
    try:
        big = built(pool, 1, 250_000)  # as while the size is guessed, with a margin
        pool.discard(big)
        small = built(pool, 2, 200_000)  # the whole batch known: a spare a quarter larger is not taken
        assert small.lent is None and small.made
        pool.discard(small)  # the spare, a size the batches no longer take, is removed as this one is shelved
        assert pool.held() == 0 and big.segments().pop() not in segments(pool.prefix)
        fitting = small
        close = built(pool, 4, 190_000)  # within an eighth: the spare fits and is taken again
        assert close.lent == fitting.segments().pop()
        pool.discard(close)
        larger = built(pool, 5, 300_000)  # batches grew: the spare is too small, a new segment is made
        assert larger.lent is None and larger.made
        lease = pool.lend(300_000)  # and the spare, a size the batches no longer take, is dropped
        assert pool.shelf.names() == set() and close.lent in lease.dropped
    finally:
        pool.close()


@pytest.mark.timeout(120)
def test_the_shared_memory_a_prefetcher_keeps_stays_within_its_budget_and_is_reported():
    batch = 8  # 1 MiB a batch
    budget = 6 * batch * SAMPLE * 4
    seen = []
    with Prefetcher(Samples(batch * 30), batch_size=batch, mode="process", workers=4, max_bytes=budget) as p:
        for _ in range(2):
            for x, _label in p:
                seen.append(p._epoch.workers.pool_bytes())
                del x
        report = p.report()
        saved = p.trace().to_json()
    # Every segment, the batch the step holds and the spare ones too, within the budget.
    assert len(seen) == 60 and 0 < max(seen) <= budget
    assert report.peak_pool_bytes == max(seen)
    assert analyze(Trace.from_json(saved)).peak_pool_bytes == max(seen)  # the marks are in the saved trace
    shown = dict(report_rows(report))["shared-memory pool (peak)"]
    assert shown.startswith(f"{format_bytes(max(seen))} of max_bytes={format_bytes(budget)}")
    assert report.to_dict()["peak_pool_bytes"] == max(seen)
    assert files() == []
    assert_nothing_left_running()


class SlowSecond(Samples):
    """As Samples, but the second sample of each batch after the first sleeps
    ``seconds``: its batch is being built, one sample of it joined in, meanwhile."""

    def __init__(self, n: int, batch: int, seconds: float) -> None:
        super().__init__(n)
        self.batch, self.seconds = batch, seconds

    def __getitem__(self, i: int):
        if i >= self.batch and i % self.batch == 1:
            time.sleep(self.seconds)
        return super().__getitem__(i)


def allocated(prefix: str) -> int:
    """The bytes of memory the pool's files take (blocks allocated, not their sizes)."""
    return sum(path.stat().st_blocks * 512 for path in shm.files.ROOT.glob(f"{prefix}*"))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["numpy", pytest.param("torch", marks=pytest.mark.torch)])
def test_a_batch_takes_memory_as_its_samples_are_joined_in_not_as_its_build_starts(kind):
    """Each sample is joined into its batch's segment as it is built, and the
    segment's memory is taken part by part: a worker holds neither every sample
    of its batch at once nor a whole batch's memory while it builds the first."""
    if kind == "torch":
        pytest.importorskip("torch")
    batch = 8
    size = batch * SAMPLE * 4  # 1 MiB
    source = SlowSecond(batch * 6, batch, 2.0)
    source.kind = kind
    with Prefetcher(source, batch_size=batch, mode="process", workers=4, max_bytes="64MiB") as p:
        got = []
        for position, (x, y) in enumerate(p):
            if position == 0:
                # The next batches are being built (one a worker), each asleep on its second
                # sample: one sample of each is in its segment; the first batch, handed over,
                # whole in its own.
                pool = p._epoch.workers.segments
                building = p._epoch.schedule.building
                assert building == 4 and len(segments(pool.prefix)) == 1 + building
                assert allocated(pool.prefix) <= size + building * (SAMPLE * 4 + 2 * shm.segments.PAGE)
            got.append([int(v) for v in y])
            del x, y
    assert got == [list(range(b * batch, (b + 1) * batch)) for b in range(6)]
    assert files() == []
    assert_nothing_left_running()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["numpy", pytest.param("torch", marks=pytest.mark.torch)])
def test_the_first_batch_is_collated_in_shared_memory_as_the_others_are(kind, monkeypatch, tmp_path):
    """The first batch waits for its size to be guessed from one sample, so it is
    stacked in the segment lent for it: not built in its worker's own memory and
    copied, which leaves that worker's allocator holding as much for good."""
    send = workers.Shipper.send

    def counted(self, shipped, copies, behind):  # in the worker processes: each copy leaves a file
        for _ in copies:
            (tmp_path / f"{os.getpid()}-{time.monotonic_ns()}").touch()
        return send(self, shipped, copies, behind)

    monkeypatch.setattr(workers.Shipper, "send", counted)
    with Prefetcher(Samples(32, kind), batch_size=8, mode="process", workers=2, max_bytes="64MiB") as p:
        for _ in range(2):
            got = [[int(v) for v in y] for _, y in p]
            assert got == [list(range(b * 8, (b + 1) * 8)) for b in range(4)]
    assert list(tmp_path.iterdir()) == []
    assert files() == []
    assert_nothing_left_running()


def test_a_batch_prepared_as_it_settles_is_handed_over_as_those_views():
    size = shm.segments.rounded(200_000)
    pool = shm.Pool(os.getpid(), budget=2 * size)
    try:
        shipped = built(pool, 7)
        pool.prepare(shipped)
        assert shipped.views is not None
        prepared = shipped.views[0]
        x = pool.open(shipped)
        assert x is prepared and shipped.views is None and float(x.sum()) == 7 * 50_000
        assert pool.held() == 1  # its segment stays out while the batch lives
        del x, prepared
        gc.collect()
        assert pool.held() == 0 and len(pool.shelf.names()) == 1
    finally:
        pool.close()
    assert files(pool.prefix) == []


def test_a_prepared_batch_that_is_discarded_gives_its_segment_back_once():
    pool = shm.Pool(os.getpid())
    try:
        old = built(pool, 1)
        pool.prepare(old)
        pool.discard(old)  # never handed over: its segment goes back now, not when `old` goes
        assert pool.held() == 0 and pool.shelf.names() == old.segments()
        new = built(pool, 2)
        assert new.segments() == old.segments()  # the next build took it
        del old
        gc.collect()
        assert pool.held() == 1 and pool.shelf.names() == set()  # not given back a second time
        assert float(pool.open(new).sum()) == 2 * 50_000
    finally:
        pool.close()
    assert files(pool.prefix) == []


def test_a_batch_that_cannot_be_prepared_gives_nothing_back_and_is_opened_at_the_hand_over(monkeypatch):
    pool = shm.Pool(os.getpid())
    try:
        shipped = built(pool, 3, 400_000)
        shipped.batch = (shipped.batch, shipped.batch)  # two views of one segment
        laid_out = shm.packing.laid_out
        calls = []

        def second_fails(buffer, piece):
            calls.append(piece)
            if len(calls) == 2:
                raise ValueError("cannot view")
            return laid_out(buffer, piece)

        monkeypatch.setattr(shm.packing, "laid_out", second_fails)
        pool.prepare(shipped)
        gc.collect()
        assert shipped.views is None and len(calls) == 2
        assert pool.held() == 1 and pool.shelf.names() == set()  # the first view's holder gave nothing back
        monkeypatch.setattr(shm.packing, "laid_out", laid_out)
        x, y = pool.open(shipped)
        assert float(x.sum()) == float(y.sum()) == 3 * 100_000
    finally:
        pool.close()
    assert files(pool.prefix) == []


@pytest.mark.timeout(60)
def test_process_workers_make_a_batchs_arrays_as_its_build_settles():
    channel = Channel(list().append, processes=True)
    source = [np.full(100_000, float(i)) for i in range(3)]
    pool = workers.ProcessWorkers(1, source, None, None, channel, multiprocessing.get_context("fork"))
    try:
        sent = pool.submit(2).result(timeout=30)
        deadline = time.monotonic() + 10
        while sent.views is None and time.monotonic() < deadline:  # the callbacks run just after the result is set
            time.sleep(0.01)
        assert sent.views is not None
        assert float(pool.adopt(sent).sum()) == 200_000.0 and sent.views is None
    finally:
        pool.shutdown(wait=True, unclaimed=[])
        channel.close()
    assert files() == []
    assert_nothing_left_running()


def test_a_view_outlives_the_pool_and_its_file():
    pool = shm.Pool(os.getpid())
    lease = pool.lend(100_000)
    shipped = shm.ship(np.arange(20_000.0), lease)
    pool.settle(shipped, lease)
    x = pool.open(shipped)
    pool.close()
    assert files(pool.prefix) == []
    assert x[-1] == 19_999.0 and x.sum() == sum(range(20_000))


def test_allocate_places_arrays_in_the_lent_segment_only_while_building():
    pool = shm.Pool(os.getpid())
    try:
        lease = pool.lend(500_000)
        with shm.building(lease) as arena:
            inside = shm.allocate((100, 1000), np.float32)  # a segment sized for the 500,000 bytes expected
            small = shm.allocate((10,), np.float32)  # under MIN_BYTES: not shared
            too_big = shm.allocate((1000, 1000), np.float32)  # no room left
        assert inside is not None and small is None and too_big is None
        assert shm.allocate((100, 1000), np.float32) is None  # not building any more
        inside[...] = 7
        shipped = arena.ship((inside, np.ones(50_000, dtype=np.float32)))
        # the second array did not fit in the segment, and the grant had no room left for another
        first, second = shipped.batch
        assert first.name == arena.name and isinstance(second, np.ndarray)
        assert shipped.nbytes == 400_000 + 200_000 and shipped.shared == 400_000
        assert shipped.segments() == {first.name}
        pool.settle(shipped, lease)
        x, y = pool.open(shipped)
        assert float(x.sum()) == 7 * 100_000 and float(y.sum()) == 50_000
        lease = pool.lend(1_000_000)  # room granted for more than the first segment takes
        with shm.building(lease) as arena:
            inside = shm.allocate((100, 1000), np.float32)
        inside[...] = 8
        spilled = arena.ship((inside, np.ones(50_000, dtype=np.float32)))
        first, second = spilled.batch  # the second did not fit: a segment of its own, within the grant
        assert first.name == arena.name and second.name.startswith(pool.prefix) and second.name != arena.name
        assert sum(spilled.made.values()) <= lease.grant and spilled.shared == 600_000
        pool.settle(spilled, lease)
        x, y = pool.open(spilled)
        assert float(x.sum()) == 8 * 100_000 and float(y.sum()) == 50_000
    finally:
        pool.close()
    assert files(pool.prefix) == []


@pytest.mark.timeout(120)
def test_closing_one_prefetcher_leaves_another_ones_segments_alone():
    """A training and a validation loader in one process: the first closed (or
    collected) mid-way through the second's epoch takes none of its files."""
    second = Prefetcher(Samples(48), batch_size=4, mode="process", workers=2, max_bytes="64MiB")
    got = []
    try:
        iterator = iter(second)
        for _ in range(3):
            got.append(next(iterator)[1].tolist())
        with Prefetcher(Samples(24), batch_size=4, mode="process", workers=2, max_bytes="64MiB") as first:
            assert len(list(first)) == 6
        for x, y in iterator:
            assert float(x[0, 0]) == float(y[0])
            got.append(y.tolist())
    finally:
        second.close()
    assert got == [list(range(i, i + 4)) for i in range(0, 48, 4)]
    assert files() == []
    assert_nothing_left_running()


# --- copies made behind the worker's next build ---------------------------------------------

WHOLE = 2 * workers.BEHIND // 4  # float32 values: a whole batch of 2 MiB, copied behind the next build


class Whole:
    """Item i: a whole batch, a new array of WHOLE values all i (``grow``: 1 to 3
    times as many, so that some spill past the lent segment into a new one;
    ``tensor``: a new torch tensor), and i."""

    def __init__(self, n: int, grow: bool = False, tensor: bool = False) -> None:
        self.n, self.grow, self.tensor = n, grow, tensor

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        size = WHOLE * (1 + i % 3 if self.grow else 1)
        if self.tensor:
            import torch

            return torch.full((size,), float(i)), i
        return np.full(size, float(i), dtype=np.float32), i


def copy_in_ship_thread(monkeypatch, then):
    """Make every copy in a forked worker's ship thread call ``then(copies)`` first."""
    original = shm.copy

    def copy(copies):
        if threading.current_thread().name == "queuetune-ship":
            then(copies)
        original(copies)

    monkeypatch.setattr(shm, "copy", copy)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("ordered", "grow", "tensor"),
    [(True, False, False), (False, False, False), (True, True, False), (True, False, True)],
)
def test_a_copy_made_behind_the_next_build_is_waited_for_before_the_batch_is_opened(monkeypatch, ordered, grow, tensor):
    if tensor:
        pytest.importorskip("torch")
    copy_in_ship_thread(monkeypatch, lambda copies: time.sleep(0.05))  # slow: the batch arrives first
    seen = []
    finish = workers.ProcessWorkers.finish

    def spy(self, batch, until=None):
        seen.append(batch.pending)
        return finish(self, batch, until)

    monkeypatch.setattr(workers.ProcessWorkers, "finish", spy)
    n = 24
    with Prefetcher(
        Whole(n, grow, tensor),
        mode="process",
        workers=2,
        adaptive=False,
        depth=4,
        ordered=ordered,
        max_bytes="256MiB",
        multiprocessing_context="fork",
    ) as p:
        got, sizes = [], []
        for x, i in p:
            got.append((i, float(x.min()), float(x.max())))
            sizes.append((i, len(x)))
    assert sorted(got) == [(i, float(i), float(i)) for i in range(n)]
    assert all(size == WHOLE * (1 + i % 3 if grow else 1) for i, size in sizes)
    if ordered:
        assert [i for i, _, _ in got] == list(range(n))
    # Every batch was copied behind a build, each worker numbering its copies from 0 in the
    # order it made them; growing, but those started before the growth was seen (as deep as the
    # depth), which outgrew the room granted to them and came through the pipe.
    pending = [seen_ for seen_ in seen if seen_ is not None]
    assert len(pending) >= n - (4 if grow else 1)
    for slot in {slot for slot, _ in pending}:
        numbers = sorted(number for s, number in pending if s == slot)
        assert numbers == list(range(len(numbers)))
    assert files() == []
    assert_nothing_left_running()


class Reused:
    """Item i: a whole batch all i, written over memory the source keeps and
    changes at its next item, in one of several ways (``how``)."""

    def __init__(self, n: int, how: str) -> None:
        self.n, self.how = n, how
        self.array = np.zeros(WHOLE + 8, dtype=np.float32)
        self.cached = (np.zeros(WHOLE, dtype=np.float32), -1)  # its array held through the tuple alone
        if how.startswith("tensor"):
            import torch

            self.tensor = torch.zeros(WHOLE + 8)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.how == "array":
            self.array[:] = i
            return self.array, i
        if self.how == "cached tuple":
            self.cached[0][:] = i
            return self.cached
        if self.how == "array view":
            self.array[:] = i
            return self.array[8:], i
        import torch

        if self.how == "tensor":
            self.tensor.fill_(i)
            return self.tensor, i
        if self.how == "tensor view":
            self.tensor.fill_(i)
            return self.tensor[8:], i
        assert self.how == "tensor over an array"
        self.array[:] = i
        return torch.from_numpy(self.array), i


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "how", ["array", "cached tuple", "array view", "tensor", "tensor view", "tensor over an array"]
)
def test_memory_the_source_keeps_is_copied_before_it_builds_again(monkeypatch, how):
    """A source that reuses its output's memory changes it at its next item: a copy
    from it cannot wait behind that build, however large."""
    if how.startswith("tensor"):
        pytest.importorskip("torch")
    copy_in_ship_thread(monkeypatch, lambda copies: time.sleep(0.05))  # were one deferred, the next build would win
    n = 16
    with Prefetcher(
        Reused(n, how),
        mode="process",
        workers=1,
        adaptive=False,
        depth=4,
        max_bytes="256MiB",
        multiprocessing_context="fork",
        sample_memory=False,
    ) as p:
        got = [(float(x.min()), float(x.max())) for x, _ in p]
    assert got == [(float(i), float(i)) for i in range(n)]
    assert files() == []
    assert_nothing_left_running()


@pytest.mark.timeout(120)
def test_a_collate_fn_that_returns_part_of_the_stacked_batch_is_copied_before_its_segment_is_lent_again(
    monkeypatch,
):
    """The view's memory lies in the segment lent for the batch, which goes back to
    the pool once the batch is sent: another build may be stacked into it."""
    torch = pytest.importorskip("torch")
    from queuetune.frameworks.torch.tensors import collate

    copy_in_ship_thread(monkeypatch, lambda copies: time.sleep(0.3))

    class Samples:
        def __len__(self) -> int:
            return 128

        def __getitem__(self, i: int):
            return torch.full((256, 1024), float(i))  # 1 MiB

    def tail(items):
        stacked = collate(items, shm.allocate)  # into the lent segment
        # Every other batch: its last 6 samples, 6 MiB that go to a new segment,
        # while the plain batches between them let the lent one go to new builds.
        return stacked[2:] if int(items[0][0, 0]) // 8 % 2 else stacked

    with Prefetcher(
        Samples(),
        batch_size=8,
        collate_fn=tail,
        mode="process",
        workers=2,
        adaptive=False,
        depth=4,
        max_bytes="512MiB",
        multiprocessing_context="fork",
        sample_memory=False,
    ) as p:
        got = [x[:, 0, 0].tolist() for x in p]
    assert got == [[float(8 * b + k) for k in range(2 if b % 2 else 0, 8)] for b in range(16)]
    assert files() == []
    assert_nothing_left_running()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["killed", "raises"])
def test_a_worker_that_dies_while_copying_behind_a_build_is_a_clear_error(monkeypatch, how):
    def die(copies):
        if how == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        raise MemoryError("no room for the copy")

    copy_in_ship_thread(monkeypatch, die)
    with Prefetcher(
        Whole(12), mode="process", workers=1, max_bytes="256MiB", multiprocessing_context="fork", sample_memory=False
    ) as p:
        with pytest.raises(WorkerDied, match="killed by SIGKILL" if how == "killed" else "exit code 1"):
            list(p)
    assert files() == []
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_a_copy_that_outlasts_the_timeout_is_a_timeout_error_and_nothing_is_left(monkeypatch):
    """The timeout covers the whole request: the build and the copy behind it."""
    copy_in_ship_thread(monkeypatch, lambda copies: time.sleep(3600))
    with Prefetcher(
        Whole(6),
        mode="process",
        workers=1,
        max_bytes="256MiB",
        timeout=1.0,
        multiprocessing_context="fork",
        sample_memory=False,
    ) as p:
        with pytest.raises(TimeoutError, match=r"batch 0 of the epoch \(index 0\) was not ready within timeout=1 s"):
            next(iter(p))
    assert files() == []
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_close_from_another_thread_wakes_a_consumer_waiting_for_a_copy(monkeypatch):
    copy_in_ship_thread(monkeypatch, lambda copies: time.sleep(3600))
    waiting = threading.Event()
    finish = workers.ProcessWorkers.finish

    def spy(self, batch, until=None):
        waiting.set()
        return finish(self, batch, until)

    monkeypatch.setattr(workers.ProcessWorkers, "finish", spy)
    p = Prefetcher(Whole(6), mode="process", workers=1, max_bytes="256MiB", multiprocessing_context="fork")
    raised = []

    def consume():
        try:
            next(iter(p))
        except BaseException as exc:
            raised.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert waiting.wait(30)
    p.close()
    consumer.join(30)
    assert not consumer.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], PrefetcherClosed), raised
    assert files() == []
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_a_large_batch_that_cannot_be_sent_back_fails_clearly_and_its_segment_is_not_lent_again(monkeypatch):
    """Its copy is under way when the pool fails to send it: the segment it is
    copied into must not carry another batch meanwhile."""
    copy_in_ship_thread(monkeypatch, lambda copies: time.sleep(0.2))
    settled = []
    settle = shm.Pool.settle

    def spy(self, shipped, lease):
        settled.append(shipped is not None)
        return settle(self, shipped, lease)

    monkeypatch.setattr(shm.Pool, "settle", spy)

    class Locked(Whole):
        def __getitem__(self, i: int):
            x, i = super().__getitem__(i)
            return x, threading.Lock() if i == 2 else i

    got = []
    with Prefetcher(
        Locked(8),
        mode="process",
        workers=1,
        depth=1,
        adaptive=False,
        max_bytes="256MiB",
        multiprocessing_context="fork",
    ) as p:
        with pytest.raises(TypeError, match=r"batch 2 of the epoch .*could not be sent back"):
            for x, i in p:
                got.append((i, float(x.min()), float(x.max())))
    assert got == [(0, 0.0, 0.0), (1, 1.0, 1.0)]
    assert len(settled) == 2  # batches 0 and 1; batch 2's lease never came back
    assert files() == []
    assert_nothing_left_running()


def test_unshared_names_only_memory_that_nothing_but_the_batch_reaches():
    kept = np.ones(10)

    def ids(make):
        batch = make()
        refs = sys.getrefcount(batch)
        found = shm.unshared(batch, refs)
        leaves = []
        shm.packing.replace(batch, lambda leaf: leaves.append(leaf) or leaf)
        return [id(leaf) in found for leaf in leaves if isinstance(leaf, np.ndarray) or hasattr(leaf, "numel")]

    assert ids(lambda: np.ones(10)) == [True]
    assert ids(lambda: (np.ones(10), 7)) == [True]
    assert ids(lambda: {"x": [np.ones(10), np.ones(3)[1:]], "y": kept}) == [True, False, False]
    assert ids(lambda: (kept, np.ones(10))) == [False, True]
    assert ids(lambda: kept) == [False]
    assert ids(lambda: np.frombuffer(bytearray(80))) == [False]
    twice = np.ones(10)
    assert ids(lambda: (twice, twice)) == [False, False]
    held = (np.ones(10), 1)
    assert ids(lambda: held) == [False]
    torch = pytest.importorskip("torch")
    base = torch.zeros(10)
    assert ids(lambda: (torch.zeros(10), base, base[2:], torch.from_numpy(np.ones(10)))) == [True, False, False, False]


@pytest.mark.timeout(60)
def test_a_ship_thread_that_cannot_start_leaves_nothing_numbered_or_awaited(monkeypatch):
    done = threading.Semaphore(0)
    shipper = workers.Shipper(0, done)
    large = np.zeros(workers.BEHIND // 8)

    def refuse(self):
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refuse)
        shipped = shm.Shipped(None, None, {}, large.nbytes)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            shipper.send(shipped, [(large, np.ones(large.size))], behind=True)
        assert shipped.pending is None and shipper.sent == 0
    try:
        shipped = shm.Shipped(None, None, {}, large.nbytes)
        shipper.send(shipped, [(large, np.ones(large.size))], behind=True)  # neither blocks nor skips a number
        assert shipped.pending == (0, 0)
        assert done.acquire(timeout=10) and float(large.sum()) == large.size
    finally:
        shipper.close()
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_a_copy_the_source_may_change_is_made_at_once_however_large():
    shipper = workers.Shipper(0, threading.Semaphore(0))
    large = np.zeros(workers.BEHIND // 8)
    shipped = shm.Shipped(None, None, {}, large.nbytes)
    shipper.send(shipped, [(large, np.ones(large.size))], behind=False)
    assert shipped.pending is None and float(large.sum()) == large.size
    assert shipper._thread is None


@pytest.mark.timeout(60)
def test_only_a_large_copy_goes_behind_the_next_build():
    done = threading.Semaphore(0)
    shipper = workers.Shipper(3, done)
    try:
        small = np.zeros(workers.BEHIND // 8 - 1)
        shipped = shm.Shipped(None, None, {}, small.nbytes)
        shipper.send(shipped, [(small, np.ones(small.size))], behind=True)
        assert shipped.pending is None and float(small.sum()) == small.size  # made at once
        large = np.zeros(workers.BEHIND // 8)
        for number in range(3):
            large[...] = 0
            shipped = shm.Shipped(None, None, {}, large.nbytes)
            shipper.send(shipped, [(large, np.full(large.size, 2.0))], behind=True)
            assert shipped.pending == (3, number)
            assert done.acquire(timeout=10) and float(large.sum()) == 2 * large.size
        assert not done.acquire(blocking=False)
        assert workers.Shipper(None, None).slot is None
    finally:
        shipper.close()
    assert_nothing_left_running()


class Churning:
    """Batch i: 1,000 values of i, after a build that leaves 32 MiB free in its
    worker's heap, below a block it keeps (as a decoder's buffers do): freed
    memory the allocator keeps, not at the top of its heap where it would give
    it back by itself."""

    def __init__(self) -> None:
        self.kept: list[np.ndarray] = []

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> np.ndarray:
        big = np.ones(4 << 20, np.uint8)  # freed: glibc serves blocks up to its size from the heap from now on
        del big
        blocks = [np.ones(2 << 20, np.uint8) for _ in range(16)]
        self.kept.append(np.ones(256 << 10, np.uint8))
        del blocks
        return np.full(1000, i)


@pytest.mark.timeout(120)
def test_workers_give_back_what_their_allocators_keep_between_epochs():
    from queuetune.prefetch import heap

    if heap.kept() is None:
        pytest.skip("not glibc: nothing to give back")
    with Prefetcher(Churning(), mode="process", workers=2, max_bytes="16MiB", sample_memory=False) as p:
        assert [int(b[0]) for b in p] == [0, 1, 2, 3]
        workers = p._kept.workers[0]
        deadline = time.monotonic() + 30
        while workers.processes.handed_back < 32 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        # Each worker built at least one batch: 32 MiB of it given back, at the least.
        assert workers.processes.handed_back >= 32 << 20
        assert [int(b[0]) for b in p] == [0, 1, 2, 3]  # the next epoch as before
    assert files() == []
    assert_nothing_left_running()


class Decoding:
    """Sample i: 16 values of i and the page faults its build took in its
    thread; the build holds four blocks of 1 MiB at once and frees them, as a
    decode, a crop and a normalization do."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> np.ndarray:
        import resource

        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        blocks = [np.ones(1 << 20, np.uint8) for _ in range(4)]
        del blocks
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
        return np.array([i] * 16 + [faults], np.int64)


def faults_a_sample() -> float:
    """The median page faults a sample of :class:`Decoding` took to build in a
    worker started by spawn (its allocator starts from glibc's own thresholds,
    not from this process's), past each worker's first batches; every batch
    checked whole, and nothing left."""
    from queuetune.prefetch import heap

    if heap.kept() is None:
        pytest.skip("not glibc")
    settings = {"mode": "process", "workers": 2, "max_bytes": "16MiB", "sample_memory": False}
    with Prefetcher(Decoding(), batch_size=4, multiprocessing_context="spawn", **settings) as p:
        batches = list(p)
    assert [int(v) for b in batches for v in b[:, 0]] == list(range(48))
    assert files() == []
    assert_nothing_left_running()
    return float(np.median(np.concatenate([b[:, -1] for b in batches[4:]])))


@pytest.mark.timeout(120)
def test_a_worker_keeps_between_samples_what_one_sample_builds_with():
    # 4 MiB taken again from the system after every sample would be 1,024 faults.
    assert faults_a_sample() < 64


@pytest.mark.timeout(120)
def test_a_process_whose_environment_sets_the_allocator_keeps_its_setting(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", str(128 << 10))  # read by each spawned worker's glibc
    # Its top given back after every sample: the 4 MiB taken again each time.
    assert faults_a_sample() > 512
