"""Fault injection for queuetune.Prefetcher: a source that raises, a worker process
killed, a consumer that leaves, a batch that grows, batches that are not arrays,
empty epochs, a producer too slow. Each case: the original error (or a clear one
of ours) reaches the consumer, nothing hangs, nothing is left running or in
shared memory, and the trace up to the fault saves and loads."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import numpy as np
import psutil
import pytest

from helpers import assert_nothing_left_running, peak_held
from queuetune import BudgetExceeded, Prefetcher, PrefetcherClosed, Trace, WorkerDied
from queuetune.prefetch import shm
from queuetune.record.recorder import key_of, multiprocessing_helpers

pytestmark = pytest.mark.faults

MODES = ["thread", "process"]
KINDS = ["numpy", pytest.param("keras", marks=pytest.mark.keras), pytest.param("torch", marks=pytest.mark.torch)]
# Above shm.MIN_BYTES, so process mode passes the arrays through shared memory.
ITEM = 80_000


class Corrupt(Exception):
    pass


class Batches:
    """Map-style: batch i is ``{"i": i, "x": ITEM bytes of i % 251}``; a fault at ``fail_at``."""

    def __init__(self, n, fail_at=None, delay=0.0, sizes=None, stall_at=None, release=None):
        self.n, self.fail_at, self.delay, self.sizes = n, fail_at, delay, sizes
        self.stall_at, self.release = stall_at, release

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        if self.delay:
            time.sleep(self.delay)
        _fault(self, i)
        size = self.sizes[i] if self.sizes else ITEM
        return {"i": i, "x": np.full(size, i % 251, np.uint8)}


def _fault(source, i):
    if i == source.fail_at:
        raise Corrupt(f"record {i} is corrupt")
    if i == source.stall_at:
        if source.release is not None:
            source.release.wait(30)
        else:
            time.sleep(30)


def make(kind, n, **faults):
    """A source of ``n`` batches of the given kind, the Prefetcher arguments it
    needs, and how to read a delivered batch's index from its data."""
    if kind == "numpy":
        return Batches(n, **faults), {}, lambda b: int(b["i"])
    if kind == "keras":
        keras = pytest.importorskip("keras")

        class Data(keras.utils.PyDataset):
            def __init__(self):
                super().__init__()
                self.n, self.delay = n, faults.pop("delay", 0.0)
                self.fail_at, self.stall_at = faults.pop("fail_at", None), faults.pop("stall_at", None)
                self.release = faults.pop("release", None)

            def __len__(self):
                return self.n

            def __getitem__(self, i):
                if self.delay:
                    time.sleep(self.delay)
                _fault(self, i)
                return np.full((100, 200), i, "float32"), np.full((100, 1), i, "float32")

        source = Data()
        assert not faults
        return source, {}, lambda b: int(b[0][0, 0])
    torch = pytest.importorskip("torch")
    from torch.utils.data import Dataset

    size = 4

    class Samples(Dataset):
        def __init__(self):
            self.n, self.delay = n * size, faults.pop("delay", 0.0)
            fail, stall = faults.pop("fail_at", None), faults.pop("stall_at", None)
            self.fail_at = None if fail is None else fail * size + 1
            self.stall_at = None if stall is None else stall * size
            self.release = faults.pop("release", None)

        def __len__(self):
            return self.n

        def __getitem__(self, j):
            if self.delay and j % size == 0:
                time.sleep(self.delay)
            _fault(self, j)
            return torch.full((ITEM // 4 // size,), float(j))

    source = Samples()
    assert not faults
    return source, {"batch_size": size}, lambda b: int(b[0, 0]) // size


def shm_files():
    """Shared-memory files the prefetcher's workers made for this process."""
    return sorted(p.name for p in shm.files.ROOT.glob(f"queuetune-{os.getpid()}-*"))


def wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def assert_epoch_cleaned_up():
    """The workers are gone (the recorder's own thread stays until close): after
    a fault, which lets them go, or after close(); an epoch that ends without
    one keeps them for the next."""
    assert_nothing_left_running(timeout=10, threads=False)
    assert wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith("queuetune-prefetch")])
    assert shm_files() == []


