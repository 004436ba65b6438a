"""The Prefetcher's device stage (issue 62, parts 1, 2 and 4), on the CPU: a
transfer that stands in for the copy to the device (:mod:`queuetune.prefetch.device.seam`)
delays and fails copies and records what is in flight; the stage hands every batch
once, in order, bit for bit, never more than ``device_depth`` copies or
``device_bytes`` ahead nor more than ``pinned_bytes`` of staging buffers; a copy's
error names its batch after the batches before it; ``close()`` with copies in flight
leaves nothing running and every buffer let go of; a state taken with copies in
flight resumes at the first batch not handed over."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
from tests.helpers import assert_nothing_left_running  # noqa: E402

from queuetune import BudgetExceeded, DeviceCopyError, Prefetcher, PrefetcherClosed  # noqa: E402
from queuetune.analysis.report import Report, analyze  # noqa: E402
from queuetune.prefetch.device import seam  # noqa: E402
from queuetune.prefetch.device.leaves import split  # noqa: E402
from queuetune.prefetch.device.transfer import HostCopy, HostTransfer  # noqa: E402
from queuetune.prefetch.shm import files  # noqa: E402
from queuetune.record.trace import Trace  # noqa: E402
from queuetune.render.html import Section, html_report  # noqa: E402
from queuetune.render.measures import report_rows  # noqa: E402
from queuetune.render.text import report_table  # noqa: E402

SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


class CopyFailed(RuntimeError):
    """The stand-in copy's own failure."""


class FakeTransfer(HostTransfer):
    """A stand-in copy to the device: numpy arrays and torch tensors staged into byte
    buffers and copied again as they start; ``delay`` seconds a copy, ``fail`` the
    number of the copy that fails (``where``: as it starts, or as it is waited for).
    It records the copies started and not yet waited for, and their bytes."""

    made: ClassVar[list[FakeTransfer]] = []

    def __init__(self, delay: float = 0.0, fail: int | None = None, where: str = "start") -> None:
        self.delay, self.fail, self.where = delay, fail, where
        self.started = 0
        self.in_flight: list[int] = []
        self.most_in_flight = 0
        self.most_bytes = 0
        self.lock = threading.Lock()
        FakeTransfer.made.append(self)

    def nbytes(self, leaf: Any) -> int | None:
        if isinstance(leaf, torch.Tensor):
            return leaf.numel() * leaf.element_size()
        return super().nbytes(leaf)

    def stage(self, leaf: Any, buffer: Any) -> Any:
        if isinstance(leaf, torch.Tensor):
            size = leaf.numel() * leaf.element_size()
            if size == 0:
                return leaf.clone()
            staged = torch.from_numpy(buffer[:size]).view(leaf.dtype).view(leaf.shape)
            return staged.copy_(leaf)
        return super().stage(leaf, buffer)

    def start(self, staged: list[Any]) -> Any:
        number = self.started
        self.started += 1
        if self.fail == number and self.where == "start":
            raise CopyFailed(f"copy {number} failed as it started")
        nbytes = sum(self.nbytes(leaf) or 0 for leaf in staged)
        with self.lock:
            self.in_flight.append(nbytes)
            self.most_in_flight = max(self.most_in_flight, len(self.in_flight))
            self.most_bytes = max(self.most_bytes, sum(self.in_flight))
        leaves = [leaf.clone() if isinstance(leaf, torch.Tensor) else leaf.copy() for leaf in staged]
        return FakeCopy(self, number, nbytes, leaves)


class FakeCopy(HostCopy):
    def __init__(self, transfer: FakeTransfer, number: int, nbytes: int, leaves: list[Any]) -> None:
        super().__init__(leaves)
        self.transfer, self.number, self.nbytes, self.begun = transfer, number, nbytes, time.monotonic()
        self.done = False

    def ready(self) -> list[Any]:
        self._finish()
        if self.transfer.fail == self.number and self.transfer.where == "ready":
            raise CopyFailed(f"copy {self.number} failed on the device")
        return self.leaves

    def finished(self) -> None:
        self._finish()

    def _finish(self) -> None:
        if self.done:
            return
        time.sleep(max(0.0, self.begun + self.transfer.delay - time.monotonic()))
        with self.transfer.lock:
            self.transfer.in_flight.remove(self.nbytes)
        self.done = True


