"""The probe on Keras 3 PyDatasets and generators, with the callback (torch backend)."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = [pytest.mark.keras]
keras = pytest.importorskip("keras")

import queuetune  # noqa: E402
from helpers import assert_nothing_left_running  # noqa: E402

BATCH, FEATURES, CLASSES = 32, 6, 3


class Batches(keras.utils.PyDataset):
    def __init__(self, n=None, fail_at=None, **kwargs):
        super().__init__(**kwargs)
        self.n, self.fail_at = n, fail_at

    @property
    def num_batches(self):
        return self.n

    def __getitem__(self, index):
        if index == self.fail_at:
            raise KeyError(f"bad record {index}")
        x = np.full((BATCH, FEATURES), index, dtype="float32")
        y = np.eye(CLASSES, dtype="float32")[np.arange(BATCH) % CLASSES]
        return x, y


@pytest.fixture(scope="module")
def model():
    inp = keras.Input((FEATURES,))
    m = keras.Model(inp, keras.layers.Dense(CLASSES, activation="softmax")(inp))
    m.compile("sgd", "categorical_crossentropy")
    return m


class SlowStep(keras.callbacks.Callback):
    """Makes the model the slow side, so the loader's queue fills up."""

    def on_predict_batch_end(self, batch, logs=None):
        time.sleep(0.02)


def predict(model, ds, steps, slow=False):
    probe = queuetune.probe_of(ds)
    # the probe's callback goes last: time in the callbacks before it is the model's
    callbacks = ([SlowStep()] if slow else []) + [probe.keras_callback(print_report=False)]
    out = model.predict(ds, steps=steps, verbose=0, callbacks=callbacks)
    probe.settle()
    return out, probe


@pytest.mark.timeout(60)
@pytest.mark.parametrize("queue_size,expected", [(10, 21), (2, 13)])
def test_pydataset_with_workers_builds_queue_plus_one_ahead(model, queue_size, expected):
    ds = queuetune.watch(Batches(workers=4, max_queue_size=queue_size))
    out, probe = predict(model, ds, steps=10, slow=True)
    report = probe.report()
    assert out.shape == (10 * BATCH, CLASSES)
    assert report.consumed_batches == 10
    assert report.produced_batches == expected
    assert report.read_ahead_batches == expected - 10
    assert report.read_ahead_bytes == (expected - 10) * report.batch_bytes.median
    # the queue, the one the feeder is blocked putting, and the one the model holds
    assert queue_size <= report.peak_in_flight_batches <= queue_size + 2
    assert report.peak_building_batches <= 4
    assert report.meta.depth == queue_size + 1
    probe.close()
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_pydataset_with_one_worker_is_synchronous(model):
    ds = queuetune.watch(Batches(workers=1, max_queue_size=10))
    _, probe = predict(model, ds, steps=10)
    report = probe.report()
    assert report.produced_batches == report.consumed_batches == 10
    assert report.peak_in_flight_batches == 1
    assert [c.consumed for c in report.coverage] == [10]
    probe.close()
    assert_nothing_left_running()


@pytest.mark.timeout(90)
def test_pydataset_with_processes_counts_batches_built_in_workers(model):
    ds = queuetune.watch(Batches(workers=2, use_multiprocessing=True, max_queue_size=3))
    _, probe = predict(model, ds, steps=6)
    report = probe.report()
    trace = probe.trace()
    assert report.consumed_batches == 6
    assert 6 <= report.produced_batches <= 6 + 3 + 1
    assert all(p.worker.isdigit() for p in trace.produced)  # built in other processes
    assert len({p.worker for p in trace.produced} - {str(__import__("os").getpid())}) >= 1
    probe.close()
    assert_nothing_left_running(timeout=20)


def recording_model():
    """A model that notes the first feature of every batch a training step receives
    (the batch index, as Batches builds them): the ground truth of consumption."""
    seen = []

    class Recording(keras.Model):
        def train_step(self, data):
            seen.append(int(data[0][0, 0]))
            return super().train_step(data)

    inp = keras.Input((FEATURES,))
    m = Recording(inp, keras.layers.Dense(CLASSES, activation="softmax")(inp))
    m.compile("sgd", "categorical_crossentropy")
    return m, seen


