"""Coverage without indices: samples told apart by a fingerprint of their
content (or the user's key), taken where the batch is built, workers included."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from helpers import assert_nothing_left_running
from queuetune.analysis.report import analyze
from queuetune.record import recorder as recorder_module
from queuetune.record.fingerprint import SampleKey, fingerprint
from queuetune.record.recorder import Channel, Recorder, built_here, clock
from queuetune.record.trace import Trace, TraceMeta


def test_fingerprints_tell_content_apart_and_agree_on_equal_content():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert fingerprint(a) == fingerprint(a.copy()) == fingerprint(np.asfortranarray(a))
    assert fingerprint(a) != fingerprint(a.astype(np.float64))
    assert fingerprint(a) != fingerprint(a.reshape(4, 3))
    assert fingerprint({"x": a, "y": 1}) == fingerprint({"y": 1, "x": a.copy()})
    assert fingerprint((a, 1)) != fingerprint((a, 2))
    assert fingerprint("ab") != fingerprint(b"ab") and fingerprint(np.float32(3)) == fingerprint(np.float32(3))
    assert -(2**63) <= fingerprint([1, "x", None]) < 2**63
    assert SampleKey(lambda s: s["id"])({"id": 2**70}) == fingerprint(2**70)
    assert SampleKey(lambda s: s[0])(("file-7.jpg", 0)) == fingerprint("file-7.jpg")
    with pytest.raises(TypeError, match="key must be a function of one sample"):
        SampleKey(3)  # type: ignore[arg-type]


@pytest.mark.torch
def test_fingerprints_of_a_tensor_and_its_array_agree():
    import torch

    t = torch.arange(6).reshape(2, 3)
    assert fingerprint(t) == fingerprint(t.numpy()) and fingerprint(t) != fingerprint(t.float())


def _emit_keys(channel: Channel, worker: int, batches: int, size: int) -> None:
    for b in range(batches):
        keys = tuple(worker * 10**6 + b * 1000 + i for i in range(size))
        channel.emit(built_here(0.0, 1.0, 8, index=None, key=(worker, b), samples=keys))


@pytest.mark.timeout(60)
def test_sample_keys_cross_the_pipe_whole_from_several_processes():
    # 300 keys a batch take several writes; two processes write at once.
    stored: list = []
    channel = Channel(stored.append, processes=True)
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_emit_keys, args=(channel, w, 20, 300)) for w in (1, 2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(30)
    channel.flush()
    channel.close()
    assert [p.exitcode for p in workers] == [0, 0]
    assert len(stored) == 40
    for record in stored:
        worker = 1 if record.samples[0] < 2 * 10**6 else 2
        assert record.samples[0] % 1000 == 0 and len(record.samples) == 300
        assert list(record.samples) == list(range(record.samples[0], record.samples[0] + 300))
        assert record.samples[0] // 10**6 == worker
    assert {r.samples[0] for r in stored} == {w * 10**6 + b * 1000 for w in (1, 2) for b in range(20)}


def test_a_run_keeps_a_bounded_number_of_sample_keys(monkeypatch):
    monkeypatch.setattr(recorder_module, "SAMPLE_KEYS_PER_RUN", 10)
    rec = Recorder(TraceMeta(), sample_memory=False)
    try:
        for _ in range(2):
            rec.run_begin()
            for b in range(4):
                t = clock()
                rec.channel.emit(built_here(t, t, 8, samples=tuple(range(b * 4, b * 4 + 4))))
                rec.consumed(t, t)
            rec.run_end()
        trace = rec.trace()
    finally:
        rec.close()
    kept = [p.samples for p in trace.produced]
    assert kept == [[0, 1, 2, 3], [4, 5, 6, 7], None, None] * 2
    assert [m.value for m in trace.marks if m.kind == "samples_capped"] == [10, 10]
    first, second = analyze(trace).coverage
    assert first.unit == "sample key" and first.consumed == 8 and first.unkeyed == 2
    assert (second.run, second.consumed, second.unkeyed) == (1, 8, 2)
    # The trace keeps them through JSON.
    assert Trace.from_dict(trace.to_dict()).produced[0].samples == [0, 1, 2, 3]


ITERABLE = """
import sys
import time
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

class Samples(IterableDataset):
    def __init__(self, sharded):
        self.sharded = sharded
    def __iter__(self):
        info = get_worker_info()
        for i in range(64):
            if self.sharded and info is not None and i % info.num_workers != info.id:
                continue
            yield torch.full((4,), float(i))

loader = DataLoader(Samples(sys.argv[1] == "sharded"), batch_size=8, num_workers=2)
batches = 0
for batch in loader:
    # A 5 ms training step: keying 8 small samples is priced at 24 µs a batch,
    # within the key budget (2 % of a step) however busy the machine is.
    time.sleep(0.005)
    batches += 1