def assert_trace_saved(prefetcher, tmp_path, delivered, error):
    """The trace up to the fault saves and loads, with the delivered batches and
    an error mark naming the fault."""
    path = tmp_path / "trace.json"
    prefetcher.trace().save(path)
    loaded = Trace.load(path)
    assert len(loaded.consumed) == len(delivered)
    errors = [m.value for m in loaded.marks if m.kind == "error"]
    assert len(errors) == 1 and error in errors[0]
    return loaded


def assert_delivered(got, n, ordered, upto=None):
    """Exactly once; in order when ordered; ``upto``: an epoch cut short there."""
    assert len(got) == len(set(got))
    if upto is None:
        assert (got if ordered else sorted(got)) == list(range(n))
    elif ordered:
        assert got == list(range(upto))
    else:
        assert set(got) <= set(range(n)) - {upto}


# --- 1. the source raises at a random batch ------------------------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_a_source_error_at_a_random_batch_reaches_the_consumer_and_leaves_nothing(mode, ordered, kind, tmp_path):
    n = 24
    fail_at = random.Random(f"{mode}-{ordered}-{kind}").randrange(1, n)
    source, kwargs, index = make(kind, n, fail_at=fail_at, delay=0.002)
    p = Prefetcher(source, max_bytes="2MiB", workers=2, mode=mode, ordered=ordered, sample_memory=False, **kwargs)
    got = []
    with pytest.raises(
        Corrupt, match=f"^record {fail_at * (4 if kind == 'torch' else 1) + (kind == 'torch')} is corrupt$"
    ):
        for batch in p:
            got.append(index(batch))
    assert_delivered(got, n, ordered, upto=fail_at)
    assert_epoch_cleaned_up()
    loaded = assert_trace_saved(p, tmp_path, got, "Corrupt: record")
    if kind != "torch":  # batch indices are the keys (torch batches are keyed by their samples)
        assert [c.key for c in loaded.consumed] == [key_of(i) for i in got]
    p.close()


@pytest.mark.keras
@pytest.mark.timeout(120)
def test_a_source_error_inside_keras_fit_reaches_the_caller():
    keras = pytest.importorskip("keras")
    source, _, _ = make("keras", 12, fail_at=5)
    inp = keras.Input((200,))
    model = keras.Model(inp, keras.layers.Dense(1)(inp))
    model.compile("sgd", "mse")
    p = Prefetcher(source, max_bytes="4MiB", workers=2, sample_memory=False)
    with pytest.raises(Corrupt, match="record 5 is corrupt"):
        model.fit(p, epochs=1, shuffle=False, verbose=0)
    trace = p.trace()
    assert [m.value for m in trace.marks if m.kind == "error"] == ["Corrupt: record 5 is corrupt"]
    failed = trace.consumed[-1].run
    assert [c.key for c in trace.consumed if c.run == failed] == [key_of(i) for i in range(5)]
    # the failed stream is dropped: the next fit starts a new epoch from batch 0
    source.fail_at = None
    model.fit(p, epochs=1, shuffle=False, verbose=0)
    trace = p.trace()
    last = trace.consumed[-1].run
    assert [c.key for c in trace.consumed if c.run == last] == [key_of(i) for i in range(12)]
    assert len([m for m in trace.marks if m.kind == "error"]) == 1
    p.close()


