"""A watched DataLoader's pinning and the step's copies of its batches to the
device, measured where they happen (torch's pin-memory thread or main process;
the step's ``.to``/``.cuda``), and the headline that recommends copying ahead
only where the step waits for its copies.

torch pins nothing without an accelerator, so these run on the CPU with stand-ins:
an accelerator said to be available, a pinning that takes ``PIN`` seconds and
hands the batch back as it is, and copies to the ``meta`` device (another device
that any machine has) that take ``COPY`` seconds where a test makes them slow.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torch.utils.data import _utils as torch_utils  # noqa: E402

import queuetune  # noqa: E402
from helpers import assert_nothing_left_running  # noqa: E402
from queuetune.analysis.device import DeviceUse  # noqa: E402
from queuetune.analysis.report import analyze  # noqa: E402
from queuetune.frameworks.torch import pinning  # noqa: E402
from queuetune.record.trace import Consumed, Mark, Trace, TraceMeta  # noqa: E402
from queuetune.tune.headline import advise  # noqa: E402

pytestmark = pytest.mark.torch

PIN = 0.004


@pytest.fixture
def accelerator(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """An accelerator torch takes as available, and a pinning that takes ``PIN``
    seconds (the list: when each pinning began)."""
    began: list[float] = []

    def pin(data: Any, device: Any = None) -> Any:
        if data is not None:  # persistent workers answer None as each pass begins
            began.append(time.perf_counter())
        time.sleep(PIN)
        return data

    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a: None)
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    monkeypatch.setattr(torch.accelerator, "set_device_index", lambda index: None)
    monkeypatch.setattr(torch_utils.pin_memory, "pin_memory", pin)
    yield began
    gc.collect()  # a loader's iterator let go of: its pin-memory thread shut down
    assert not pinning._owners, "a thread's pinning is still timed"
    assert torch_utils.pin_memory.pin_memory is pin, "torch's pinning function was not given back"


def slow_copies(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """``Tensor.to`` taking ``seconds`` more on each call (set before a pass opens)."""
    inherited = torch._C.TensorBase.to

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        time.sleep(seconds)
        return inherited(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)


def data(n: int = 24) -> torch.Tensor:
    return torch.arange(n * 4, dtype=torch.float32).reshape(n, 4)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("workers", "persistent"), [(0, False), (2, False), (2, True)])
def test_a_loaders_pinning_is_timed_for_every_batch_it_pins(accelerator, workers, persistent):
    loader = queuetune.watch(
        DataLoader(data(), batch_size=4, num_workers=workers, pin_memory=True, persistent_workers=persistent)
    )
    try:
        for _ in range(2):
            assert [b.shape[0] for b in loader] == [4] * 6
        report = queuetune.report(loader)
    finally:
        queuetune.probe_of(loader).close()
        del loader
    assert report.device is not None
    assert report.device.pins == 12 == len(accelerator)
    assert report.device.pin_median_seconds is not None and report.device.pin_median_seconds >= PIN
    assert report.device.copies == 0 and report.device.step_copies == 0
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_another_threads_pinning_is_neither_timed_nor_changed(accelerator):
    recorder = queuetune.record.recorder.Recorder(TraceMeta())
    try:
        pinning.own(threading.current_thread(), recorder)
        elsewhere: list[Any] = []
        other = threading.Thread(target=lambda: elsewhere.append(torch_utils.pin_memory.pin_memory("x")))
        other.start()
        other.join(10)
        assert elsewhere == ["x"] and recorder.trace().marks == []
        assert torch_utils.pin_memory.pin_memory(["a", "b"]) == ["a", "b"]
        assert [m.kind for m in recorder.trace().marks] == ["pin_copy"]
    finally:
        pinning.disown(threading.current_thread())
        recorder.close()


@pytest.mark.timeout(60)
def test_without_an_accelerator_nothing_is_pinned_timed_or_wrapped():
    assert not torch.accelerator.is_available()
    loader = queuetune.watch(DataLoader(data(8), batch_size=4, pin_memory=False))
    try:
        for batch in loader:
            assert "to" not in torch.Tensor.__dict__
            batch.to("meta")
        report = queuetune.report(loader)
    finally:
        queuetune.probe_of(loader).close()
    assert report.device is None


def _steps(loader: Any, step: float, copy: bool) -> None:
    for batch in loader:
        if copy:
            batch.to("meta")
        time.sleep(step)


@pytest.mark.timeout(120)
def test_the_steps_copies_are_timed_a_step_each_and_the_methods_given_back(accelerator, monkeypatch):
    slow_copies(monkeypatch, 0.02)
    stand_in = torch.Tensor.__dict__["to"]
    loader = queuetune.watch(DataLoader(data(), batch_size=4))
    try:
        for _ in range(2):
            _steps(loader, 0.002, copy=True)
            # The pass is over: its methods are given back, the stand-in in place again.
            assert torch.Tensor.__dict__["to"] is stand_in
        report = queuetune.report(loader)
        trace = queuetune.probe_of(loader).trace()
    finally:
        queuetune.probe_of(loader).close()
    marks = [m.value for m in trace.marks if m.kind == "step_copy"]
    assert [m["batch"] for m in marks] == list(range(6)) * 2
    assert all(m["bytes"] == 4 * 4 * 4 and m["pageable"] == m["bytes"] and m["seconds"] >= 0.02 for m in marks)
    use = report.device
    assert use is not None and use.step_copies == 12 and use.pageable_share == 1.0
    assert use.step_copy_share is not None and use.step_copy_share > 0.5
    _, headline = advise(trace, report)
    if headline.bottleneck in ("the model", "the hand-over"):
        assert "copies of its batches to the device" in headline.next_step
        assert "pin_memory=True" in headline.next_step


@pytest.mark.timeout(60)
def test_a_copy_of_a_tensor_the_loader_did_not_hand_over_is_not_the_steps(accelerator):
    other = torch.ones(3)
    loader = queuetune.watch(DataLoader(data(8), batch_size=4))
    try:
        for _ in loader:
            other.to("meta")
            other.to(torch.float64)
        trace = queuetune.probe_of(loader).trace()
    finally:
        queuetune.probe_of(loader).close()
    assert [m for m in trace.marks if m.kind == "step_copy"] == []
    assert "to" not in torch.Tensor.__dict__ and "cuda" not in torch.Tensor.__dict__


def _trace(step: float, copy: float, pageable: bool, framework: str = "torch", n: int = 40) -> Trace:
    """A model-bound run of ``n`` batches (each built long before it was asked for)
    whose steps take ``step`` seconds, ``copy`` of them in copies to the device."""
    from queuetune.record.trace import Produced

    produced = [Produced(0.0, 0.001, 64, key=(i,)) for i in range(n)]
    consumed, marks, t = [], [], 1.0
    for i in range(n):
        consumed.append(Consumed(t, t, run=0, epoch=0, nbytes=64, key=(i,)))
        if copy:
            value = {"batch": i, "seconds": copy, "bytes": 64, "pageable": 64 * pageable}
            marks.append(Mark(t + copy, "step_copy", value))
        t += step
    meta = TraceMeta(framework=framework, loader="dataloader", settings={"num_workers": 2, "pin_memory": not pageable})
    return Trace(meta=meta, produced=produced, consumed=consumed, marks=marks)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    step=st.floats(0.001, 1.0),
    part=st.one_of(st.just(0.0), st.floats(1e-6, 1.0)),
    pageable=st.booleans(),
    framework=st.sampled_from(["torch", "queuetune", "python"]),
)
def test_the_headline_names_the_copy_only_where_the_step_waits_for_it(step, part, pageable, framework):
    trace = _trace(step, step * part, pageable, framework)
    report = analyze(trace)
    _, headline = advise(trace, report)
    use = report.device
    assert headline.bottleneck == "the model"
    names = "copies of its batches to the device" in headline.next_step
    if part == 0:
        assert use is None and not names
        return
    assert use is not None and use.step_copy_share is not None
    # n copies over the n - 1 steps whose end is seen.
    assert use.step_copy_share == pytest.approx(min(1.0, part * 40 / 39))
    assert names == (use.step_copy_share >= 0.05), (use.step_copy_share, headline.next_step)
    if names:
        assert ("pageable" if pageable else "pinned") in headline.next_step
        assert "Prefetcher(device=" in headline.next_step or 'device="cuda"' in headline.next_step
        if framework == "torch" and pageable:
            assert "pin_memory=True" in headline.next_step


def test_a_report_saved_before_the_copies_were_measured_reads_as_before():
    old = {"copies": 3, "staged_median_seconds": 0.1, "staged_max_seconds": 0.2, "peak_pinned_bytes": 8}
    use = DeviceUse.from_dict({**old, "peak_device_bytes": 4})
    assert use.pins == 0 and use.step_copies == 0 and use.step_copy_share is None


RUN_SCRIPT = """
import time, torch
from torch.utils.data import DataLoader
from torch.utils.data import _utils

