"""Every promise of the Prefetcher at once, on batches, timings and worker counts
nobody designed it for (hypothesis): each batch exactly once (in order where
asked), bit for bit; the bytes in flight within ``max_bytes`` (but for the
growth of batches already under way when they grew); in process mode
``/dev/shm`` itself within ``max_bytes`` at every sample, read every 2 ms from a
tmpfs of the test's own; only a batch larger than the whole budget an error;
nothing left after close, after a worker is killed, or after the consumer's
process is killed. On a quiet machine and with both cores busy."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import assert_nothing_left_running, busy_cores, peak_held
from queuetune import BudgetExceeded, Prefetcher, WorkerDied
from queuetune.prefetch import shm
from queuetune.record.nbytes import nbytes
from queuetune.record.recorder import multiprocessing_helpers

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs /dev/shm")

KiB, MiB = 1 << 10, 1 << 20
DTYPES = [np.dtype("u1"), np.dtype("<f4"), np.dtype(">f8"), np.dtype("c8")]
CONTAINERS = ["array", "pair", "dict", "list"]


def properties(examples: int) -> settings:
    return settings(
        max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
    )


# --- the data ------------------------------------------------------------------------------


def payload(i: int, size: int, dtype: np.dtype) -> np.ndarray:
    """Batch ``i``'s array: ``size`` bytes (whole items) of random bits seeded by ``i``."""
    count = max(1, size // dtype.itemsize)
    bits = np.random.default_rng(i).bytes(count * dtype.itemsize)
    return np.frombuffer(bytearray(bits), dtype=dtype)


def batch_of(i: int, size: int, dtype: np.dtype, container: str):
    x = payload(i, size, dtype)
    if container == "array":
        return x
    if container == "pair":
        return x, i
    if container == "dict":
        return {"x": x, "i": np.array([i, -i, 2 * i], dtype=">i8")}
    return [x, payload(i + 10_000, min(size, 4 * KiB), dtype)]


def received_index(batch, container: str) -> int:
    if container == "pair":
        return int(batch[1])
    if container == "dict":
        return int(batch["i"][0])
    raise AssertionError("no index in this container")


def same_bits(got: np.ndarray, sent: np.ndarray) -> bool:
    return got.dtype.str == sent.dtype.str and got.shape == sent.shape and got.tobytes() == sent.tobytes()


class Source:
    """Batch i: its container of ``sizes[i]`` bytes of ``dtype``, built in ``delays[i]`` seconds."""

    def __init__(self, sizes: list[int], delays: list[float], dtype: np.dtype, container: str) -> None:
        self.sizes, self.delays, self.dtype, self.container = sizes, delays, dtype, container

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int):
        if self.delays[i]:
            time.sleep(self.delays[i])
        return batch_of(i, self.sizes[i], self.dtype, self.container)