# --- 2. a worker process killed mid-epoch -------------------------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ordered", [True, False])
def test_a_worker_killed_mid_epoch_is_a_clear_error_and_the_next_epoch_starts_new_workers(ordered, kind, tmp_path):
    n, kill_at = 40, 5
    source, kwargs, index = make(kind, n, delay=0.01)
    p = Prefetcher(source, max_bytes="2MiB", workers=2, mode="process", ordered=ordered, sample_memory=False, **kwargs)
    got, victim = [], None
    with pytest.raises(WorkerDied) as info:
        for batch in p:
            got.append(index(batch))
            if len(got) == kill_at:
                victim = next(c for c in psutil.Process().children() if c.pid not in multiprocessing_helpers())
                victim.send_signal(signal.SIGKILL)
    message = str(info.value)
    assert f"worker process of the prefetcher died (pid {victim.pid}, killed by SIGKILL)" in message
    assert "next for loop starts new ones" in message
    assert len(got) == len(set(got)) and len(got) < n
    if ordered:
        assert got == list(range(len(got)))
    assert_epoch_cleaned_up()
    assert_trace_saved(p, tmp_path, got, "WorkerDied: a worker process of the prefetcher died")
    # the next epoch: new workers, every batch exactly once
    again = [index(batch) for batch in p]
    assert_delivered(again, n, ordered)
    p.close()
    assert_epoch_cleaned_up()


# --- 3. the consumer leaves: raises, breaks, KeyboardInterrupt, SIGINT ----------------------


class ConsumerFailed(Exception):
    pass


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["raise", "break", "keyboard-interrupt", "sigint"])
@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_a_consumer_that_leaves_keeps_the_workers_and_the_next_epoch_is_whole(mode, ordered, how, kind):
    n, leave_at = 20, 4
    source, kwargs, index = make(kind, n, delay=0.002)
    p = Prefetcher(source, max_bytes="2MiB", workers=2, mode=mode, ordered=ordered, sample_memory=False, **kwargs)
    expected = {"raise": ConsumerFailed, "keyboard-interrupt": KeyboardInterrupt, "sigint": KeyboardInterrupt}
    got = []
    try:
        for batch in p:
            got.append(index(batch))
            if len(got) == leave_at:
                if how == "break":
                    break
                if how == "raise":
                    raise ConsumerFailed("the step failed")
                if how == "keyboard-interrupt":
                    raise KeyboardInterrupt
                signal.raise_signal(signal.SIGINT)
                time.sleep(1)  # the handler runs before this returns
                pytest.fail("SIGINT did not interrupt the loop")
    except BaseException as exc:
        assert how != "break" and type(exc) is expected[how]
    else:
        assert how == "break"
    assert len(got) == leave_at == len(set(got))
    # The workers stay for the next epoch, which is whole; close() ends them.
    again = [index(batch) for batch in p]
    assert_delivered(again, n, ordered)
    p.close()
    assert_epoch_cleaned_up()


# --- 4. a batch that grows mid-run ---------------------------------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("grow_at", [1, 7])
@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_a_batch_that_grows_4x_is_held_and_the_epoch_finishes(mode, ordered, grow_at):
    n, small = 30, 100_000
    sizes = [small] * grow_at + [4 * small] * (n - grow_at)
    budget = 1_300_000  # 13 small batches, 3 grown ones
    source = Batches(n, sizes=sizes, delay=0.001)
    with Prefetcher(source, max_bytes=budget, workers=2, mode=mode, ordered=ordered, sample_memory=False) as p:
        got = []
        for batch in p:
            got.append(int(batch["i"]))
            time.sleep(0.002)  # a consumer slower than the workers: the queue fills
        assert_delivered(got, n, ordered)
        # Over the budget only by the growth of the batches started before it was seen: those
        # under way (two threads), or under way and waiting (two more for processes).
        started_early = 2 if mode == "thread" else 4
        assert peak_held(p.trace()) <= budget + started_early * 3 * small
    assert_epoch_cleaned_up()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES)
def test_a_batch_that_grows_past_the_whole_budget_is_an_error_naming_its_size(mode, tmp_path):
    sizes = [100_000] * 5 + [400_000] * 5
    source = Batches(10, sizes=sizes)
    with Prefetcher(source, max_bytes=300_000, workers=2, mode=mode, sample_memory=False) as p:
        got = []
        with pytest.raises(BudgetExceeded, match=r"\(4000\d\d bytes\) does not fit in max_bytes=.*\(300000 bytes\)"):
            for batch in p:
                got.append(int(batch["i"]))
        assert got == list(range(len(got))) and len(got) <= 5
        assert_trace_saved(p, tmp_path, got, "BudgetExceeded")
        assert_epoch_cleaned_up()


