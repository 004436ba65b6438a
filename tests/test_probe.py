"""The probe on plain generators and iterables: counts, order, errors, bad input."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import queuetune
from helpers import assert_nothing_left_running
from queuetune import Trace


def batches(n: int, size: int = 16):
    for i in range(n):
        yield np.full(size, i, dtype="float32")


@pytest.mark.timeout(30)
def test_generator_counts_every_batch_once_and_returns_them_unchanged():
    source = list(batches(5))
    watched = queuetune.watch(iter(source))
    got = list(watched)
    assert [g is s for g, s in zip(got, source)] == [True] * 5
    report = queuetune.report(watched)
    assert report.produced_batches == 5
    assert report.consumed_batches == 5
    assert report.read_ahead_batches == 0
    assert report.read_ahead_bytes == 0
    assert report.peak_in_flight_batches == 1
    assert report.peak_in_flight_bytes == 64
    assert report.batch_bytes.median == 64
    assert 0.0 <= report.input_bound_fraction <= 1.0
    assert report.verdict in {"not input-bound", "moderately input-bound", "highly input-bound"}
    queuetune.probe_of(watched).close()
    assert_nothing_left_running()


@pytest.mark.timeout(30)
def test_a_real_generator_stays_a_generator():
    import types

    watched = queuetune.watch(batches(2))
    assert isinstance(watched, types.GeneratorType)
    assert len(list(watched)) == 2
    queuetune.probe_of(watched).close()


@pytest.mark.timeout(30)
def test_iterable_records_one_run_and_epoch_per_pass():
    data = [np.zeros(4), np.zeros(4), np.zeros(4)]
    watched = queuetune.watch(data)
    assert len(watched) == 3
    for _ in range(2):
        for _batch in watched:
            pass
    trace = queuetune.probe_of(watched).trace()
    assert [c.run for c in trace.consumed] == [0, 0, 0, 1, 1, 1]
    assert [c.epoch for c in trace.consumed] == [0, 0, 0, 1, 1, 1]
    kinds = [m.kind for m in trace.marks]
    assert kinds.count("run_begin") == 2 and kinds.count("run_end") == 2
    queuetune.probe_of(watched).close()
    assert_nothing_left_running()


@pytest.mark.timeout(30)
def test_break_ends_the_run_and_counts_only_what_was_taken():
    watched = queuetune.watch(list(batches(10)))
    for i, _ in enumerate(watched):
        if i == 2:
            break
    report = queuetune.report(watched)
    assert report.consumed_batches == 3
    assert report.produced_batches == 3
    assert report.wall_seconds is not None and report.wall_seconds >= 0
    queuetune.probe_of(watched).close()
    assert_nothing_left_running()


@pytest.mark.timeout(30)
def test_a_slow_start_does_not_make_a_loader_that_then_never_waits_input_bound():
    def slow_to_start():
        time.sleep(0.5)  # workers starting, files opened
        for i in range(15):
            yield np.full(8, i)

    watched = queuetune.watch(slow_to_start())
    for _ in watched:
        time.sleep(0.05)
    report = queuetune.report(watched)
    assert report.start is not None
    assert report.start.first_batch_seconds >= 0.5
    assert report.start.built_before_asked == 0  # a generator builds only when asked
    # Over the whole run the start alone is over 20 % of the time...
    assert report.input_wait_seconds / report.wall_seconds > 0.2
    # ...but the steady state waits for nothing.
    assert report.steady_seconds >= 14 * 0.05
    assert report.input_bound_fraction < 0.05
    assert report.verdict == "not input-bound"
    queuetune.probe_of(watched).close()


@pytest.mark.timeout(30)
def test_consumer_time_and_input_wait_are_attributed_to_the_right_side():
    def slow_source():
        for _ in range(4):
            time.sleep(0.02)
            yield np.zeros(8)

    watched = queuetune.watch(slow_source())
    for _ in watched:
        pass
    report = queuetune.report(watched)
    # every batch took >= 20 ms to build; the consumer did nothing
    assert report.producer_time.median >= 0.02
    assert report.input_wait_seconds >= 4 * 0.02
    assert report.input_bound_fraction > 0.5
    assert report.verdict == "highly input-bound"
    queuetune.probe_of(watched).close()


@pytest.mark.timeout(30)
def test_an_error_in_the_loader_reaches_the_user_unchanged_and_the_trace_is_kept():
    boom = RuntimeError("disk gone at batch 3")

    def failing():
        yield from batches(3)
        raise boom

    watched = queuetune.watch(failing())
    seen = 0
    with pytest.raises(RuntimeError) as info:
        for _ in watched:
            seen += 1
    assert info.value is boom
    assert seen == 3
    report = queuetune.report(watched)
    assert report.produced_batches == 3 and report.consumed_batches == 3
    assert report.errors == ["RuntimeError: disk gone at batch 3"]
    restored = Trace.from_json(queuetune.probe_of(watched).trace().to_json())
    assert len(restored.produced) == 3
    queuetune.probe_of(watched).close()
    assert_nothing_left_running()


@pytest.mark.parametrize("bad", [5, 2.5, "abc", b"xy", None, {"a": 1}, True, object()])
def test_watch_rejects_what_is_not_a_loader(bad):
    with pytest.raises(TypeError, match="watch\\(\\) needs a loader"):
        queuetune.watch(bad)


def test_watching_twice_and_unknown_objects_are_clear_errors():
    watched = queuetune.watch([1, 2])
    with pytest.raises(ValueError, match="already watched"):
        queuetune.watch(watched)
    with pytest.raises(ValueError, match="not watched"):
        queuetune.probe_of([1, 2])
    queuetune.probe_of(watched).close()


def test_import_queuetune_does_not_import_frameworks():
    import subprocess
    import sys

    code = (
        "import sys, queuetune, queuetune.cli, queuetune.estimate.memory, queuetune.analysis.report;"
        "print(sorted(m for m in ('torch', 'keras', 'tensorflow', 'matplotlib', 'jax') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_import_queuetune_works_when_no_framework_can_be_imported(tmp_path):
    import subprocess
    import sys

    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'torch', 'keras', 'tensorflow', 'matplotlib', 'jax'}:\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    code = (
        "import queuetune\n"
        "g = queuetune.watch([1, 2]); print(sum(1 for _ in g))\n"
        "try:\n"
        "    from queuetune.frameworks import require; require('keras', 'keras')\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "2"
    assert "pip install 'queuetune[keras]'" in lines[1]


@pytest.mark.timeout(60)
def test_a_recorder_sampling_across_runs_reads_no_child_in_the_consumers_thread(monkeypatch):
    """The prefetcher's workers outlive its epochs, and so does its memory
    sampler: an epoch's start and end cost the consumer no reading of the
    workers' memory (milliseconds each at a dozen workers); the sampler's
    thread makes them, until close()."""
    from queuetune.record.real_memory import ProcessMemory, TreeMemory
    from queuetune.record.recorder import MemorySampler, Recorder
    from queuetune.record.trace import TraceMeta

    readers = []
    monkeypatch.setattr(
        MemorySampler, "_read_children", lambda self: readers.append(threading.current_thread().name) or (0, 0)
    )
    monkeypatch.setattr(
        MemorySampler,
        "_read_tree",
        lambda self: readers.append(threading.current_thread().name) or TreeMemory(ProcessMemory(0, 1, 1, 1)),
    )
    recorder = Recorder(TraceMeta(loader="demo"), processes=True, memory_interval=0.01, sample_across_runs=True)
    try:
        for _ in range(3):
            recorder.run_begin()
            time.sleep(0.05)
            recorder.run_end()
        assert readers and set(readers) == {"queuetune-memory"}
        assert len(recorder.trace().memory) >= 6
    finally:
        recorder.close()
    assert_nothing_left_running()


def test_an_adapter_says_what_it_adds_and_leaves_the_meta_it_is_given():
    from queuetune.frameworks import PYTHON
    from queuetune.frameworks.adapters import adapter_of
    from queuetune.record.records import TraceMeta, with_fields

    adapter = adapter_of(PYTHON)
    added = adapter.describe([b"a", b"b"])
    assert added == {"loader": "iterable", "framework": "python", "type": "list", "depth": 0, "num_batches": 2}
    meta = TraceMeta(name="given")
    watched, recorder = adapter.watch([b"a", b"b"], with_fields(meta, added), sample_memory=False)
    try:
        assert list(watched) == [b"a", b"b"]
        assert (recorder.meta.name, recorder.meta.loader, recorder.meta.num_batches) == ("given", "iterable", 2)
        assert meta == TraceMeta(name="given")
    finally:
        recorder.close()