@pytest.fixture(autouse=True)
def _nothing_made() -> Any:
    FakeTransfer.made.clear()
    yield
    FakeTransfer.made.clear()


def substituted(factory: Any) -> Any:
    """The seam with ``factory`` in force, the transfers made before forgotten (each
    example of a property is a test of its own)."""
    FakeTransfer.made.clear()
    return seam.substituted(factory)


def read_to_failure(p: Any, source: Any, fail: int, count: int) -> None:
    """Read an epoch of ``p``, which fails at batch ``fail`` (none where
    ``fail >= count``) with a named ``DeviceCopyError`` caused by ``CopyFailed``;
    the batches before it checked against ``source``."""
    got: list[Any] = []
    if fail >= count:
        got = list(p)
    else:
        with pytest.raises(DeviceCopyError, match=f"^batch {fail} of the epoch could not be copied to cuda") as info:
            for batch in p:
                got.append(batch)
        assert isinstance(info.value.__cause__, CopyFailed)
    assert len(got) == min(fail, count)
    for i, batch in enumerate(got):
        assert_same(batch, source[i])


def shm_files() -> list[str]:
    if not files.available():
        return []
    return [name for name in os.listdir(files.ROOT) if name.startswith(f"queuetune-{os.getpid()}-")]


def assert_clean(*prefetchers: Prefetcher) -> None:
    """Nothing of ``prefetchers`` left once closed: no thread, no process, no shared-memory file, no pinned buffer."""
    for prefetcher in prefetchers:
        prefetcher.close()
    assert_nothing_left_running()
    assert shm_files() == []
    for prefetcher in prefetchers:
        staging = prefetcher._kept.staging
        assert staging is None or staging.pool is None or staging.pool.held == 0


# -- what the batches are made of -------------------------------------------------

DTYPES = ["uint8", "int16", "int32", "int64", "float16", "float32", "float64", "bool", "complex64"]


class Batches:
    """An indexable source of ``count`` batches; batch ``i``'s arrays are drawn from
    ``i``, of ``sizes[i]`` elements, nested as ``form`` says."""

    def __init__(self, count: int, sizes: list[int], dtype: str, form: str) -> None:
        self.count, self.sizes, self.dtype, self.form = count, sizes, dtype, form

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> Any:
        if i >= self.count:
            raise IndexError(i)
        rng = np.random.default_rng(i)
        array = (rng.standard_normal(self.sizes[i % len(self.sizes)]) * 100).astype(self.dtype)
        if self.form == "array":
            return array
        tensor = torch.from_numpy(array[::-1].copy())
        if self.form == "dict":
            return {"x": array, "y": tensor, "name": f"batch {i}", "i": i}
        if self.form == "tuple":
            return (array, [tensor, "label", 3.5], {"nested": (array.reshape(-1, 1), i)})
        return [tensor, None, ("text", array)]