class Counted:
    """An array-like of ``size`` bytes that sets ``event`` the second time its size
    is read: the worker thread reads it once to record the build, then once to
    account for it, under the epoch's lock."""

    def __init__(self, size: int, event: threading.Event) -> None:
        self.size, self.event, self.reads = size, event, 0

    @property
    def nbytes(self) -> int:
        self.reads += 1
        if self.reads == 2:
            self.event.set()
        return self.size


class LateSmallBatch:
    """Batches 0-4 of 100 kB; batch 5 is 400 kB; batch 4 is built only once batch 5's
    size is being accounted for, so its own accounting comes after batch 5's."""

    def __init__(self) -> None:
        self.accounting = threading.Event()

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> dict:
        if i == 5:
            return {"i": i, "x": Counted(400_000, self.accounting)}
        if i == 4 and not self.accounting.wait(30):
            raise TimeoutError("batch 5 was never accounted for")
        return {"i": i, "x": np.zeros(100_000, np.uint8)}


@pytest.mark.timeout(60)
def test_the_first_budget_fault_is_the_one_reported():
    """A small batch accounted for after an oversized one does not replace its error
    (found on a busy machine: 'batch 4 is 97.7 KiB, larger than any before (390.6 KiB)')."""
    # Depth 2: batches 4 and 5 are under way together, and batch 3 is taken before either is built.
    with Prefetcher(LateSmallBatch(), max_bytes=300_000, workers=2, adaptive=False, depth=2, sample_memory=False) as p:
        got = []
        with pytest.raises(BudgetExceeded, match=r"batch 5 of the epoch: .* \(4000\d\d bytes\) does not fit in"):
            for batch in p:
                got.append(int(batch["i"]))
    assert got == [0, 1, 2, 3]
    assert_nothing_left_running()


# --- 5. batches that are not arrays --------------------------------------------------------


class Opaque:
    """No nbytes, no shape: an object the byte counter knows nothing about."""

    def __init__(self, i):
        self.i = i

    def __eq__(self, other):
        return isinstance(other, Opaque) and other.i == self.i


def odd_batch(shape, i):
    if shape == "str":
        return f"batch {i}"
    if shape == "dict":
        return {"x": np.full(20_000, i, "float32"), "label": i, "name": str(i)}
    if shape == "none":
        return None
    if shape == "nested":
        return (i, [np.arange(i + 1), ("a", {"b": [i, None]})], ())
    if shape == "opaque":
        return Opaque(i)
    return {"i": i, "lock": threading.Lock()}


class Odd:
    def __init__(self, shape, n=9):
        self.shape, self.n = shape, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return odd_batch(self.shape, i)


