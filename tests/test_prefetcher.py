"""The memory-bounded prefetcher: order, exactly once, the byte bound, errors, shutdown."""

from __future__ import annotations

import gc
import itertools
import threading
import time
import traceback

import numpy as np
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import assert_nothing_left_running
from queuetune import BudgetExceeded, Prefetcher
from queuetune.record.nbytes import nbytes
from queuetune.record.recorder import multiprocessing_helpers


class Recorded:
    """Item i is ``sizes[i]`` bytes; every build and take is logged with the time."""

    def __init__(self, sizes, delays=None, fail_at=None):
        self.sizes, self.delays, self.fail_at = list(sizes), delays, fail_at
        self.log = []
        self.lock = threading.Lock()

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i):
        if not 0 <= i < len(self.sizes):
            raise IndexError(i)
        with self.lock:
            self.log.append(("start", i, time.monotonic()))
        if self.delays:
            time.sleep(self.delays[i % len(self.delays)])
        if i == self.fail_at:
            raise KeyError(f"record {i} is corrupt")
        batch = np.full(self.sizes[i], i % 251, dtype=np.uint8)
        batch[0] = i % 256
        with self.lock:
            self.log.append(("end", i, time.monotonic()))
        return {"i": i, "x": batch}

    def taken(self, i):
        with self.lock:
            self.log.append(("take", i, time.monotonic()))

    def peak_bytes(self, since="start"):
        """Most bytes of batches started (or, with since="end", finished) and not
        yet taken, at any moment."""
        held, peak = 0, 0
        for kind, i, _ in sorted(self.log, key=lambda e: e[2]):
            if kind == since:
                held += self.sizes[i]
            elif kind == "take":
                held -= self.sizes[i]
            peak = max(peak, held)
        return peak

    def takes_from(self, trace):
        """Use the prefetcher's own hand-over times: it frees a batch's bytes just
        before ``consumed`` is stamped, and the consumer logs its take later, by
        which time the next batch may already have started."""
        with self.lock:
            self.log = [e for e in self.log if e[0] != "take"]
            self.log += [("take", c.key, c.consumed) for c in trace.consumed]

    def builds(self):
        return [i for kind, i, _ in self.log if kind == "start"]


def batch_bytes(size):
    """What the prefetcher counts for one of Recorded's batches of ``size`` bytes."""
    return nbytes({"i": 0, "x": np.zeros(size, dtype=np.uint8)})


def consume(prefetcher, source, limit=None):
    got = []
    for batch in prefetcher:
        source.taken(batch["i"])
        got.append(batch["i"])
        if limit is not None and len(got) >= limit:
            break
    return got


@pytest.mark.timeout(120)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=st.integers(1_000, 50_000),
    others=st.lists(st.integers(1, 50_000), max_size=25),
    delays=st.lists(st.sampled_from([0.0, 0.0005, 0.002]), min_size=1, max_size=4),
    workers=st.integers(1, 4),
    ordered=st.booleans(),
    adaptive=st.booleans(),
    depth=st.integers(1, 6),
    slack=st.integers(0, 4),
)
def test_every_batch_once_in_order_and_within_the_budget(
    first, others, delays, workers, ordered, adaptive, depth, slack
):
    # the first batch is the largest, so the reservation never underestimates
    sizes = [first] + [min(s, first) for s in others]
    source = Recorded(sizes, delays)
    budget = first * (1 + slack)
    with Prefetcher(
        source,
        max_bytes=budget,
        workers=workers,
        ordered=ordered,
        adaptive=adaptive,
        depth=None if adaptive else depth,
        sample_memory=False,
    ) as p:
        got = consume(p, source)
        if ordered:
            assert got == list(range(len(sizes)))
        else:
            assert sorted(got) == list(range(len(sizes)))
        assert sorted(source.builds()) == list(range(len(sizes)))  # nothing built twice, nothing past the end
        source.takes_from(p.trace())
        assert source.peak_bytes() <= budget
        depths = [m.value for m in p.trace().marks if m.kind == "depth"]
        assert all(1 <= d <= (64 if adaptive else depth) for d in depths)
    assert_nothing_left_running()