@st.composite
def size_patterns(draw) -> tuple[str, list[int]]:
    n = draw(st.integers(6, 28))
    pattern = draw(st.sampled_from(["fixed", "growing", "shrinking", "random", "one huge"]))
    base = draw(st.integers(1 * KiB, 2 * MiB))
    if pattern == "fixed":
        return pattern, [base] * n
    if pattern in ("growing", "shrinking"):
        step = draw(st.integers(1, max(1, base // 3)))
        sizes = [base + i * step for i in range(n)]
        return pattern, sizes if pattern == "growing" else sizes[::-1]
    if pattern == "random":
        return pattern, draw(st.lists(st.integers(1 * KiB, 4 * MiB), min_size=n, max_size=n))
    huge = draw(st.integers(4 * base, max(4 * base, 6 * MiB)))
    at = draw(st.integers(0, n - 1))
    return pattern, [huge if i == at else base for i in range(n)]


# --- what is held: the batches in flight and /dev/shm itself ----------------------------


class Sampled:
    """The bytes a folder's file system holds, read every ``every`` seconds in a thread."""

    def __init__(self, folder: Path, every: float = 0.002) -> None:
        self.folder, self.every = folder, every
        self.peak = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-shm-sampler", daemon=True)

    def used(self) -> int:
        stat = os.statvfs(self.folder)
        return (stat.f_blocks - stat.f_bfree) * stat.f_frsize

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.used())
            self.samples += 1
            time.sleep(self.every)

    def __enter__(self) -> Sampled:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture(scope="module")
def tmpfs(tmp_path_factory) -> Iterator[Path]:
    """A tmpfs of its own for the pools (the workers are forked: they see it too), so
    that what it holds is the prefetchers' alone, unmapped pages of removed files included."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path_factory.mktemp("shm")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@contextlib.contextmanager
def pools_in(folder: Path) -> Iterator[None]:
    saved = shm.files.ROOT
    shm.files.ROOT = folder
    try:
        yield
    finally:
        shm.files.ROOT = saved


# --- the promises together ---------------------------------------------------------------


def check_every_promise(tmpfs: Path, data, busy: bool = False) -> None:
    pattern, sizes = data.draw(size_patterns(), label="sizes")
    n = len(sizes)
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    container = data.draw(st.sampled_from(CONTAINERS), label="container")
    delays = data.draw(st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.003, 0.02]), min_size=n, max_size=n))
    mode = data.draw(st.sampled_from(["thread", "process"]), label="mode")
    workers = data.draw(st.integers(1, 3), label="workers")
    ordered = data.draw(st.booleans(), label="ordered") if container in ("pair", "dict") else True
    adaptive = data.draw(st.booleans(), label="adaptive")
    depth = None if adaptive else data.draw(st.integers(1, 5), label="depth")
    step = data.draw(st.sampled_from([0.0, 0.001, 0.004]), label="step")
    batch_bytes = [nbytes(batch_of(i, size, dtype, container)) for i, size in enumerate(sizes)]
    largest = max(batch_bytes)
    max_bytes = data.draw(st.integers(largest * 2 // 3, largest * 5), label="max_bytes")
    too_large = [i for i, size in enumerate(batch_bytes) if size > max_bytes]

    got: list[int] = []
    error = None
    with busy_cores() if busy else contextlib.nullcontext(), pools_in(tmpfs), Sampled(tmpfs) as sampled:
        base = sampled.used()  # 0 but after a case that failed (its batch held by the traceback)
        with Prefetcher(
            Source(sizes, delays, dtype, container),
            max_bytes=max_bytes,
            mode=mode,
            workers=workers,
            ordered=ordered,
            adaptive=adaptive,
            depth=depth,
            sample_memory=False,
        ) as p:
            try:
                for position, batch in enumerate(p):
                    i = received_index(batch, container) if not ordered else position
                    sent = batch_of(i, sizes[i], dtype, container)
                    assert all(same_bits(g, s) for g, s in zip(_arrays(batch), _arrays(sent))), f"batch {i} bent"
                    got.append(i)
                    del batch, sent
                    if step:
                        time.sleep(step)
            except BudgetExceeded as exc:
                error = exc
            trace = p.trace()
        time.sleep(0.01)
    # Exactly once, in order where asked; only a batch larger than the whole budget is an error.
    assert len(got) == len(set(got))
    if too_large:
        assert error is not None and any(f"({batch_bytes[i]} bytes) does not fit" in str(error) for i in too_large)
        assert set(got) <= set(range(n)) - set(too_large)
    else:
        assert error is None and sorted(got) == list(range(n)), (pattern, got)
        # In flight within the budget, but for the growth of batches under way when they grew:
        # as many as may be started and not built (a worker each, and one waiting for each process).
        under_way = workers if mode == "thread" else 2 * workers
        growth = max(0, largest - min(batch_bytes))
        assert peak_held(trace) <= max_bytes + under_way * growth, (pattern, sizes, max_bytes)
    if ordered:
        assert got == list(range(len(got)))
    # /dev/shm itself: never past the budget, and nothing left once closed.
    assert sampled.peak - base <= max_bytes, (pattern, sampled.peak - base, max_bytes)
    assert sampled.used() == base and list(tmpfs.iterdir()) == []
    assert_nothing_left_running()


def _arrays(batch) -> list[np.ndarray]:
    if isinstance(batch, np.ndarray):
        return [batch]
    if isinstance(batch, (tuple, list)):
        return [a for item in batch for a in _arrays(item)]
    if isinstance(batch, dict):
        return [a for value in batch.values() for a in _arrays(value)]
    return []


@pytest.mark.timeout(600)
@properties(60)
@given(data=st.data())
def test_every_promise_holds_on_sizes_dtypes_timings_and_worker_counts_nobody_designed(tmpfs, data):
    check_every_promise(tmpfs, data)


@pytest.mark.timeout(600)
@properties(20)
@given(data=st.data())
def test_every_promise_holds_with_both_cores_busy(tmpfs, data):
    check_every_promise(tmpfs, data, busy=True)


# --- kill points ---------------------------------------------------------------------------


def worker_processes() -> list[psutil.Process]:
    helpers = multiprocessing_helpers()
    return [c for c in psutil.Process().children() if c.pid not in helpers]


@pytest.mark.timeout(300)
@properties(8)
@given(
    kill_at=st.integers(0, 15),
    workers=st.integers(1, 3),
    size=st.integers(64 * KiB, 2 * MiB),
    ordered=st.booleans(),
)
def test_a_worker_killed_at_any_batch_ends_the_epoch_clearly_and_leaves_nothing(tmpfs, kill_at, workers, size, ordered):
    n = 24
    got: list[int] = []
    with pools_in(tmpfs):
        source = Source([size] * n, [0.002] * n, np.dtype("u1"), "pair")
        with Prefetcher(source, max_bytes=8 * size, mode="process", workers=workers, ordered=ordered) as p:
            with pytest.raises(WorkerDied):
                for position, (x, i) in enumerate(p):
                    assert same_bits(x, payload(int(i), size, np.dtype("u1")))
                    got.append(int(i))
                    del x
                    if position == kill_at:
                        os.kill(worker_processes()[0].pid, signal.SIGKILL)
                        time.sleep(0.6)  # more than a liveness check's interval
        time.sleep(0.01)
    assert len(got) == len(set(got)) and kill_at < len(got) < n
    if ordered:
        assert got == list(range(len(got)))
    assert list(tmpfs.iterdir()) == []
    assert_nothing_left_running()


VICTIM = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import queuetune

    class Source:
        def __len__(self):
            return 10**6

        def __getitem__(self, i):
            time.sleep(0.002)
            return np.full(int(sys.argv[3]), i % 251, np.uint8)

    if __name__ == "__main__":
        p = queuetune.Prefetcher(Source(), max_bytes="16MiB", mode="process", workers=int(sys.argv[2]))
        for i, batch in enumerate(p):
            if i == int(sys.argv[1]):
                print("ready", flush=True)
            time.sleep(0.001)
    """
)


@pytest.mark.timeout(300)
@properties(4)
@given(
    kill_at=st.integers(0, 40),
    workers=st.integers(1, 3),
    size=st.integers(64 * KiB, 2 * MiB),
    how=st.sampled_from([signal.SIGKILL, signal.SIGTERM]),
)
def test_the_consumer_killed_at_any_batch_leaves_no_worker_and_no_file(tmp_path_factory, kill_at, workers, size, how):
    folder = tmp_path_factory.mktemp("victim")
    script = folder / "victim.py"
    script.write_text(VICTIM)
    victim = subprocess.Popen(
        [sys.executable, str(script), str(kill_at), str(workers), str(size)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert victim.stdout is not None and victim.stdout.readline() == b"ready\n"
        family = psutil.Process(victim.pid).children(recursive=True)
        os.kill(victim.pid, how)
        victim.wait(timeout=30)
        _, alive = psutil.wait_procs(family, timeout=10)
        assert alive == [], f"left running after the consumer's death: {[p.pid for p in alive]}"
        assert sorted(shm.files.ROOT.glob(f"queuetune-{victim.pid}-*")) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)


# --- the cases that found the budget broken ------------------------------------------------


class Sized:
    """Batch i: ``sizes[i]`` bytes of uint8, all i % 251."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> np.ndarray:
        return np.full(self.sizes[i], i % 251, np.uint8)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("case", "settings"),
    [
        ("19 MiB then 1 MiB", {}),
        ("19 MiB then 1 MiB", {"adaptive": False, "depth": 8}),
        ("random from 1 KiB to 20 MiB", {}),
        ("growing by 64 KiB", {}),
    ],
)
def test_dev_shm_stays_within_max_bytes_at_every_sample_whatever_the_sizes(tmpfs, case, settings):
    """The reproductions: /dev/shm peaked at 114, 171 and 135 MiB against max_bytes of 64 MiB,
    and the growing batches ended the epoch at batch 66 with BudgetExceeded."""
    sizes = {
        "19 MiB then 1 MiB": [19 * MiB] + [MiB] * 60,
        "random from 1 KiB to 20 MiB": [int(s) for s in np.random.default_rng(0).integers(KiB, 20 * MiB, 60)],
        "growing by 64 KiB": [MiB + i * 64 * KiB for i in range(100)],
    }[case]
    got = []
    with pools_in(tmpfs), Sampled(tmpfs) as sampled:
        base = sampled.used()
        with Prefetcher(Sized(sizes), max_bytes="64MiB", workers=4, mode="process", **settings) as p:
            for i, batch in enumerate(p):
                assert batch.size == sizes[i] and batch[0] == batch[-1] == i % 251
                got.append(i)
                del batch
    assert got == list(range(len(sizes)))
    assert sampled.samples > 10 and sampled.peak - base <= 64 * MiB, sampled.peak - base
    assert sampled.used() == base
    assert_nothing_left_running()


@pytest.mark.timeout(300)
def test_batches_that_grow_finish_their_epoch_in_thread_mode_too():
    sizes = [MiB + i * 64 * KiB for i in range(100)]
    with Prefetcher(Sized(sizes), max_bytes="64MiB", workers=4, sample_memory=False) as p:
        assert [batch.size for batch in p] == sizes
    assert_nothing_left_running()