def same(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if type(a).__name__ == "lock":
        return type(b) is type(a)
    return a == b


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shape", ["str", "dict", "none", "nested", "opaque", "unpicklable"])
@pytest.mark.parametrize("mode", MODES)
def test_batches_that_are_not_arrays_are_delivered_unchanged_or_fail_clearly(mode, shape):
    with Prefetcher(Odd(shape), max_bytes="1MiB", workers=2, mode=mode, sample_memory=False) as p:
        if mode == "process" and shape == "unpicklable":
            with pytest.raises(
                TypeError,
                match=r"batch 0 of the epoch .*could not be sent back from its worker "
                r"process \(TypeError: cannot pickle '_thread.lock' object\).*picklable",
            ):
                list(p)
        else:
            got = list(p)
            assert len(got) == 9 and all(same(b, odd_batch(shape, i)) for i, b in enumerate(got))
            if shape == "unpicklable":
                assert all(b["lock"] is not None for b in got)
            report = p.report()
            assert report.consumed_batches == 9
            assert [c.nbytes for c in p.trace().consumed] == [
                20_000 * 4 if shape == "dict" else (8 * (i + 1) if shape == "nested" else 0) for i in range(9)
            ]
    assert_epoch_cleaned_up()


@pytest.mark.timeout(30)
def test_batches_of_zero_bytes_are_still_built_by_several_workers_at_once():
    """A batch with no arrays counts 0 bytes: once that is learned, the budget
    does not hold the workers to one batch at a time."""
    meet = threading.Barrier(2, timeout=5)

    class Meeting:
        def __len__(self):
            return 7

        def __getitem__(self, i):
            if i > 0:  # the first batch is built alone, to learn the size; then two at a time
                meet.wait()
            return None

    with Prefetcher(Meeting(), max_bytes=100, workers=2, adaptive=False, depth=2, sample_memory=False) as p:
        assert list(p) == [None] * 7


# --- 6. epochs of zero batches --------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "case",
    [
        "empty",
        "batch-larger-than-the-data",
        pytest.param("keras", marks=pytest.mark.keras),
        pytest.param("torch", marks=pytest.mark.torch),
    ],
)
@pytest.mark.parametrize("mode", MODES)
def test_an_epoch_of_zero_batches_ends_at_once(mode, case, tmp_path):
    kwargs = {}
    if case == "empty":
        source = Batches(0)
    elif case == "batch-larger-than-the-data":
        source = [np.zeros(3)] * 5
        kwargs = {"batch_size": 8, "drop_last": True}
    elif case == "keras":
        source, kwargs, _ = make("keras", 0)
    else:
        source, kwargs, _ = make("torch", 0)
    with Prefetcher(source, max_bytes="1MiB", mode=mode, sample_memory=False, **kwargs) as p:
        assert len(p) == 0
        assert list(p) == [] and list(p) == []
        report = p.report()
        assert (report.produced_batches, report.consumed_batches) == (0, 0)
        p.trace().save(tmp_path / "t.json")
        assert Trace.load(tmp_path / "t.json").consumed == []
    assert_epoch_cleaned_up()


# --- 7. a very slow producer: time out or cancel -------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_a_stalled_batch_times_out_naming_it_and_the_epoch_stops(mode, ordered, kind, tmp_path):
    n, stall_at = 10, 3
    release = threading.Event() if mode == "thread" else None  # a process sleeps: it is killed
    source, kwargs, index = make(kind, n, stall_at=stall_at, release=release)
    p = Prefetcher(
        source, max_bytes="4MiB", workers=2, mode=mode, ordered=ordered, timeout=0.5, sample_memory=False, **kwargs
    )
    got = []
    try:
        with pytest.raises(
            TimeoutError,
            match=rf"^batch {stall_at} of the epoch .* was not ready within "
            r"timeout=0.5 s; the epoch is stopped$",
        ):
            for batch in p:
                got.append(index(batch))
    finally:
        if release is not None:
            release.set()  # the stalled build in its thread ends; the prefetcher did not wait for it
    assert_delivered(got, n, ordered, upto=stall_at)
    assert_epoch_cleaned_up()
    assert_trace_saved(p, tmp_path, got, "TimeoutError: batch 3")
    # the stall is gone: the next epoch delivers everything
    source.stall_at = None
    assert_delivered([index(batch) for batch in p], n, ordered)
    p.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES)
def test_close_from_another_thread_wakes_the_waiting_consumer(mode):
    release = threading.Event() if mode == "thread" else None
    source = Batches(10, stall_at=2, release=release)
    p = Prefetcher(source, max_bytes="4MiB", workers=2, mode=mode, sample_memory=False)
    got = []
    closer = threading.Timer(0.5, p.close)
    closer.start()
    try:
        with pytest.raises(PrefetcherClosed, match=r"close\(\) was called.*2 batches had been delivered"):
            for batch in p:
                got.append(int(batch["i"]))
    finally:
        closer.join()
        if release is not None:
            release.set()
    assert got == [0, 1]
    assert_epoch_cleaned_up()
    with pytest.raises(ValueError, match="closed"):
        iter(p)


@pytest.mark.parametrize(
    "timeout,error",
    [
        (0, ValueError),
        (-1.0, ValueError),
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        ("1", TypeError),
        (True, TypeError),
    ],
)
def test_a_bad_timeout_is_refused_naming_it(timeout, error):
    with pytest.raises(error, match="timeout"):
        Prefetcher([1], max_bytes=100, timeout=timeout)