@pytest.mark.timeout(120)
@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40_000), min_size=1, max_size=20), slack=st.integers(0, 3), workers=st.integers(1, 3)
)
def test_a_batch_that_outgrows_the_budget_fails_clearly_never_silently(sizes, slack, workers):
    source = Recorded(sizes, [0.0005])
    budget = sizes[0] * (1 + slack)
    with Prefetcher(source, max_bytes=budget, workers=workers, sample_memory=False) as p:
        try:
            got = consume(p, source)
        except BudgetExceeded as exc:
            assert "max_bytes" in str(exc)
        else:
            assert got == list(range(len(sizes)))
            source.takes_from(p.trace())
            # A batch's size is known once it is built: each start is held to the budget
            # with the sizes known then (every reservation at least the first batch's), so
            # only the batches under way when one turns out larger than reserved can pass it,
            # by their surprise, until the consumer takes them.
            surprises = sorted((max(0, size - sizes[0]) for size in sizes), reverse=True)
            assert source.peak_bytes(since="end") <= budget + sum(surprises[:workers])
    assert_nothing_left_running()


def test_one_batch_larger_than_the_budget_is_an_error_at_the_first_batch():
    source = Recorded([5000, 10])
    with Prefetcher(source, max_bytes=4096) as p:
        with pytest.raises(
            BudgetExceeded, match=r"4\.9 KiB \(5000 bytes\) does not fit in max_bytes=4\.0 KiB \(4096 bytes\)"
        ):
            next(iter(p))
    assert source.builds() == [0]


@pytest.mark.timeout(60)
def test_a_pause_does_not_fill_memory_beyond_the_budget():
    source = Recorded([10_000] * 40, [0.001])
    with Prefetcher(source, max_bytes=35_000, workers=4, sample_memory=False) as p:
        it = iter(p)
        for _ in range(5):
            source.taken(next(it)["i"])
        time.sleep(0.3)  # the consumer pauses (validation, a checkpoint)
        for batch in it:
            source.taken(batch["i"])
        source.takes_from(p.trace())
    assert source.peak_bytes() <= 35_000


@pytest.mark.timeout(60)
def test_no_batch_of_a_broken_epoch_is_served_in_the_next():
    source = Recorded([100] * 12, [0.001])
    with Prefetcher(source, max_bytes=10_000, workers=3, adaptive=False, depth=6) as p:
        assert consume(p, source, limit=4) == [0, 1, 2, 3]
        assert consume(p, source) == list(range(12))
        assert consume(p, source) == list(range(12))
        report = p.report()
    assert [(c.epoch, c.duplicates, c.never_count) for c in report.coverage] == [(0, [], 8), (1, [], 0), (2, [], 0)]


@pytest.mark.timeout(60)
def test_a_fixed_depth_stays_fixed_while_the_queue_stays_full():
    # Builds far faster than the consumer: the queue is full at nearly every
    # request, where an adaptive depth shrinks after 32 of them.
    batches = [np.full(1000, i) for i in range(100)]
    with Prefetcher(batches, max_bytes="1MiB", workers=2, adaptive=False, depth=3, sample_memory=False) as p:
        got = []
        for batch in p:
            got.append(int(batch[0]))
            time.sleep(0.002)
        depths = [mark.value for mark in p.trace().marks if mark.kind == "depth"]
        assert (got, p.depth, depths) == (list(range(100)), 3, [3])
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_shuffle_changes_the_order_each_epoch_but_never_the_contents():
    source = Recorded([10] * 30)
    with Prefetcher(source, max_bytes=10_000, shuffle=True, seed=3) as p:
        a, b = consume(p, source), consume(p, source)
    assert sorted(a) == sorted(b) == list(range(30)) and a != b


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_worker_error_reaches_the_consumer_with_its_traceback(mode):
    source = Recorded([100] * 10, fail_at=4)
    with Prefetcher(source, max_bytes=10_000, workers=2, mode=mode) as p:
        got = []
        with pytest.raises(KeyError, match="record 4 is corrupt") as info:
            for batch in p:
                got.append(batch["i"])
        assert got == [0, 1, 2, 3]
        text = "".join(traceback.format_exception(info.value))
        assert "__getitem__" in text
        assert p.report().errors
    assert_nothing_left_running()


def worker_ids(mode: str) -> set[int]:
    """The prefetcher's worker threads (their idents) or processes (their pids) alive now."""
    if mode == "thread":
        return {t.ident for t in threading.enumerate() if t.name.startswith("queuetune-prefetch")}  # type: ignore[misc]
    return {c.pid for c in psutil.Process().children(recursive=True) if c.pid not in multiprocessing_helpers()}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["thread", "process"])
