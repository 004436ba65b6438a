"""The probe on torch DataLoaders: counts, bounds, order, coverage, errors, cleanup."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.torch]
torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset, IterableDataset  # noqa: E402

import queuetune  # noqa: E402
from helpers import assert_nothing_left_running  # noqa: E402
from queuetune import Trace  # noqa: E402
from queuetune.analysis.report import analyze  # noqa: E402
from queuetune.record.matching import match  # noqa: E402

N, WIDTH = 40, 4


class Numbers(Dataset):
    """Item ``i`` is a float32 vector filled with ``i``; item ``bad`` raises."""

    def __init__(self, n: int = N, bad: int | None = None) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.bad:
            raise ValueError(f"bad sample {i}")
        return torch.full((WIDTH,), float(i))


class Stream(IterableDataset):
    """Yields 0..n-1 as vectors, split between workers."""

    def __init__(self, n: int = N) -> None:
        self.start, self.n = 0, n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        step = 1 if info is None else info.num_workers
        first = self.start + (0 if info is None else info.id)
        for i in range(first, self.n, step):
            yield torch.full((WIDTH,), float(i))


class SizedStream(Stream):
    def __len__(self) -> int:
        return self.n - self.start


def items(batch: torch.Tensor) -> list[int]:
    """The sample indices a batch of :class:`Numbers` vectors holds."""
    return batch.reshape(-1, WIDTH)[:, 0].int().tolist()


def matched(trace: Trace) -> list[int | None]:
    """For each consumed batch, the produced batch the analysis matched it to."""
    result = match(trace)
    return list(getattr(result, "consumed", result))


def finish(loader) -> None:
    """Close the probe and check that nothing it or the loader started is left."""
    gc.collect()
    queuetune.probe_of(loader).close()
    assert_nothing_left_running()


def settled_report(loader):
    probe = queuetune.probe_of(loader)
    probe.settle(quiet=0.1)
    return probe.report()


def depth(loader) -> int:
    return queuetune.probe_of(loader).trace().meta.depth


@pytest.mark.timeout(60)
def test_the_watched_loader_is_a_dataloader_with_the_same_settings():
    original = DataLoader(Numbers(), batch_size=8, shuffle=True, num_workers=2, prefetch_factor=3)
    loader = queuetune.watch(original)
    assert isinstance(loader, DataLoader)
    assert len(loader) == len(original) == 5
    assert loader.sampler is original.sampler
    assert (loader.batch_size, loader.drop_last, loader.num_workers) == (8, False, 2)
    assert loader.prefetch_factor == 3 and loader.in_order
    assert len(loader.dataset) == N and loader.dataset.bad is None
    meta = queuetune.probe_of(loader).trace().meta
    assert meta.loader == "dataloader" and meta.framework == "torch"
    assert meta.type == "Numbers"
    assert meta.settings == {
        "num_workers": 2,
        "prefetch_factor": 3,
        "pin_memory": False,
        "batch_size": 8,
        "persistent_workers": False,
    }
    assert meta.depth == 6 and meta.num_samples == N and meta.num_batches == 5
    assert meta.versions == {"torch": torch.__version__}
    finish(loader)


@pytest.mark.timeout(60)
def test_without_workers_the_depth_is_zero_and_prefetch_factor_none():
    loader = queuetune.watch(DataLoader(Numbers(), batch_size=8))
    meta = queuetune.probe_of(loader).trace().meta
    # No read-ahead: the loop builds each batch when it asks (frameworks.TORCH agrees).
    assert meta.depth == 0 and meta.settings["prefetch_factor"] is None
    finish(loader)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_full_epoch_is_produced_and_consumed_once_in_order(workers):
    loader = queuetune.watch(DataLoader(Numbers(), batch_size=4, num_workers=workers))
    got = [items(batch) for batch in loader]
    assert got == [list(range(i, i + 4)) for i in range(0, N, 4)]
    report = settled_report(loader)
    assert report.produced_batches == report.consumed_batches == len(loader) == 10
    assert report.read_ahead_batches == 0 and report.read_ahead_bytes == 0
    assert 1 <= report.peak_in_flight_batches <= depth(loader) + 1
    assert report.batch_bytes.median == 4 * WIDTH * 4
    trace = queuetune.probe_of(loader).trace()
    assert [c.samples for c in trace.consumed] == got
    assert None not in matched(trace)
    assert all(c.nbytes == 4 * WIDTH * 4 for c in trace.consumed)
    kinds = [m.kind for m in trace.marks]
    assert kinds.count("run_begin") == kinds.count("run_end") == 1
    if workers:
        assert {p.worker for p in trace.produced} <= {str(pid) for pid in _worker_pids(trace)}
        assert len({p.worker for p in trace.produced}) == 2
    finish(loader)


def _worker_pids(trace: Trace) -> set[int]:
    return {int(p.worker) for p in trace.produced if p.worker.isdigit()}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_break_counts_what_was_taken_and_bounds_the_read_ahead(workers):
    loader = queuetune.watch(DataLoader(Numbers(200), batch_size=2, num_workers=workers))
    k = 5
    for i, _batch in enumerate(loader):
        if i == k - 1:
            break
    assert_nothing_left_running(threads=False)
    report = settled_report(loader)
    ahead = loader.prefetch_factor * workers if workers else 0
    assert report.consumed_batches == k
    assert k <= report.produced_batches <= k + ahead
    assert report.read_ahead_batches == report.produced_batches - k
    assert report.peak_in_flight_batches <= ahead + 1
    kinds = [m.kind for m in queuetune.probe_of(loader).trace().marks]
    assert kinds.count("run_end") == 1
    finish(loader)


def break_then_full_epoch(k: int = 3):
    loader = queuetune.watch(DataLoader(Numbers(), batch_size=2, num_workers=2))
    for i, _batch in enumerate(loader):
        if i == k - 1:
            break
    assert_nothing_left_running(threads=False)
    assert sum(1 for _ in loader) == 20
    return loader


@pytest.mark.timeout(60)
def test_a_broken_pass_then_a_full_pass_are_counted_per_run():
    loader = break_then_full_epoch()
    trace = queuetune.probe_of(loader).trace()
    assert [c.run for c in trace.consumed] == [0] * 3 + [1] * 20
    report = settled_report(loader)
    assert report.consumed_batches == 23
    assert 23 <= report.produced_batches <= 23 + depth(loader)
    # The broken pass reads as cut short (34 samples not reached), not as 34 never seen.
    found = [(c.run, c.consumed, c.cut_short, c.not_reached, c.never_count) for c in report.coverage]
    assert found == [(0, 6, True, 34, None), (1, 40, False, None, 0)]
    finish(loader)


@pytest.mark.timeout(60)
def test_read_ahead_dropped_by_a_broken_pass_does_not_count_in_flight_later():
    loader = break_then_full_epoch()
    try:
        trace = queuetune.probe_of(loader).trace()
        begins = {m.value: m.t for m in trace.marks if m.kind == "run_begin"}
        paired = [
            (c.run, trace.produced[j].start >= begins[c.run])
            for c, j in zip(trace.consumed, matched(trace))
            if j is not None
        ]
        assert all(built_in_run for _, built_in_run in paired)
        assert settled_report(loader).peak_in_flight_batches <= depth(loader) + 1
    finally:
        finish(loader)


@pytest.mark.timeout(60)
def test_a_slow_consumer_fills_the_queue_but_not_beyond_its_depth():
    import time

    loader = queuetune.watch(DataLoader(Numbers(), batch_size=2, num_workers=2, prefetch_factor=2))
    for _batch in loader:
        time.sleep(0.01)
    report = settled_report(loader)
    assert report.produced_batches == report.consumed_batches == 20
    assert report.peak_in_flight_batches <= 2 * 2 + 1
    finish(loader)


def slow_worker_start(worker_id: int) -> None:
    import time

    time.sleep(1.0)  # a worker opening files, loading an index


@pytest.mark.timeout(60)
def test_workers_slow_to_start_are_the_start_not_an_input_bound_steady_state():
    import time

    loader = queuetune.watch(DataLoader(Numbers(), batch_size=2, num_workers=2, worker_init_fn=slow_worker_start))
    for _batch in loader:
        time.sleep(0.1)
    report = settled_report(loader)
    assert report.start is not None and report.start.first_batch_seconds >= 1.0
    # With the start, over a quarter of the run waited; after it, the workers kept ahead.
    assert report.input_wait_seconds / report.wall_seconds > 0.25
    assert report.steady_seconds >= 19 * 0.1
    assert report.verdict == "not input-bound"
    finish(loader)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("workers", [0, 2])
def test_shuffled_epochs_cover_every_sample_exactly_once(workers):
    generator = torch.Generator().manual_seed(7)
    loader = queuetune.watch(
        DataLoader(Numbers(), batch_size=6, shuffle=True, num_workers=workers, generator=generator)
    )
    epochs = [[items(batch) for batch in loader] for _ in range(2)]
    for seen in epochs:
        flat = [i for batch in seen for i in batch]
        assert sorted(flat) == list(range(N))
    assert epochs[0] != epochs[1]
    report = settled_report(loader)
    assert [(c.run, c.epoch) for c in report.coverage] == [(0, 0), (1, 1)]
    for cov in report.coverage:
        assert cov.unit == "sample" and cov.consumed == cov.total == N
        assert cov.duplicates == [] and cov.never_count == 0
    trace = queuetune.probe_of(loader).trace()
    assert [c.samples for c in trace.consumed] == epochs[0] + epochs[1]
    assert None not in matched(trace)
    assert report.produced_batches == report.consumed_batches == 14
    finish(loader)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("workers", [0, 2])
def test_the_shuffle_order_is_the_one_the_unwatched_loader_gives(workers):
    def make():
        g = torch.Generator().manual_seed(123)
        return DataLoader(Numbers(), batch_size=5, shuffle=True, num_workers=workers, generator=g)

    plain = make()
    expected = [[items(b) for b in plain] for _ in range(2)]
    del plain
    loader = queuetune.watch(make())
    assert [[items(b) for b in loader] for _ in range(2)] == expected
    finish(loader)


@pytest.mark.timeout(60)
def test_a_custom_batch_sampler_is_used_and_its_batches_keyed():
    plan = [[5, 1], [0, 2, 3], [4], [1, 5]]
    original = DataLoader(Numbers(6), batch_sampler=plan, num_workers=2)
    loader = queuetune.watch(original)
    assert loader.batch_sampler is plan and len(loader) == 4
    assert [items(b) for b in loader] == plan
    report = settled_report(loader)
    assert report.produced_batches == report.consumed_batches == 4
    assert report.coverage[0].duplicates == [1, 5] and report.coverage[0].never_count == 0
    assert None not in matched(queuetune.probe_of(loader).trace())
    finish(loader)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_without_automatic_batching_each_item_is_a_batch(workers):
    loader = queuetune.watch(DataLoader(Numbers(12), batch_size=None, num_workers=workers))
    assert len(loader) == 12
    got = [items(b) for b in loader]
    assert got == [[i] for i in range(12)]
    report = settled_report(loader)
    assert report.produced_batches == report.consumed_batches == 12
    trace = queuetune.probe_of(loader).trace()
    assert sorted(p.index for p in trace.produced) == list(range(12))
    assert [c.samples for c in trace.consumed] == got
    assert None not in matched(trace)
    assert report.coverage[0].never_count == 0 and report.coverage[0].duplicates == []
    finish(loader)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_an_iterable_dataset_records_each_collated_batch(workers):
    loader = queuetune.watch(DataLoader(Stream(16), batch_size=4, num_workers=workers))
    got = sorted(i for b in loader for i in items(b))
    assert got == list(range(16))
    report = settled_report(loader)
    assert report.produced_batches == report.consumed_batches == 4
    assert report.read_ahead_batches == 0
    # No indices: the samples are told apart by their content, each once.
    [cov] = report.coverage
    assert (cov.unit, cov.consumed, cov.duplicates, cov.unkeyed) == ("sample key", 16, [], 0)
    trace = queuetune.probe_of(loader).trace()
    assert all(p.index is None and p.key is None for p in trace.produced)
    assert all(p.end >= p.start for p in trace.produced)
    assert trace.meta.type == "Stream" and trace.meta.num_samples is None
    finish(loader)


@pytest.mark.timeout(60)
def test_an_iterable_dataset_without_a_length_keeps_having_none():
    original = DataLoader(Stream(8), batch_size=4)
    loader = queuetune.watch(original)
    assert not hasattr(loader.dataset, "__len__")
    with pytest.raises(TypeError):
        len(loader)
    sized = queuetune.watch(DataLoader(SizedStream(10), batch_size=4))
    assert len(sized) == 3 and len(sized.dataset) == 10
    assert queuetune.probe_of(sized).trace().meta.num_batches == 3
    assert sum(1 for _ in loader) == 2 and sum(1 for _ in sized) == 3
    finish(sized)
    finish(loader)


def _skip_first_half(worker_id: int) -> None:
    dataset = torch.utils.data.get_worker_info().dataset
    dataset.start = dataset.n // 2


@pytest.mark.timeout(60)
def test_worker_init_fn_reaches_the_dataset_through_the_wrapper():
    loader = queuetune.watch(DataLoader(Stream(16), batch_size=2, num_workers=2, worker_init_fn=_skip_first_half))
    assert sorted(i for b in loader for i in items(b)) == list(range(8, 16))
    assert settled_report(loader).produced_batches == 4
    finish(loader)


def raised_by(loader) -> tuple[list[list[int]], Exception]:
    """The batches a loop over ``loader`` saw before it raised, and the exception."""
    seen = []
    try:
        for batch in loader:
            seen.append(items(batch))
    except Exception as exc:
        # Without its traceback the failed iterator (and its workers) goes now,
        # not at the next garbage collection, which waits for each worker.
        exc.__traceback__ = None
        return seen, exc
    raise AssertionError("the loader did not raise")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_error_reaches_the_user_and_the_batches_before_it_are_kept(workers):
    def make(dataset):
        return DataLoader(dataset, batch_size=2, num_workers=workers)

    _, expected = raised_by(make(Numbers(20, bad=9)))
    loader = queuetune.watch(make(Numbers(20, bad=9)))
    seen, error = raised_by(loader)
    assert type(error) is type(expected) is ValueError
    message = str(error)
    assert "bad sample 9" in message
    if workers:
        # torch adds the worker's traceback, whose frames differ
        assert message.splitlines()[0] == str(expected).splitlines()[0]
    else:
        assert message == str(expected)
    assert seen == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert_nothing_left_running(threads=False)
    report = settled_report(loader)
    assert report.consumed_batches == 4
    assert 4 <= report.produced_batches <= 4 + depth(loader)
    assert len(report.errors) == 1 and report.errors[0].startswith("ValueError: ")
    assert "bad sample 9" in report.errors[0]
    assert report.coverage[0].consumed == 8
    finish(loader)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_iterating_on_after_an_error_keeps_batches_and_indices_in_step(workers):
    loader = queuetune.watch(DataLoader(Numbers(20, bad=9), batch_size=2, num_workers=workers))
    it = iter(loader)
    seen, errors = [], 0
    while True:
        try:
            seen.append(items(next(it)))
        except StopIteration:
            break
        except ValueError:
            errors += 1
    del it
    assert errors == 1 and len(seen) == 9
    trace = queuetune.probe_of(loader).trace()
    assert [c.samples for c in trace.consumed] == seen
    assert None not in matched(trace)
    finish(loader)


@pytest.mark.timeout(60)
def test_each_iter_is_one_run_and_a_new_iter_ends_the_previous_run():
    loader = queuetune.watch(DataLoader(Numbers(8), batch_size=2))
    first = iter(loader)
    next(first)
    second = iter(loader)
    next(first)
    assert len(list(second)) == 4
    trace = queuetune.probe_of(loader).trace()
    assert [(c.run, c.epoch) for c in trace.consumed] == [(0, 0)] + [(1, 1)] * 4
    kinds = [m.kind for m in trace.marks]
    assert kinds.count("run_begin") == kinds.count("run_end") == 2
    del first, second
    finish(loader)


@pytest.mark.timeout(60)
def test_closing_the_iterator_ends_the_run_and_stops_the_workers():
    loader = queuetune.watch(DataLoader(Numbers(), batch_size=2, num_workers=2))
    it = iter(loader)
    next(it)
    it.close()
    assert_nothing_left_running(threads=False)
    trace = queuetune.probe_of(loader).trace()
    assert [m.kind for m in trace.marks].count("run_end") == 1
    del it
    finish(loader)


@pytest.mark.timeout(90)
def test_persistent_workers_serve_several_runs():
    loader = queuetune.watch(DataLoader(Numbers(), batch_size=8, shuffle=True, num_workers=2, persistent_workers=True))
    for _ in range(2):
        assert sorted(i for b in loader for i in items(b)) == list(range(N))
    report = settled_report(loader)
    assert len(report.coverage) == 2
    assert all(c.never_count == 0 and not c.duplicates for c in report.coverage)
    assert report.consumed_batches == 10 and report.produced_batches == 10
    probe = queuetune.probe_of(loader)
    del loader
    gc.collect()
    probe.close()
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_batches_delivered_out_of_order_are_still_counted():
    loader = queuetune.watch(DataLoader(Numbers(), batch_size=4, num_workers=2, in_order=False))
    got = sorted(i for b in loader for i in items(b))
    assert got == list(range(N))
    report = settled_report(loader)
    assert report.produced_batches == report.consumed_batches == 10
    finish(loader)


@pytest.mark.timeout(60)
def test_the_trace_round_trips_through_json():
    loader = queuetune.watch(DataLoader(Numbers(), batch_size=4, shuffle=True, num_workers=2))
    for i, _batch in enumerate(loader):
        if i == 5:
            break
    assert_nothing_left_running(threads=False)
    queuetune.probe_of(loader).settle(quiet=0.1)
    trace = queuetune.probe_of(loader).trace()
    restored = Trace.from_json(trace.to_json())
    assert restored == trace
    assert analyze(restored).to_dict() == analyze(trace).to_dict()
    assert matched(restored) == matched(trace)
    finish(loader)


@pytest.mark.timeout(60)
def test_a_plain_loop_gets_its_report_in_one_line(capsys):
    loader = queuetune.watch(DataLoader(Numbers(), batch_size=8))
    for _x in loader:
        pass
    queuetune.print_report(loader)
    out = capsys.readouterr().out
    assert "Numbers" in out and "torch" in out
    assert "5 batches" in out and "40 of 40 samples consumed" in out
    finish(loader)


SPAWN_SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing.resource_tracker as tracker
    import psutil, torch, queuetune
    from torch.utils.data import DataLoader, TensorDataset

    if __name__ == "__main__":
        data = TensorDataset(torch.arange(24).float().reshape(24, 1))
        loader = queuetune.watch(DataLoader(
            data, batch_size=4, shuffle=True, num_workers=2, multiprocessing_context="spawn"))
        seen = [int(x) for (batch,) in loader for x in batch[:, 0]]
        probe = queuetune.probe_of(loader)
        probe.settle(quiet=0.1)
        report = probe.report()
        probe.close()
        import time
        deadline = time.monotonic() + 10
        while True:
            left = [c.pid for c in psutil.Process().children(recursive=True)
                    if c.pid != tracker._resource_tracker._pid and c.status() != psutil.STATUS_ZOMBIE]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        print(json.dumps({
            "seen": seen,
            "produced": report.produced_batches,
            "consumed": report.consumed_batches,
            "coverage": [[c.consumed, c.never_count, c.duplicates] for c in report.coverage],
            "workers": len({p.worker for p in probe.trace().produced}),
            "left": left,
        }))
    """
)