_POOL = None


def _send_half_a_result_and_die():
    """In a forked worker: the start of a result message on the pool's result pipe, then SIGKILL."""
    import struct

    writer = _POOL._result_queue._writer
    os.write(writer.fileno(), struct.pack("!i", 50_000) + b"\0" * 100)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.timeout(60)
def test_a_worker_killed_while_sending_its_result_leaves_no_thread_waiting_for_ever():
    """Killed half-way through a message, a worker leaves the pool's thread reading the
    rest for ever, and Python's exit would join it: the workers' shutdown ends that wait."""
    import concurrent.futures as cf
    import multiprocessing

    from queuetune.prefetch.workers.lifecycle import _shutdown

    global _POOL
    _POOL = pool = cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    manager = None
    try:
        assert pool.submit(os.getpid).result(timeout=30) > 0
        manager = pool._executor_manager_thread
        pool.submit(_send_half_a_result_and_die)
        assert wait_until(lambda: not any(p.is_alive() for p in list(pool._processes.values())), timeout=30)
        _shutdown(pool)
        assert not manager.is_alive()
    finally:
        if manager is not None and manager.is_alive():  # the test failed: let the suite still exit
            pool._result_queue._writer.close()
            manager.join(timeout=10)
        _POOL = None
    assert_nothing_left_running()


# --- processes that cannot or must not use the prefetcher --------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES)
def test_a_forked_child_that_reads_an_inherited_iterator_gets_a_clear_error_at_once(mode):
    """The child's next(it) raised nothing and waited for ever in the schedule; and the
    parent, whose epoch the child touched nothing of, reads on."""
    with Prefetcher(Batches(20), max_bytes="16MiB", workers=2, mode=mode, sample_memory=False) as p:
        it = iter(p)
        assert int(next(it)["i"]) == 0
        read, write = os.pipe()  # after the workers are forked: they hold no end of it
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            said = []
            for attempt in (lambda: next(it), lambda: iter(p)):
                try:
                    attempt()
                    said.append("no error")
                except RuntimeError as exc:
                    said.append(str(exc))
            os.write(write, "\n".join(said).encode())
            os._exit(0)
        os.close(write)
        _, status = os.waitpid(child, 0)
        with os.fdopen(read) as pipe:
            said = pipe.read().splitlines()
        assert os.waitstatus_to_exitcode(status) == 0
        assert len(said) == 2 and all(s.startswith(f"this Prefetcher belongs to process {os.getpid()}") for s in said)
        assert [int(b["i"]) for b in it] == list(range(1, 20))
    assert_epoch_cleaned_up()


@pytest.mark.timeout(60)
def test_a_start_of_worker_processes_that_fails_leaves_no_file(tmp_path):
    """With spawn, a source holding a lambda cannot be sent: a TypeError, and the pool's
    files (its lock file too) are gone."""
    before = set(shm.files.ROOT.glob(f"queuetune-{os.getpid()}-*"))
    source = Batches(4)
    source.transform = lambda x: x  # not picklable
    with Prefetcher(source, max_bytes="1MiB", mode="process", multiprocessing_context="spawn") as p:
        with pytest.raises(TypeError, match="could not be sent to a worker process started with 'spawn'"):
            iter(p)
    assert set(shm.files.ROOT.glob(f"queuetune-{os.getpid()}-*")) == before
    assert_nothing_left_running()


def _make_process_prefetcher(queue):
    try:
        Prefetcher(Batches(2), max_bytes="1MiB", mode="process")
        queue.put("no error")
    except ValueError as exc:
        queue.put(str(exc))


@pytest.mark.timeout(60)
def test_process_mode_in_a_daemonic_process_says_so_and_names_thread_mode():
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    daemon = context.Process(target=_make_process_prefetcher, args=(queue,), daemon=True)
    daemon.start()
    said = queue.get(timeout=30)
    daemon.join(timeout=30)
    assert "is a daemonic process" in said and "use mode='thread'" in said
    assert_nothing_left_running()