@pytest.mark.parametrize("how", ["break", "raise", "interrupt", "gc"])
def test_workers_stay_for_the_next_epoch_however_the_consumer_leaves_and_close_ends_them(mode, how):
    source = Recorded([50_000] * 50, [0.002])
    p = Prefetcher(source, max_bytes="1MiB", workers=2, mode=mode)
    if how == "gc":
        it = iter(p)
        next(it)
        del it
        gc.collect()
    else:
        error = {"raise": ValueError, "interrupt": KeyboardInterrupt}.get(how)
        try:
            for n, _ in enumerate(p):
                if n == 3:
                    if error is None:
                        break
                    raise error("consumer stops")
        except (ValueError, KeyboardInterrupt):
            pass
    kept = worker_ids(mode)
    assert len(kept) == 2
    # The next epoch is whole, built by the same workers (the last one's builds under way were dropped).
    assert [batch["i"] for batch in p] == list(range(50))
    assert worker_ids(mode) == kept
    p.close()
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_process_mode_passes_arrays_through_shared_memory():
    from queuetune.prefetch import shm

    source = Recorded([300_000] * 6)
    with Prefetcher(source, max_bytes="4MiB", workers=2, mode="process") as p:
        batches = list(p)
    assert [b["i"] for b in batches] == list(range(6))
    # mapped (over a segment's holder), not unpickled
    assert all(isinstance(b["x"].base, __import__("ctypes").Array) for b in batches)
    assert all(int(b["x"][0]) == i % 256 for i, b in enumerate(batches))
    assert shm.sweep(__import__("os").getpid()) == 0  # no file left behind


@pytest.mark.timeout(60)
def test_slow_builds_reach_the_depth_the_workers_need_within_a_few_batches():
    """Builds of 150 ms against steps of 3 ms need all 6 workers building: the
    depth gets there at the first waits, not one batch at a time."""
    source = Recorded([1000] * 30, [0.150])
    with Prefetcher(source, max_bytes=1_000_000, workers=6, sample_memory=False) as p:
        for _ in p:
            time.sleep(0.003)
        trace = p.trace()
    marks = [m for m in trace.marks if m.kind == "depth"]
    # From the first request: every worker building, and one batch more.
    assert marks[0].value == 6 + 1 and marks[0].t <= min(c.requested for c in trace.consumed)
    assert sorted(set(source.builds())) == list(range(30))


@pytest.mark.timeout(60)
def test_adaptive_depth_starts_with_every_worker_and_the_budget_bounds_the_bytes():
    source = Recorded([1000] * 60, [0.005])
    with Prefetcher(source, max_bytes=5000, workers=4, sample_memory=False) as p:
        consume(p, source)
        depths = [m.value for m in p.trace().marks if m.kind == "depth"]
        source.takes_from(p.trace())
    assert depths[0] == 4 + 1  # every worker building from the first request, and one more
    assert max(depths[1:], default=0) <= 5000 // batch_bytes(1000)  # never deepened past what the budget holds
    assert source.peak_bytes() <= 5000  # the budget, not the depth, bounds the bytes


def stalled_run(ordered, stalls=(20,), workers=4, load=0.002):
    """40 batches of 1000 bytes, loads of ``load`` and of 400 ms for those in
    ``stalls``, a consumer step of 5 ms, ``workers`` threads: the depth marks,
    the budget's depth, the peak held and the trace."""
    delays = [load] * 40
    for i in stalls:
        delays[i] = 0.400
    source = Recorded([1000] * 40, delays)
    budget = 12_000
    with Prefetcher(source, max_bytes=budget, workers=workers, ordered=ordered, sample_memory=False) as p:
        for batch in p:
            source.taken(batch["i"])
            time.sleep(0.005)
        trace = p.trace()
        source.takes_from(trace)
        limit = budget // batch_bytes(1000)
    return [m.value for m in trace.marks if m.kind == "depth"], limit, source.peak_bytes(), trace


@pytest.mark.timeout(60)
def test_one_stall_deepens_at_once_in_order_within_the_budget():
    depths, limit, peak, _ = stalled_run(ordered=True)
    jumps = [b - a for a, b in itertools.pairwise(depths)]
    # The workers outpace the consumer, so the depth had no reason to grow
    # before the stall; 400 ms held up everything behind it, at 5 ms a step:
    # deeper by more than one batch in one decision, stopped by the budget.
    assert max(jumps) > 1
    assert max(depths) == limit
    assert peak <= 12_000