@pytest.mark.timeout(120)
def test_spawned_workers_report_through_the_channel(tmp_path):
    # In a child interpreter: spawn starts a resource tracker process that
    # would outlive this test in the pytest process.
    script = tmp_path / "spawn_probe.py"
    script.write_text(SPAWN_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=100, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(result["seen"]) == list(range(24))
    assert result["produced"] == result["consumed"] == 6
    assert result["coverage"] == [[24, 0, []]]
    assert result["workers"] == 2
    assert result["left"] == []


@pytest.mark.keras
@pytest.mark.timeout(120)
def test_keras_fit_and_predict_accept_the_watched_loader():
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("needs the torch backend of Keras")
    data = torch.utils.data.TensorDataset(torch.randn(32, 3), torch.randn(32, 1))
    loader = queuetune.watch(DataLoader(data, batch_size=8, shuffle=True, num_workers=2))
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    history = model.fit(loader, epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1
    before = len(queuetune.probe_of(loader).trace().consumed)
    assert model.predict(loader, verbose=0).shape == (32, 1)
    report = settled_report(loader)
    assert report.consumed_batches - before == 4
    assert report.coverage[-1].consumed == 32 and report.coverage[-1].never_count == 0
    assert all(not c.duplicates for c in report.coverage)
    finish(loader)


@pytest.mark.timeout(60)
def test_memory_of_the_process_and_its_worker_processes_is_sampled():
    import time

    loader = queuetune.watch(DataLoader(Numbers(), batch_size=2, num_workers=2))
    for _batch in loader:
        time.sleep(0.02)  # long enough for several samples while the workers live
    report = settled_report(loader)
    trace = queuetune.probe_of(loader).trace()
    assert report.peak_rss_bytes > 0
    assert max(m.n_children for m in trace.memory) == 2
    assert report.peak_children_bytes > 0
    assert report.peak_total_bytes >= report.peak_rss_bytes
    finish(loader)