print("batches", batches)
"""


@pytest.mark.torch
@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["unsharded", "sharded"])
def test_queuetune_run_finds_an_unsharded_iterable_dataset_read_by_every_worker(tmp_path, mode):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(ITERABLE))
    out = tmp_path / "D"
    done = subprocess.run(
        [sys.executable, "-m", "queuetune", "run", "--out", str(out), "--no-html", str(job), mode],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    [path] = sorted(out.glob("[0-9]*.json"))
    [cov] = analyze(Trace.load(path)).coverage
    assert cov.unit == "sample key" and cov.unkeyed == 0
    if mode == "unsharded":
        assert "batches 16" in done.stdout and cov.consumed == 128
        assert len(cov.duplicates) == 64 and cov.extra == 64
        assert all(r.count == 2 and len(r.workers) == 2 for r in cov.repeats)
        assert "each of 2 workers" in cov.cause and "get_worker_info" in cov.cause
        assert "more than once: 64 (64 extra)" in done.stdout and "get_worker_info" in done.stdout
    else:
        assert "batches 8" in done.stdout and cov.consumed == 64
        assert cov.duplicates == [] and cov.extra == 0 and cov.cause is None


@pytest.mark.torch
@pytest.mark.timeout(60)
def test_a_users_key_names_the_samples_and_false_takes_none():
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    import queuetune

    class Twice(IterableDataset):
        def __iter__(self):
            for i in [0, 1, 2, 3, 2, 5]:
                yield {"id": i, "x": torch.zeros(2)}

    loader = queuetune.watch(DataLoader(Twice(), batch_size=2), key=lambda s: s["id"])
    assert sum(1 for _ in loader) == 3
    [cov] = queuetune.report(loader).coverage
    queuetune.probe_of(loader).close()
    assert cov.duplicates == [2] and cov.consumed == 6 and cov.repeats[0].count == 2
    plain = queuetune.watch(DataLoader(Twice(), batch_size=2), key=False)
    assert sum(1 for _ in plain) == 3
    assert queuetune.report(plain).coverage == []
    queuetune.probe_of(plain).close()
    with pytest.raises(TypeError, match="key must be a function of one sample"):
        queuetune.watch(DataLoader(Twice(), batch_size=2), key="id")


@pytest.mark.torch
@pytest.mark.timeout(60)
def test_a_users_key_is_never_stopped_for_its_cost():
    """Items that cost nothing to fetch and 1 MiB each to fingerprint: queuetune's
    own keys stop after 32 items (test_coverage_load.py's
    test_keys_cut_for_their_cost_make_the_coverage_partial_and_say_so), a user's go on."""
    from torch.utils.data import DataLoader, IterableDataset

    import queuetune

    big = np.zeros(2**20, dtype=np.uint8)

    class Instant(IterableDataset):
        def __iter__(self):
            for _ in range(64):
                yield big

    keyed = queuetune.watch(
        DataLoader(Instant(), batch_size=4, collate_fn=lambda items: len(items)), key=lambda s: fingerprint(s)
    )
    assert sum(1 for _ in keyed) == 16
    [cov] = queuetune.report(keyed).coverage
    queuetune.probe_of(keyed).close()
    assert_nothing_left_running()
    assert cov.consumed == 64 and cov.unkeyed == 0


@pytest.mark.timeout(60)
def test_a_generators_batches_are_keyed_row_by_row():
    import queuetune

    def batches():
        x = np.arange(24, dtype=np.float32).reshape(12, 2)
        y = np.arange(12)
        for start in (0, 4, 8, 4):  # the second batch again at the end
            yield x[start : start + 4], y[start : start + 4]

    gen = queuetune.watch(batches())
    assert sum(len(b[1]) for b in gen) == 16
    [cov] = queuetune.report(gen).coverage
    queuetune.probe_of(gen).close()
    assert (cov.unit, cov.consumed, len(cov.duplicates), cov.extra) == ("sample key", 16, 4, 4)
    assert all(r.count == 2 for r in cov.repeats) and cov.cause is None
    # A dict of columns is split the same way; a batch that is no array is one sample.
    quiet = queuetune.watch(iter([{"a": np.zeros(3), "b": np.arange(3)}, "text", "text"]))
    assert len(list(quiet)) == 3
    [cov] = queuetune.report(quiet).coverage
    queuetune.probe_of(quiet).close()
    assert cov.consumed == 5 and cov.extra == 1


@pytest.mark.tf
@pytest.mark.timeout(120)
def test_a_tf_data_pass_is_keyed_on_its_way_to_the_model():
    import tensorflow as tf

    import queuetune

    dataset = tf.data.Dataset.range(16).batch(4)
    watched = queuetune.watch(dataset.concatenate(dataset.take(2)))
    assert sum(int(tf.size(b)) for b in watched) == 24
    [cov] = queuetune.report(watched).coverage
    queuetune.probe_of(watched).close()
    assert (cov.unit, cov.consumed, len(cov.duplicates)) == ("sample key", 24, 8)


@pytest.mark.timeout(30)
def test_a_recorder_nobody_holds_is_collected_and_its_channel_stops():
    import gc
    import threading
    import weakref

    rec = Recorder(TraceMeta(), processes=True, sample_memory=False)
    held = weakref.ref(rec)
    del rec
    gc.collect()
    assert held() is None
    for _ in range(100):
        if not any(t.name == "queuetune-channel" for t in threading.enumerate()):
            break
        threading.Event().wait(0.05)
    assert not any(t.name == "queuetune-channel" for t in threading.enumerate())