@pytest.mark.timeout(60)
def test_two_stalls_under_way_at_once_deepen_at_the_first():
    """Batch 22 stalls too, and is still building when batch 20 is handed over:
    the wait is a stall all the same (not a depth too small for the load, where
    the batches behind build at the workers' pace), so the depth reaches the
    budget's at that hand-over, not at a later stall."""
    depths, limit, peak, trace = stalled_run(ordered=True, stalls=(20, 22))
    marks = [m for m in trace.marks if m.kind == "depth"]
    assert max(b.value - a.value for a, b in itertools.pairwise(marks)) > 1
    assert [m.value for m in marks if m.t <= trace.consumed[21].requested][-1] == limit
    assert max(depths) == limit
    assert peak <= 12_000


@pytest.mark.timeout(60)
def test_a_stall_deepens_at_once_where_two_workers_together_outpace_the_consumer():
    """Loads of 6 ms against steps of 5 ms: one worker alone is slower than the
    consumer, two are faster by more than a third, so the queue fills between
    stalls and one worker builds behind a stall while the other is held in it."""
    depths, limit, peak, trace = stalled_run(ordered=True, stalls=(20,), workers=2, load=0.006)
    marks = [m for m in trace.marks if m.kind == "depth"]
    assert [m.value for m in marks if m.t <= trace.consumed[21].requested][-1] == limit
    assert max(depths) == limit
    assert peak <= 12_000


@pytest.mark.timeout(60)
def test_out_of_order_a_stall_is_no_reason_to_deepen_by_more_than_one():
    depths, limit, peak, _ = stalled_run(ordered=False)
    assert all(b - a in (1, -1) for a, b in itertools.pairwise(depths))
    assert max(depths) <= limit
    assert peak <= 12_000


@pytest.mark.timeout(60)
def test_the_epochs_end_does_not_deepen_the_queue():
    """At depth 4 on 4 workers the last batches leave workers idle because nothing
    is left to start, not for the lack of depth: the consumer waits for each of
    them (the last four finish 50 ms apart), and the depth stays. Batches 1-3
    are built 50 ms before batch 0, so the consumer waits only for batch 0
    until the last four have all been started (while it waits for batch 0, three
    workers sit idle for the depth alone: that may deepen, then, not later)."""
    source = Recorded([1000] * 8, [0.060, 0.010, 0.010, 0.010, 0.030, 0.080, 0.130, 0.180])
    with Prefetcher(source, max_bytes=100_000, workers=4, depth=4, sample_memory=False) as p:
        taken = []
        for batch in p:
            source.taken(batch["i"])
            taken.append(batch["i"])
        trace = p.trace()
    marks = [m for m in trace.marks if m.kind == "depth"]
    assert taken == list(range(8))
    assert marks[0].value == 4 and max(m.value for m in marks) <= 5
    assert all(m.t < trace.consumed[4].requested for m in marks)  # none as the epoch ends


@pytest.mark.timeout(60)
def test_a_steady_slow_load_deepens_to_what_the_workers_use_and_stops_there():
    """Loads of 20 ms on 4 workers for a 2 ms step: the waits are long, but the
    workers cannot keep up, so no batch ever waits behind another for long (no
    stall to cover): the depth goes to every worker building and one more, and
    stops there. On a busy machine loads finish out of turn and can leave workers
    idle behind a late one, each worth a batch more (at most the 4 workers at
    once); a stall rule taking the 20 ms waits for stalls would jump by ten
    (20 ms / 2 ms)."""
    source = Recorded([1000] * 80, [0.020])
    with Prefetcher(source, max_bytes=100_000, workers=4, sample_memory=False) as p:
        for batch in p:
            source.taken(batch["i"])
            time.sleep(0.002)
        depths = [m.value for m in p.trace().marks if m.kind == "depth"]
    assert 4 + 1 in depths  # every worker building, and one more
    assert all(later - earlier <= 4 for earlier, later in itertools.pairwise(depths))