def assert_same(got: Any, expected: Any) -> None:
    """``got`` is ``expected`` bit for bit, container for container."""
    assert type(got) is type(expected)
    if isinstance(expected, dict):
        assert list(got) == list(expected)
        for key in expected:
            assert_same(got[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert_same(a, b)
    elif isinstance(expected, np.ndarray):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.tobytes() == expected.tobytes()
    elif isinstance(expected, torch.Tensor):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.numpy().tobytes() == expected.numpy().tobytes()
    else:
        assert got == expected


def largest(source: Batches) -> int:
    """The most bytes a batch of ``source`` moves to the device."""
    fake = FakeTransfer.__new__(FakeTransfer)  # not made: not one of FakeTransfer.made

    def moved(batch: Any) -> int:
        leaves, _ = split(batch, lambda leaf: fake.nbytes(leaf) is not None)
        return sum(fake.nbytes(leaf) or 0 for leaf in leaves)

    return max(moved(source[i]) for i in range(len(source)))


batches_drawn = st.builds(
    Batches,
    count=st.integers(1, 9),
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=4),
    dtype=st.sampled_from(DTYPES),
    form=st.sampled_from(["array", "dict", "tuple", "list"]),
)


@pytest.mark.timeout(300)
@SETTINGS
@given(
    source=batches_drawn,
    depth=st.integers(1, 4),
    budget=st.sampled_from([None, 1.0, 2.5]),
    delay=st.sampled_from([0.0, 0.002]),
    mode=st.sampled_from(["thread", "thread", "process"]),
)
def test_every_batch_once_in_order_bit_for_bit_within_depth_and_budgets(
    source: Batches, depth: int, budget: float | None, delay: float, mode: str
) -> None:
    most = largest(source)
    device_bytes = None if budget is None else max(1, int(most * budget))
    pinned = max(1 << 16, 4 * most)
    with substituted(lambda: FakeTransfer(delay=delay)):
        p = Prefetcher(
            source,
            max_bytes="8MiB",
            workers=2,
            mode=mode,
            device="cuda",
            device_depth=depth,
            device_bytes=device_bytes,
            pinned_bytes=pinned,
        )
    try:
        for _epoch in range(2):
            got = list(p)
            assert len(got) == len(source)
            for i, batch in enumerate(got):
                assert_same(batch, source[i])
            del got
        (fake,) = FakeTransfer.made
        assert fake.most_in_flight <= depth
        if device_bytes is not None:
            assert fake.most_bytes <= device_bytes
        assert p._kept.staging.pool.peak <= pinned
        assert fake.in_flight == []
    finally:
        assert_clean(p)


@pytest.mark.timeout(120)
def test_pinned_buffers_are_reused_not_made_afresh() -> None:
    made: list[int] = []

    class Counting(FakeTransfer):
        def allocate(self, nbytes: int) -> Any:
            made.append(nbytes)
            return super().allocate(nbytes)

    source = Batches(20, [1000, 1010, 990], "float32", "dict")
    with substituted(Counting):
        p = Prefetcher(source, max_bytes="8MiB", device="cuda", device_depth=2)
    try:
        for _epoch in range(3):
            assert len(list(p)) == 20
        # a buffer for each of the batches in flight at once, for each of its two arrays
        assert len(made) <= 2 * 3
    finally:
        assert_clean(p)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_built_batch_is_handed_over_without_waiting_for_the_builds_behind_it(mode: str, tmp_path: Path) -> None:
    """Batch 1 is built only once batch 0 has reached the step: a stage that took
    batches ahead before handing over the one asked for would wait for it forever."""
    source = Gated(tmp_path / "go")
    with substituted(FakeTransfer):
        p = Prefetcher(source, max_bytes="1MiB", device="cuda", device_depth=3, workers=2, mode=mode, timeout=60)
    try:
        batches = iter(p)
        first = next(batches)
        (tmp_path / "go").touch()
        assert [int(first[0])] + [int(b[0]) for b in batches] == [0, 1, 2, 3]
    finally:
        assert_clean(p)


class Gated:
    """Four batches; every one after the first is built once the file ``gate`` exists."""

    def __init__(self, gate: Path) -> None:
        self.gate = gate

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> np.ndarray:
        deadline = time.monotonic() + 50
        while index > 0 and not self.gate.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"batch {index} was asked for before batch 0 reached the step")
            time.sleep(0.01)
        return np.full(8, index)


@pytest.mark.timeout(300)
@SETTINGS
@given(
    count=st.integers(1, 8),
    fail=st.integers(0, 7),
    where=st.sampled_from(["start", "ready"]),
    depth=st.integers(1, 4),
    mode=st.sampled_from(["thread", "process"]),
)
def test_a_copy_error_names_its_batch_after_the_batches_before_it(
    count: int, fail: int, where: str, depth: int, mode: str
) -> None:
    source = Batches(count, [64, 300], "int32", "tuple")
    with substituted(lambda: FakeTransfer(fail=fail, where=where)):
        p = Prefetcher(source, max_bytes="8MiB", workers=2, mode=mode, device="cuda", device_depth=depth)
    try:
        read_to_failure(p, source, fail, count)
        assert FakeTransfer.made[0].in_flight == [] or where == "ready"
        # the next epoch, its copies made afresh, hands every batch over
        FakeTransfer.made[0].fail = None
        assert len(list(p)) == count
    finally:
        assert_clean(p)


@pytest.mark.timeout(120)
def test_a_host_error_comes_after_the_batches_before_it() -> None:
    class Broken(Batches):
        def __getitem__(self, i: int) -> Any:
            if i == 3:
                raise KeyError("item 3 is corrupt")
            return super().__getitem__(i)

    with substituted(FakeTransfer):
        p = Prefetcher(Broken(6, [100], "float32", "array"), max_bytes="1MiB", device="cuda", device_depth=3)
    try:
        got = []
        with pytest.raises(KeyError, match="item 3 is corrupt"):
            for batch in p:
                got.append(batch)
        assert len(got) == 3
    finally:
        assert_clean(p)