def truth_coverage(seen, per_epoch, total):
    rows = []
    for e in range(len(seen) // per_epoch):
        epoch = seen[e * per_epoch : (e + 1) * per_epoch]
        dup = sorted({i for i in epoch if epoch.count(i) > 1})
        never = [i for i in range(total) if i not in epoch]
        rows.append((e, per_epoch, dup, never))
    return rows


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers,shuffle", [(1, True), (2, True), (2, False)])
def test_fit_coverage_matches_what_the_training_steps_received(workers, shuffle):
    model, seen = recording_model()
    ds = queuetune.watch(Batches(n=8, workers=workers, max_queue_size=4))
    probe = queuetune.probe_of(ds)
    model.fit(
        ds,
        validation_data=Batches(n=3),
        epochs=2,
        shuffle=shuffle,
        verbose=0,
        callbacks=[probe.keras_callback(print_report=False)],
    )
    probe.settle()
    report = probe.report()
    assert len(seen) == 16
    assert report.consumed_batches == 16
    assert report.consumed_outside_steps == 1  # Keras builds the model with one batch
    got = [(c.epoch, c.consumed, c.duplicates, c.never) for c in report.coverage]
    assert got == truth_coverage(seen, 8, 8)
    assert report.read_ahead_batches == report.produced_batches - 17
    trace = probe.trace()
    assert [m.kind for m in trace.marks].count("pause_begin") == 2  # two validations
    probe.close()
    assert_nothing_left_running()


@pytest.mark.timeout(120)
def test_keras_enqueuer_carries_batches_across_epochs_and_the_report_shows_it():
    """Keras 3's enqueuer serves batches left from the model build first: with
    workers > 1 and no shuffle, the first epoch repeats some batches and skips others."""
    model, seen = recording_model()
    ds = queuetune.watch(Batches(n=8, workers=2, max_queue_size=4))
    probe = queuetune.probe_of(ds)
    model.fit(ds, epochs=1, shuffle=False, verbose=0, callbacks=[probe.keras_callback(print_report=False)])
    probe.settle()
    report = probe.report()
    cov = report.coverage[0]
    assert seen != list(range(8))
    assert cov.duplicates and cov.never_count > 0
    # The headline names them, with the fix.
    from queuetune.tune.headline import advise

    line = advise(probe.trace(), report)[1].text()
    listed = ", ".join(str(d) for d in cov.duplicates[:5])
    assert f"Coverage: epoch 0 took {len(cov.duplicates)} batches more than once ({listed}" in line
    assert "set workers=1, or read the PyDataset through queuetune.Prefetcher" in line
    probe.close()


@pytest.mark.timeout(120)
def test_an_epoch_cut_by_steps_per_epoch_reads_cut_short():
    model, seen = recording_model()
    ds = queuetune.watch(Batches(n=8, workers=1))
    probe = queuetune.probe_of(ds)
    model.fit(ds, epochs=2, steps_per_epoch=3, verbose=0, callbacks=[probe.keras_callback(print_report=False)])
    probe.settle()
    report = probe.report()
    assert len(seen) == 6
    rows = [(c.epoch, c.cut_short, c.batches, c.not_reached, c.never) for c in report.coverage]
    assert rows == [(0, True, 3, 5, []), (1, True, 3, 5, [])]
    probe.close()
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_generator_under_keras_counts_the_peeked_batches(model):
    def gen():
        i = 0
        while True:
            yield np.full((BATCH, FEATURES), i, "float32"), np.zeros((BATCH, CLASSES), "float32")
            i += 1

    watched = queuetune.watch(gen())
    _, probe = predict(model, watched, steps=5)
    report = probe.report()
    assert report.consumed_batches == 5
    assert report.produced_batches == 5  # Keras peeks 2, then uses them first
    assert report.peak_in_flight_batches == 2
    probe.close()


@pytest.mark.timeout(60)
def test_an_error_in_a_worker_reaches_fit_unchanged(model):
    ds = queuetune.watch(Batches(n=10, fail_at=4, workers=2, max_queue_size=2))
    probe = queuetune.probe_of(ds)
    with pytest.raises(KeyError, match="bad record 4"):
        model.predict(ds, verbose=0, callbacks=[probe.keras_callback(print_report=False)])
    probe.settle()
    report = probe.report()
    assert report.consumed_batches == 4
    assert 4 <= report.produced_batches <= 9
    probe.close()
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_callback_prints_the_report(model, capsys):
    ds = queuetune.watch(Batches(workers=2, max_queue_size=2), name="printed")
    probe = queuetune.probe_of(ds)
    model.predict(ds, steps=3, verbose=0, callbacks=[probe.keras_callback()])
    out = capsys.readouterr().out
    assert "queuetune: printed" in out
    assert "consumed (reached the model)" in out and "3 batches" in out
    probe.close()


def test_without_the_callback_the_report_says_how_to_record_consumption(model):
    ds = queuetune.watch(Batches(n=4, workers=1))
    model.predict(ds, verbose=0)
    report = queuetune.report(ds)
    assert report.produced_batches == 4
    assert report.consumed_batches is None
    assert any("keras_callback" in note for note in report.notes)
    queuetune.probe_of(ds).close()