@pytest.mark.timeout(60)
def test_a_pause_makes_no_depth_decision_and_holds_no_more_than_the_depth():
    source = Recorded([10_000] * 60, [0.001])
    with Prefetcher(source, max_bytes=200_000, workers=4, sample_memory=False) as p:
        it = iter(p)
        for _ in range(20):
            source.taken(next(it)["i"])
            time.sleep(0.002)
        paused = time.monotonic()
        time.sleep(0.3)
        resumed = time.monotonic()
        for batch in it:
            source.taken(batch["i"])
        trace = p.trace()
        source.takes_from(trace)
    marks = [m for m in trace.marks if m.kind == "depth"]
    assert not [m for m in marks if paused < m.t < resumed]
    # Started and not yet taken: never more than the deepest depth, pause or not
    # (plus one: a batch leaves the account just before its hand-over is stamped).
    assert source.peak_bytes() <= (max(m.value for m in marks) + 1) * 10_000


@pytest.mark.timeout(60)
def test_plain_iterables_and_batching_samples():
    with Prefetcher(iter(range(7)), max_bytes=1000) as p:
        assert list(p) == list(range(7))
    samples = [(np.full(3, i, "float32"), i) for i in range(10)]
    with Prefetcher(samples, max_bytes="1MiB", batch_size=4) as p:
        batches = list(p)
        report = p.report()
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0].shape == (4, 3)
    assert report.coverage[0].unit == "sample" and report.coverage[0].never_count == 0


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"max_bytes": 0}, ValueError, "0"),
        ({"max_bytes": "lots"}, ValueError, "lots"),
        ({"max_bytes": 100, "workers": 0}, ValueError, "workers"),
        ({"max_bytes": 100, "mode": "fiber"}, ValueError, "mode"),
        ({"max_bytes": 100, "trace_epochs": 0}, ValueError, "trace epochs"),
        ({"max_bytes": 100, "trace_epochs": "2"}, TypeError, "trace epochs"),
        ({"max_bytes": 100, "depth": 0, "adaptive": False}, ValueError, "depth"),
        ({"max_bytes": 100, "depth": 100}, ValueError, "max_depth"),
        ({"max_bytes": 100, "collate_fn": list}, ValueError, "batch_size"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        Prefetcher([1, 2], **kwargs)


@pytest.mark.parametrize("source", [5, None, "text", {"a": 1}])
def test_not_a_source(source):
    with pytest.raises(TypeError, match="indexable dataset or an iterable"):
        Prefetcher(source, max_bytes=100)


def test_a_closed_prefetcher_refuses_a_new_epoch():
    p = Prefetcher([1], max_bytes=100)
    p.close()
    with pytest.raises(ValueError, match="closed"):
        iter(p)


@pytest.mark.torch
@pytest.mark.timeout(60)
def test_torch_map_dataset_in_a_plain_loop():
    torch = pytest.importorskip("torch")
    from torch.utils.data import Dataset

    class Squares(Dataset):
        def __len__(self):
            return 20

        def __getitem__(self, i):
            return torch.tensor([i, i * i])

    with Prefetcher(Squares(), max_bytes="1MiB", batch_size=8, shuffle=True, seed=0, workers=2) as p:
        batches = list(p)
        cov = p.report().coverage[0]
    assert all(isinstance(b, torch.Tensor) for b in batches)
    assert sorted(int(v) for b in batches for v in b[:, 0]) == list(range(20))
    assert (cov.duplicates, cov.never_count) == ([], 0)


@pytest.mark.keras
@pytest.mark.timeout(120)
def test_keras_fit_and_predict_take_the_prefetcher_and_nothing_carries_over():
    keras = pytest.importorskip("keras")

    class Data(keras.utils.PyDataset):
        def __init__(self):
            super().__init__()

        def __len__(self):
            return 8

        def __getitem__(self, i):
            return np.full((4, 3), i, "float32"), np.zeros((4, 1), "float32")

    seen = []

    class Recording(keras.Model):
        def train_step(self, data):
            seen.append(int(data[0][0, 0]))
            return super().train_step(data)

        def predict_step(self, data):
            x = data[0] if isinstance(data, (tuple, list)) else data
            seen.append(int(x[0, 0]) if x.ndim == 2 else int(x[0][0, 0]))
            return super().predict_step(data)

    inp = keras.Input((3,))
    model = Recording(inp, keras.layers.Dense(1)(inp))
    model.compile("sgd", "mse")
    p = Prefetcher(Data(), max_bytes="1MiB", workers=2)
    assert isinstance(p, keras.utils.PyDataset)
    model.fit(p, epochs=2, shuffle=False, verbose=0)
    assert seen == list(range(8)) * 2
    seen.clear()
    model.predict(p, steps=3, verbose=0)
    model.predict(p, steps=3, verbose=0)
    assert seen == [0, 1, 2, 0, 1, 2]  # Keras's own enqueuer would serve 3, 4, 5 the second time
    p.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_batch_is_freed_as_soon_as_the_consumer_lets_go_of_it(mode):
    # Not at the next request: the iterator keeps no reference to a batch it
    # handed over, so one the consumer drops (after copying it to a device, say)
    # is freed then, by its reference count (the collector is off).
    import weakref

    source = Recorded([100_000] * 8)
    gc.disable()
    try:
        with Prefetcher(source, max_bytes="2MiB", workers=2, mode=mode, sample_memory=False) as p:
            it = iter(p)
            for i in range(3):
                batch = next(it)
                assert batch["i"] == i
                gone = weakref.ref(batch["x"])
                del batch
                assert gone() is None, f"batch {i} is still held after the consumer let it go"
            assert [b["i"] for b in it] == list(range(3, 8))
    finally:
        gc.enable()
    assert_nothing_left_running()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_trace_keeps_the_latest_epochs_only(mode):
    from queuetune.analysis.report import analyze
    from queuetune.record.trace import Trace

    batches = [np.full(1000, i, dtype=np.float32) for i in range(7)]
    with Prefetcher(batches, max_bytes="1MiB", workers=2, mode=mode, trace_epochs=2) as p:
        for _ in range(5):
            assert [int(b[0]) for b in p] == list(range(7))
        trace = p.trace()
    assert {c.run for c in trace.consumed} == {3, 4}
    assert len(trace.consumed) == len(trace.produced) == 14
    assert trace.meta.forgotten_runs == 3
    assert [m.value for m in trace.marks if m.kind == "run_begin"] == [3, 4]
    report = analyze(Trace.from_json(trace.to_json()))
    assert report.consumed_batches == report.produced_batches == 14
    assert report.read_ahead_batches == 0


@pytest.mark.timeout(60)
def test_without_a_limit_the_trace_keeps_every_epoch():
    batches = [np.zeros(10) for _ in range(3)]
    with Prefetcher(batches, max_bytes="1MiB", trace_epochs=None) as p:
        for _ in range(20):
            assert sum(1 for _ in p) == 3
        trace = p.trace()
    assert len(trace.consumed) == len(trace.produced) == 60
    assert trace.meta.forgotten_runs is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_second_epochs_first_request_finds_every_worker_already_building(mode):
    """Workers and depth are kept from one epoch to the next: as the second
    epoch's first batch is asked for, each of the same four workers is already
    building one, none waiting for another's to end."""
    workers = 4
    source = Recorded([1000] * 16, [0.100])
    with Prefetcher(source, max_bytes="1MiB", workers=workers, mode=mode, sample_memory=False) as p:
        assert [batch["i"] for batch in p] == list(range(16))
        kept = worker_ids(mode)
        assert [batch["i"] for batch in p] == list(range(16))
        assert worker_ids(mode) == kept
        trace = p.trace()
    begins = [m.t for m in trace.marks if m.kind == "run_begin"]
    assert len(begins) == 2
    second = sorted((b for b in trace.produced if b.start >= begins[1]), key=lambda b: b.start)
    asked = min(c.requested for c in trace.consumed if c.run == 1)
    first_builds = second[:workers]
    assert len({b.worker for b in first_builds}) == workers
    first_epoch = {b.worker for b in trace.produced if b.start < begins[1]}
    assert {b.worker for b in first_builds} <= first_epoch
    # All four under way at once: each began before any of them ended, and the
    # first batch was asked for before any ended.
    assert max(b.start for b in first_builds) < min(b.end for b in first_builds)
    assert asked < min(b.end for b in first_builds)


class Samples:
    """Sample i: 1000 bytes, built in ``delay`` seconds; each build's start and end logged."""

    def __init__(self, n, delay):
        self.n, self.delay = n, delay
        self.log = []
        self.lock = threading.Lock()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        start = time.monotonic()
        time.sleep(self.delay)
        with self.lock:
            self.log.append((i, start, time.monotonic()))
        return np.full(1000, i % 256, dtype=np.uint8)

    def batch_spans(self, batch_size):
        """Each batch's first start and last end, by batch (the first epoch's builds only)."""
        spans = {}
        for i, start, end in self.log[: self.n]:
            b = i // batch_size
            first, last = spans.get(b, (start, end))
            spans[b] = (min(first, start), max(last, end))
        return spans


@pytest.mark.timeout(60)
def test_the_first_epoch_starts_every_worker_once_a_sample_gave_the_size():
    """The first batch's size is guessed from one sample built alone (a worker's
    first job), so the other workers start long before the first batch ends."""
    source = Samples(64, 0.020)  # batches of 8 samples: 160 ms a batch, 20 ms for the guess
    with Prefetcher(source, batch_size=8, max_bytes="1MiB", workers=4, sample_memory=False) as p:
        assert len(list(p)) == 8
    spans = source.batch_spans(8)
    first_end = spans[0][1]
    assert all(spans[b][0] < first_end for b in (1, 2, 3))


@pytest.mark.timeout(60)
def test_the_guessed_size_is_held_to_the_budget():
    """Two guessed batches fit in the budget, not three: no more than two batches
    are under way before the first is built (then the real size, smaller than
    the guess, lets three in)."""
    source = Samples(48, 0.010)
    budget = 2 * (8 * 1000) * 5 // 4 + 2 * 4096 + 100  # two guesses with their margin, not three
    with Prefetcher(source, batch_size=8, max_bytes=budget, workers=4, sample_memory=False) as p:
        got = [int(b[0][0]) for b in p]
    assert got == [8 * b for b in range(6)]
    spans = source.batch_spans(8)
    first_end = spans[0][1]
    assert sum(1 for start, _ in spans.values() if start < first_end) <= 2


@pytest.mark.timeout(60)
def test_a_collate_fn_of_ones_own_builds_the_first_batch_alone():
    source = Samples(32, 0.010)
    with Prefetcher(
        source, batch_size=8, collate_fn=lambda items: np.stack(items), max_bytes="1MiB", workers=4, sample_memory=False
    ) as p:
        assert len(list(p)) == 4
    spans = source.batch_spans(8)
    assert all(spans[b][0] >= spans[0][1] for b in (1, 2, 3))


class Reiterable:
    """Iterable again and again, with no ``__getitem__``: a plain iterable to the prefetcher."""

    def __iter__(self):
        return iter([np.full(4, i) for i in range(5)])


@pytest.mark.timeout(60)
def test_a_plain_iterable_is_read_anew_each_epoch():
    with Prefetcher(Reiterable(), max_bytes="1MiB") as p:
        for _ in range(3):
            assert [int(b[0]) for b in p] == [0, 1, 2, 3, 4]
    assert_nothing_left_running()


def test_a_batch_above_the_guess_or_any_before_is_held_and_no_batch_starts_until_it_fits():
    from queuetune.prefetch.config import BatchSizes, EpochConfig
    from queuetune.prefetch.schedule import Schedule
    from queuetune.prefetch.task import Task
    from queuetune.prefetch.workers import ThreadWorkers

    workers = ThreadWorkers(1, str)
    try:
        config = EpochConfig(max_bytes=10_000, depth=4, max_depth=4, ordered=True, timeout=None, guess=True)
        schedule = Schedule(config, [[0], [1], [2]], workers, BatchSizes(guess=3000))
        schedule.submitted = 2
        schedule.ledger.held, schedule.ledger.reserved = (
            8000,
            3000,
        )  # the first batch built, one more started on the guess
        assert schedule.ledger.fault(Task(0, [0], reserved=3000), 8000) is None  # larger than guessed: held
        assert not schedule.can_start()  # 8,000 + 3,000 in flight: no room for one more
        schedule.sizes.learn(8000)
        assert schedule.ledger.fault(Task(1, [1], reserved=8000), 9000) is None
        fault = schedule.ledger.fault(Task(2, [2], reserved=8000), 10_001)
        assert fault is not None and str(fault).startswith("batch 2 of the epoch: 9.8 KiB (10001 bytes) does not fit")
    finally:
        workers.shutdown(wait=True, unclaimed=[])


def head_of_line_run(step, epochs):
    """Epochs of 16 batches on 4 workers, in order, each fourth batch built in
    150 ms and the others in 50 ms: the three fast ones finish while the slow one
    holds the head of the queue, and at the start's depth (every worker and one
    more) two workers then sit idle for the depth alone. The depth marks and
    the peak bytes started and not taken."""
    source = Recorded([1000] * 16, [0.150, 0.050, 0.050, 0.050])
    trace = epochs_in_order(source, epochs, step)
    return [m.value for m in trace.marks if m.kind == "depth"], source.peak_bytes()


def epochs_in_order(source, epochs, step):
    """``epochs`` of Recorded ``source`` on 4 workers, within 20 of its batches,
    each batch followed by a step of ``step`` seconds; each epoch checked to
    come whole and in order. The trace."""
    with Prefetcher(source, max_bytes=20 * batch_bytes(1000), workers=4, sample_memory=False) as p:
        for _ in range(epochs):
            taken = []
            for batch in p:
                source.taken(batch["i"])
                taken.append(batch["i"])
                time.sleep(step)
            assert taken == list(range(len(source)))
        trace = p.trace()
    assert_nothing_left_running()
    return trace


@pytest.mark.timeout(60)
def test_workers_idle_behind_a_slow_batch_deepen_the_queue_where_the_consumer_waits_for_them():
    """A consumer that waits for the workers (1 ms steps) while they sit idle
    behind the slow batch at the head: deeper by the workers idle at once, after
    the first epoch's first 16 requests (the start's, as for the other rules).
    The waits alone take it one deeper, which leaves them idle still."""
    depths, peak = head_of_line_run(step=0.001, epochs=3)
    assert depths[0] == 4 + 1
    assert max(depths) >= 4 + 1 + 3  # the three fast builds behind the slow one
    assert max(depths) <= 3 * 4
    assert peak <= max(depths) * 1000


@pytest.mark.timeout(60)
def test_workers_idle_for_the_depth_do_not_deepen_it_where_the_consumer_is_the_slower():
    """The same builds for a consumer of 60 ms steps, which the workers outpace:
    its waits are under a tenth of its time, so idle workers are memory saved,
    not throughput lost, and the depth stays."""
    depths, _ = head_of_line_run(step=0.060, epochs=2)
    assert max(depths) == 4 + 1


@pytest.mark.timeout(60)
def test_workers_idle_behind_a_later_epoch_s_first_batch_deepen_the_queue_at_its_first_wait():
    """Epochs of 20 batches on 4 workers, each epoch's first batch built in
    300 ms and the others in 30 ms, for a consumer of 1 ms steps. In the second
    epoch, at the start's depth (every worker and one more), the three workers
    that built the batches behind the first sit idle for the depth alone while
    the consumer waits for it. The workers are kept from the first epoch, so
    that is throughput lost: the depth grows at that very wait (the code before
    counted idle time from the epoch's first batch taken, and waited for later)."""
    trace = epochs_in_order(Recorded([1000] * 20, [0.300] + [0.030] * 19), epochs=2, step=0.001)
    begins = [m.t for m in trace.marks if m.kind == "run_begin"]
    assert len(begins) == 2
    depths = [m for m in trace.marks if m.kind == "depth"]
    at_start = [m.value for m in depths if m.t <= begins[1]][-1]
    first, second = [c.consumed for c in trace.consumed if c.run == 1][:2]
    changes = [m.value for m in depths if first <= m.t < second]
    assert changes, f"no change of depth at the second epoch's first wait: {[(m.t, m.value) for m in depths]}"
    assert at_start + 2 <= changes[0] <= 20


@pytest.mark.timeout(60)
def test_workers_idle_for_the_depth_while_the_consumer_takes_built_batches_do_not_deepen_it():
    """Builds that all take 200 ms, for a consumer of 30 ms steps on 4 workers:
    each wave of builds ends together, and at the start's depth (every worker
    and one more) three workers sit idle for the depth while the consumer
    takes the wave's batches, one step apart. Each starts again as it takes
    one, so the next wave is ready as its pace asks for it: a deeper queue
    would hold more and wait as long. Idle workers count only while the
    consumer waits, and it waits for builds under way, never behind a worker
    idle for the depth: the depth stays over three epochs."""
    trace = epochs_in_order(Recorded([1000] * 16, [0.200]), epochs=3, step=0.030)
    assert {m.value for m in trace.marks if m.kind == "depth"} == {4 + 1}