@pytest.mark.timeout(300)
@SETTINGS
@given(
    count=st.integers(1, 8),
    read=st.integers(0, 8),
    depth=st.integers(1, 4),
    delay=st.sampled_from([0.0, 0.01]),
    mode=st.sampled_from(["thread", "process"]),
    how=st.sampled_from(["close", "break"]),
)
def test_close_or_break_with_copies_in_flight_leaves_nothing(
    count: int, read: int, depth: int, delay: float, mode: str, how: str
) -> None:
    source = Batches(count, [2000], "float64", "dict")
    with substituted(lambda: FakeTransfer(delay=delay)):
        p = Prefetcher(source, max_bytes="8MiB", workers=2, mode=mode, device="cuda", device_depth=depth)
    try:
        it = iter(p)
        for i, batch in zip(range(read), it, strict=False):
            assert_same(batch, source[i])
        if how == "close":
            p.close()
            assert p._kept.staging.pool.held == 0
            if read < count:
                with pytest.raises(PrefetcherClosed):
                    next(it)
        else:
            del it  # a loop left with break: its iterator let go of
            assert len(list(p)) == count  # the next epoch hands every batch over
        assert FakeTransfer.made[0].in_flight == []
    finally:
        assert_clean(p)


@pytest.mark.timeout(300)
@SETTINGS
@given(
    count=st.integers(1, 8),
    taken=st.integers(0, 8),
    depth=st.integers(1, 4),
    shuffle=st.booleans(),
    mode=st.sampled_from(["thread", "process"]),
)
def test_a_state_taken_with_copies_in_flight_resumes_at_the_first_batch_not_handed_over(
    count: int, taken: int, depth: int, shuffle: bool, mode: str
) -> None:
    taken = min(taken, count)
    source = Batches(count, [50], "int64", "array")
    with substituted(FakeTransfer):
        p = Prefetcher(source, max_bytes="1MiB", shuffle=shuffle, seed=3, mode=mode, device="cuda", device_depth=depth)
        plain = Prefetcher(source, max_bytes="1MiB", shuffle=shuffle, seed=3)
    try:
        expected = [b.tobytes() for _ in range(2) for b in plain]
        plain.close()
        it = iter(p)
        got = [next(it).tobytes() for _ in range(taken)]
        state = p.state_dict()
        assert state["done"] == (taken if taken < count else 0)
        p.close()
        with substituted(FakeTransfer):
            resumed = Prefetcher(source, max_bytes="1MiB", shuffle=shuffle, seed=3, device="cuda", device_depth=depth)
        try:
            resumed.load_state_dict(state)
            if taken < count:
                got += [b.tobytes() for b in resumed]
            got += [b.tobytes() for b in resumed]
        finally:
            assert_clean(resumed)
        assert got == expected
    finally:
        assert_clean(plain, p)


@pytest.mark.timeout(120)
def test_batches_larger_than_a_budget_are_named_errors() -> None:
    source = Batches(3, [1000], "float64", "array")  # 8000 bytes a batch
    with substituted(FakeTransfer):
        on_device = Prefetcher(source, max_bytes="1MiB", device="cuda", device_bytes=4000)
        pinned = Prefetcher(source, max_bytes="1MiB", device="cuda", pinned_bytes=4000)
    try:
        with pytest.raises(BudgetExceeded, match="batch 0 of the epoch takes 8000 bytes on the device"):
            list(on_device)
        with pytest.raises(BudgetExceeded, match=r"batch 0 of the epoch needs 8000 bytes of pinned.*pinned_bytes=4000"):
            list(pinned)
    finally:
        assert_clean(on_device, pinned)


@pytest.mark.timeout(120)
def test_pin_memory_alone_lends_its_buffers_to_the_consumer() -> None:
    class Lending(FakeTransfer):
        lends = True

        def start(self, staged: list[Any]) -> Any:
            return HostCopy(staged)

    source = Batches(5, [100], "float32", "array")
    with substituted(Lending):
        p = Prefetcher(source, max_bytes="1MiB", pin_memory=True)
    try:
        got = list(p)
        for i, batch in enumerate(got):
            assert_same(batch, source[i])
        # every buffer handed over is the consumer's: the pool holds none of them
        assert p._kept.staging.pool.held == 0
        assert p.options.device is not None and p.options.device.device is None
    finally:
        assert_clean(p)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here")