# Stand-ins for a machine with an accelerator: pinning and copies that take time.
torch.accelerator.is_available = lambda: True
torch.accelerator.current_accelerator = lambda *a: None
torch.accelerator.current_device_index = lambda: 0
torch.accelerator.set_device_index = lambda index: None
_utils.pin_memory.pin_memory = lambda data, device=None: (time.sleep(0.002), data)[1]
inherited = torch.Tensor.to
torch.Tensor.to = lambda self, *a, **k: (time.sleep(0.02), inherited(self, *a, **k))[1]

loader = DataLoader(torch.arange(160).float().reshape(40, 4), batch_size=4, num_workers={workers}, pin_memory=True)
for batch in loader:
    batch.to("meta")
    time.sleep(0.005)
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("workers", [0, 1])
def test_queuetune_run_shows_the_pinning_and_names_the_copy_it_waits_for(tmp_path, workers):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(RUN_SCRIPT.format(workers=workers)))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "queuetune", "run", "--out", str(out), "--json", str(job)],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    [loader] = summary["loaders"]
    device = loader["report"]["device"]
    assert device["pins"] == 10 and device["pin_median_seconds"] >= 0.002
    assert device["step_copies"] == 10 and device["pageable_share"] == 1.0
    assert device["step_copy_share"] > 0.5
    headline = loader["headline"]
    if headline["bottleneck"] != "loading":
        assert "copies of its batches to the device" in headline["text"]
    text = subprocess.run(
        [sys.executable, "-m", "queuetune", "report", str(out)], capture_output=True, text=True, timeout=60
    )
    assert text.returncode == 0, text.stderr
    assert "pinned by the loader" in text.stdout and "copies to the device in the step" in text.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_prefetchers_steps_copies_are_timed_and_its_headline_names_its_device_stage(accelerator, monkeypatch, mode):
    slow_copies(monkeypatch, 0.02)
    stand_in = torch.Tensor.__dict__["to"]
    items = [torch.full((8,), float(i)) for i in range(12)]
    with queuetune.Prefetcher(items, batch_size=2, max_bytes="1MiB", workers=1, mode=mode) as p:
        for _ in range(2):
            got = []
            for batch in p:
                got.append(batch.to("meta").shape[0])
                time.sleep(0.002)
            assert got == [2] * 6
        report, trace = p.report(), p.recorder.trace()
    marks = [m.value for m in trace.marks if m.kind == "step_copy"]
    assert [m["batch"] for m in marks] == list(range(6)) * 2 and all(m["bytes"] == 64 for m in marks)
    assert report.device is not None and report.device.step_copies == 12
    assert torch.Tensor.__dict__["to"] is stand_in  # given back as each epoch ended
    _, headline = advise(trace, report)
    if headline.bottleneck != "loading":
        assert 'device="cuda"' in headline.next_step
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_a_copy_traced_by_torch_compile_is_passed_through_untimed(accelerator):
    loader = queuetune.watch(DataLoader(data(8), batch_size=4))
    try:
        for batch in loader:
            with pytest.MonkeyPatch.context() as tracing:
                tracing.setattr(torch.compiler, "is_compiling", lambda: True)
                assert batch.to("meta").device.type == "meta"
        trace = queuetune.probe_of(loader).trace()
    finally:
        queuetune.probe_of(loader).close()
    assert [m for m in trace.marks if m.kind == "step_copy"] == []