@pytest.mark.timeout(60)
def test_device_cuda_without_cuda_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match=r"device='cuda' needs CUDA.*torch.cuda.is_available\(\) is False"):
        Prefetcher([np.zeros(3)], max_bytes="1MiB", device="cuda")
    with pytest.raises(RuntimeError, match="pin_memory=True needs CUDA"):
        Prefetcher([np.zeros(3)], max_bytes="1MiB", pin_memory=True)
    assert_nothing_left_running()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"device": "cpu"}, ValueError, "device must be a CUDA device"),
        ({"device": 3}, TypeError, "device must be a device's name"),
        ({"device": "cuda", "device_depth": 0}, ValueError, "device_depth must be a positive integer"),
        ({"device": "cuda", "device_bytes": "lots"}, ValueError, "device_bytes"),
        ({"device": "cuda", "pinned_bytes": -1}, ValueError, "pinned_bytes"),
        ({"pin_memory": "yes"}, TypeError, "pin_memory must be True or False"),
        ({"device_bytes": "1GiB"}, ValueError, "device_bytes needs device="),
        ({"pinned_bytes": "1GiB"}, ValueError, "pinned_bytes needs device= or pin_memory=True"),
    ],
)
@pytest.mark.timeout(60)
def test_bad_device_keywords_are_named(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with substituted(FakeTransfer), pytest.raises(error, match=message):
        Prefetcher([np.zeros(3)], max_bytes="1MiB", **kwargs)


@pytest.mark.timeout(120)
def test_off_means_the_path_of_before(monkeypatch: pytest.MonkeyPatch) -> None:
    pinned: list[object] = []
    original = torch.Tensor.pin_memory

    def pin_memory(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        pinned.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    source = [{"x": torch.arange(10), "y": np.arange(4)} for _ in range(4)]
    with Prefetcher(source, max_bytes="1MiB") as p:
        assert p._kept.staging is None and p.options.device is None
        it = iter(p)
        assert type(it).__name__ == "generator"  # the epoch's own loop, no stage around it
        assert len(list(it)) == 4
    assert pinned == []
    assert_nothing_left_running()


@pytest.mark.timeout(150)
def test_import_queuetune_and_a_prefetcher_with_no_device_import_no_torch() -> None:
    code = (
        "import sys, numpy as np, queuetune\n"
        "with queuetune.Prefetcher([np.zeros(3)] * 2, max_bytes='1MiB') as p: list(p)\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_close_from_another_thread_wakes_the_consumer(mode: str) -> None:
    source = Batches(40, [500], "float32", "array")
    with substituted(lambda: FakeTransfer(delay=0.05)):
        p = Prefetcher(source, max_bytes="1MiB", mode=mode, workers=1, device="cuda", device_depth=3)
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
    while not FakeTransfer.made or FakeTransfer.made[0].started < 3:
        time.sleep(0.005)
    p.close()
    reader.join(60)
    assert not reader.is_alive()
    assert isinstance(outcome[0], PrefetcherClosed)
    assert isinstance(outcome[-1], int) and outcome[-1] < 40
    assert_clean(p)


DTYPED = [np.dtype(name) for name in DTYPES]


@pytest.mark.parametrize("dtype", DTYPED, ids=str)
@pytest.mark.timeout(60)
def test_cuda_staging_is_bit_for_bit_on_the_host(dtype: np.dtype[Any]) -> None:
    """CudaTransfer's staging into a byte buffer (the pinned one where CUDA is,
    a plain one here): every dtype, strides, read-only arrays, tensors, no bytes."""
    from queuetune.prefetch.device.cuda import CudaTransfer
    from queuetune.prefetch.device.pinned import size_class

    transfer = CudaTransfer.__new__(CudaTransfer)  # no CUDA here: its staging alone
    transfer.torch, transfer.device, transfer.lends, transfer.stream = torch, None, True, None
    rng = np.random.default_rng(0)
    base = (rng.standard_normal((6, 10)) * 100).astype(dtype)
    frozen = base.copy()
    frozen.flags.writeable = False
    leaves = [
        base,
        base[:, ::3],
        base.T,
        frozen,
        base[:0],
        torch.from_numpy(base.copy()),
        torch.from_numpy(base.T.copy()).T,
    ]
    for leaf in leaves:
        nbytes = transfer.nbytes(leaf)
        assert nbytes is not None
        staged = transfer.stage(leaf, torch.zeros(size_class(nbytes), dtype=torch.uint8))
        expected = leaf.numpy() if isinstance(leaf, torch.Tensor) else leaf
        assert tuple(staged.shape) == expected.shape
        assert staged.numpy().tobytes() == np.ascontiguousarray(expected).tobytes()
    assert transfer.nbytes(np.array(["text"])) is None
    assert transfer.nbytes(np.arange(3, dtype=">i4")) is None
    assert transfer.nbytes("text") is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_on_cuda_batches_arrive_on_the_device_bit_for_bit(mode: str) -> None:
    source = Batches(12, [100_000, 90_000], "float32", "dict")
    p = Prefetcher(source, max_bytes="64MiB", mode=mode, device="cuda", device_depth=3, device_bytes="4MiB")
    try:
        for _epoch in range(2):
            for i, batch in enumerate(p):
                assert batch["x"].device.type == "cuda" and batch["y"].device.type == "cuda"
                assert batch["name"] == f"batch {i}"
                expected = source[i]
                assert_same(batch["x"].cpu().numpy(), expected["x"])
                assert_same(batch["y"].cpu(), expected["y"])
        assert p._kept.staging.pool.peak <= p.options.device.pinned_bytes
    finally:
        assert_clean(p)


class Stream:
    """A plain iterable (no length, no index): read by one thread, not resumable."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __iter__(self) -> Any:
        return iter([{"x": np.full(7, i), "tag": i} for i in range(self.count)])


@pytest.mark.timeout(60)
def test_a_plain_iterable_and_a_torch_device_go_through_the_stage() -> None:
    with substituted(FakeTransfer):
        p = Prefetcher(Stream(5), max_bytes="1MiB", device=torch.device("cuda", 0), device_depth=4)
    try:
        assert p.options.device is not None and p.options.device.device == "cuda:0"
        for _epoch in range(2):
            assert [(int(b["x"][0]), b["tag"]) for b in p] == [(i, i) for i in range(5)]
    finally:
        assert_clean(p)


@pytest.mark.timeout(60)
def test_the_consumers_stream_waits_on_the_batchs_event_alone() -> None:
    """CudaTransfer's copy, with torch's CUDA calls stood in for: the copies run on
    the side stream, the consumer's stream waits on their event, each tensor is
    recorded on the consumer's stream, and nothing synchronises the whole device."""
    import contextlib
    from types import SimpleNamespace

    from queuetune.prefetch.device.cuda import CudaTransfer

    calls: list[tuple[str, object]] = []
    current: list[object] = ["consumer"]

    class Stream:
        def __init__(self, name: str) -> None:
            self.name = name

        def wait_event(self, event: object) -> None:
            calls.append((f"{self.name} waits on", event))

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.timing = enable_timing

        def record(self, stream: Stream) -> None:
            calls.append(("event recorded on", stream.name))

        def synchronize(self) -> None:
            calls.append(("event synchronised", self))

        def query(self) -> bool:
            return True

        def elapsed_time(self, end: Event) -> float:
            assert self.timing and end.timing
            return 2.5  # milliseconds, as CUDA's events tell

    class Tensor:
        def __init__(self, where: str) -> None:
            self.where = where

        def to(self, device: str, non_blocking: bool = False) -> Tensor:
            calls.append(("copied on", current[-1]))
            assert non_blocking
            return Tensor(device)

        def record_stream(self, stream: Stream) -> None:
            calls.append(("recorded on", stream.name))

    @contextlib.contextmanager
    def on(stream: Stream) -> Any:
        current.append(stream.name)
        try:
            yield
        finally:
            current.pop()

    def synchronize() -> None:
        calls.append(("device synchronised", None))

    consumer = Stream("consumer")
    cuda = SimpleNamespace(stream=on, Event=Event, current_stream=lambda device=None: consumer, synchronize=synchronize)
    transfer = CudaTransfer.__new__(CudaTransfer)
    transfer.torch, transfer.device, transfer.lends = SimpleNamespace(cuda=cuda), "cuda", False
    transfer.stream = Stream("side")
    copy = transfer.start([Tensor("pinned"), Tensor("pinned")])
    leaves = copy.ready()
    assert [leaf.where for leaf in leaves] == ["cuda", "cuda"]
    event = next(e for kind, e in calls if kind == "consumer waits on")
    assert isinstance(event, Event)
    assert calls == [
        ("event recorded on", "side"),  # before the copies: their time begins
        ("copied on", "side"),
        ("copied on", "side"),
        ("event recorded on", "side"),
        ("consumer waits on", event),
        ("recorded on", "consumer"),
        ("recorded on", "consumer"),
    ]
    copy.finished()  # before its buffers are written again: that copy's event, not the device
    assert calls[-1] == ("event synchronised", event)
    assert copy.timed and copy.elapsed(wait=False) == 0.0025
    assert not any(kind == "device synchronised" for kind, _ in calls)


@pytest.mark.timeout(60)
def test_a_loop_owns_the_prefetcher_it_alone_holds() -> None:
    source = Batches(6, [100], "int64", "array")
    with substituted(FakeTransfer):
        got = list(Prefetcher(source, max_bytes="1MiB", device="cuda", device_depth=3))
        assert [int(b[0]) for b in got] == [int(source[i][0]) for i in range(6)]
        for i, _batch in enumerate(Prefetcher(source, max_bytes="1MiB", device="cuda")):
            if i == 2:
                break
    del got
    import gc

    gc.collect()
    assert_nothing_left_running()
    assert shm_files() == []


# -- what the report shows of the stage -----------------------------------------------

DEVICE_ROWS = (
    "pinned bytes (peak)",
    "device bytes ahead (peak)",
    "staged to handed over",
    "staging into pinned buffers",
)


def shown_rows(report: Report, trace: Trace) -> dict[str, str]:
    """``report``'s rows by label, and the whole of its text table (``text``) and HTML page (``html``)."""
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(report_table(report))
    page = html_report([Section("a", trace, report)])
    return {**dict(report_rows(report)), "text": console.export_text(), "html": page}


@pytest.mark.timeout(300)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(size=st.sampled_from([64, 1000, 4096]), depth=st.integers(1, 3), mode=st.sampled_from(["thread", "process"]))
def test_the_report_shows_each_copys_time_and_the_pinned_and_device_bytes(size: int, depth: int, mode: str) -> None:
    delay = 0.01
    source = Batches(6, [size], "float32", "dict")
    most = largest(source)
    device_bytes, pinned = depth * most, max(1 << 16, 4 * most)
    with substituted(lambda: FakeTransfer(delay=delay)):
        p = Prefetcher(
            source, max_bytes="8MiB", workers=2, mode=mode, device="cuda",
            device_depth=depth, device_bytes=device_bytes, pinned_bytes=pinned,
        )  # fmt: skip
    try:
        for _epoch in range(2):
            assert len(list(p)) == len(source)
        trace = p.trace()
        device = p.report().device
        assert device is not None and device.copies == 2 * len(source)
        # a bound, not a speed: each copy sleeps until `delay` after it started
        assert device.staged_median_seconds is not None and device.staged_median_seconds >= delay
        assert device.staged_max_seconds is not None and device.staged_max_seconds >= device.staged_median_seconds
        assert 0 < device.peak_pinned_bytes <= pinned
        assert most <= device.peak_device_bytes <= device_bytes
        numbers = [m.value["batch"] for m in trace.marks if m.kind == "device_copy"]
        assert numbers == [*range(len(source))] * 2
        # the marks read back from the trace's JSON, the report's section from its JSON
        again = Trace.from_json(trace.to_json())
        assert analyze(again).device == device
        assert Report.from_dict(json.loads(p.report().to_json())).device == device
        shown = shown_rows(p.report(), trace)
        assert all(shown[label] in shown["text"] and shown[label] in shown["html"] for label in DEVICE_ROWS)
        assert f"(n={2 * len(source)})" in shown["staged to handed over"]
    finally:
        assert_clean(p)


@pytest.mark.timeout(120)
def test_a_report_without_the_stage_shows_none_of_it() -> None:
    with Prefetcher(Batches(4, [100], "float32", "array"), max_bytes="1MiB", workers=2) as p:
        assert len(list(p)) == 4
        report = p.report()
    assert report.device is None
    assert json.loads(report.to_json())["device"] is None
    shown = shown_rows(report, p.trace())
    assert not any(label in shown or label in shown["text"] or label in shown["html"] for label in DEVICE_ROWS)
    assert not [m for m in p.trace().marks if m.kind in ("device_copy", "pinned_bytes", "device_bytes")]
    assert_nothing_left_running()
