"""Pure analysis of synthetic traces: in flight, waits, matching, coverage, verdicts."""

from __future__ import annotations

import dataclasses
import json

import pytest

from queuetune.analysis.report import SECTIONS, Report, analyze, assemble, section_of, verdict
from queuetune.analysis.waits import Waits
from queuetune.record.matching import match
from queuetune.record.trace import Consumed, Mark, MemorySample, Produced, Trace


def run_marks(begin, end, run=0):
    return [Mark(begin, "run_begin", run), Mark(end, "run_end", run)]


def test_the_sections_hold_every_field_of_the_report_once():
    named = [f.name for kind in SECTIONS for f in dataclasses.fields(kind)]
    assert len(named) == len(set(named))
    assert {"meta", *named} == {f.name for f in dataclasses.fields(Report)}
    assert all(dataclasses.fields(kind) and kind.__dataclass_params__.frozen for kind in SECTIONS)


def test_a_report_is_its_sections_side_by_side():
    produced = [Produced(i * 0.1, i * 0.1 + 0.05, 10, index=i) for i in range(4)]
    consumed = [Consumed(0.5 + i if i else 0.0, 0.5 + i) for i in range(3)]
    trace = Trace(produced=produced, consumed=consumed, marks=run_marks(0.0, 4.5), end=4.5)
    r = analyze(trace)
    assert assemble(r.meta, *(section_of(kind, r) for kind in SECTIONS)) == r
    waits = section_of(Waits, r)
    assert (waits.input_wait_seconds, waits.verdict) == (r.input_wait_seconds, r.verdict)


def test_queue_that_fills_ahead_of_a_slow_consumer():
    # 4 batches built at t=0..0.3 (10 bytes each), consumed one per second from t=0.5
    produced = [Produced(i * 0.1, i * 0.1 + 0.05, 10, index=i) for i in range(4)]
    consumed = [Consumed(0.5 + i if i else 0.0, 0.5 + i) for i in range(4)]
    trace = Trace(produced=produced, consumed=consumed, marks=run_marks(0.0, 4.5), end=4.5)
    r = analyze(trace)
    assert (r.produced_batches, r.consumed_batches, r.read_ahead_batches) == (4, 4, 0)
    assert r.peak_in_flight_batches == 4 and r.peak_in_flight_bytes == 40
    assert r.peak_building_batches == 1
    assert r.input_wait_seconds == pytest.approx(0.5)
    assert r.wall_seconds == pytest.approx(4.5)
    # The only wait is the first batch's: the start, not the steady state.
    assert r.start is not None
    assert (r.start.runs, r.start.built_before_asked) == (1, 0)
    assert r.start.first_batch_seconds == pytest.approx(0.5)
    assert r.steady_wait_seconds == pytest.approx(0.0)
    assert r.steady_seconds == pytest.approx(4.0)
    assert r.input_bound_fraction == pytest.approx(0.0)
    assert r.verdict == "not input-bound"
    assert r.consumer_step.median == pytest.approx(1.0)
    assert r.producer_time.median == pytest.approx(0.05)


def test_a_slow_start_is_reported_apart_and_the_verdict_is_the_steady_states():
    # 12 workers take 3 s to start while the consumer waits from t=0; then 100
    # steps of 0.1 s, each waiting 2 ms for a batch already built: hand-over, not starvation.
    produced = [Produced(2.0, 2.9 + i * 0.01, 10, index=i) for i in range(12)]
    produced += [Produced(3.0 + i * 0.1, 3.05 + i * 0.1, 10, index=12 + i) for i in range(88)]
    consumed = [Consumed(0.0, 3.0)]
    consumed += [Consumed(3.0 + i * 0.102, 3.002 + i * 0.102) for i in range(1, 100)]
    end = consumed[-1].consumed + 0.1
    r = analyze(Trace(produced=produced, consumed=consumed, marks=run_marks(0.0, end), end=end))
    assert r.start is not None
    assert r.start.first_batch_seconds == pytest.approx(3.0)
    assert r.start.built_before_asked == 0  # it asked at once
    assert r.steady_wait_seconds == pytest.approx(99 * 0.002)
    assert r.steady_seconds == pytest.approx(end - 3.0)
    assert r.steady_handover_seconds == pytest.approx(99 * 0.002)
    assert r.steady_starved_seconds == pytest.approx(0.0)
    assert r.handover.n == 99 and r.handover.median == pytest.approx(0.002)
    assert r.input_bound_fraction == pytest.approx(0.0)
    assert r.verdict == "not input-bound"
    # Counted with the start, the same run would read as input-bound.
    assert r.input_wait_seconds / r.wall_seconds > 0.20


def test_batches_built_before_the_consumer_first_asked_are_part_of_the_start():
    # Keras builds its model first: the consumer asks at t=2, when 6 batches are built.
    produced = [Produced(0.1, 0.25 + i * 0.3, 10, index=i) for i in range(8)]
    consumed = [Consumed(2.0 + i, 2.0 + i) for i in range(8)]
    r = analyze(Trace(produced=produced, consumed=consumed, marks=run_marks(0.0, 10.0), end=10.0))
    assert r.start is not None
    assert (r.start.built_before_asked, r.start.first_batch_seconds) == (6, 2.0)
    assert r.steady_seconds == pytest.approx(8.0) and r.verdict == "not input-bound"


def test_each_runs_first_batch_is_its_start():
    # Two epochs, each starting its workers anew (1 s), then 3 steps that wait 0.5 s each.
    consumed, marks = [], []
    for run, begin in enumerate((0.0, 10.0)):
        marks += run_marks(begin, begin + 6.5, run)
        consumed.append(Consumed(begin, begin + 1.0, run=run))
        consumed += [Consumed(begin + 1.0 + i * 1.5, begin + 1.5 + i * 1.5, run=run) for i in range(1, 4)]
    r = analyze(Trace(consumed=consumed, marks=marks, end=16.5))
    assert r.start is not None
    assert (r.start.runs, r.start.first_batch_seconds, r.start.seconds) == (2, 1.0, 2.0)
    assert r.steady_wait_seconds == pytest.approx(6 * 0.5)
    assert r.steady_seconds == pytest.approx(2 * 5.5)
    assert r.verdict == "highly input-bound"


def test_no_consumer_means_no_start_and_no_steady_state():
    r = analyze(Trace(produced=[Produced(0, 1, 5)], end=1))
    assert (r.start, r.steady_wait_seconds, r.steady_seconds, r.input_bound_fraction) == (None, None, None, None)


def test_read_ahead_at_the_end_is_what_was_never_used():
    produced = [Produced(i, i + 0.5, 100 + i, index=i) for i in range(5)]
    consumed = [Consumed(i + 0.5, i + 0.6) for i in range(2)]
    trace = Trace(produced=produced, consumed=consumed, marks=run_marks(0.0, 6.0), end=6.0)
    r = analyze(trace)
    assert r.read_ahead_batches == 3
    assert r.read_ahead_bytes == 102 + 103 + 104
    assert r.series["batches"][-1] == 3 and r.series["bytes"][-1] == 102 + 103 + 104


def test_keyed_matching_takes_the_earliest_batch_of_the_same_key():
    produced = [Produced(0, 1, 1, key=7), Produced(0, 1, 2, key=8), Produced(2, 3, 4, key=7)]
    consumed = [Consumed(1, 1, key=8), Consumed(1, 1, key=7), Consumed(3, 3, key=7)]
    assert match(Trace(produced=produced, consumed=consumed)).consumed == [1, 0, 2]


def test_fifo_matching_follows_build_start_order():
    produced = [Produced(0.2, 0.3, 1), Produced(0.1, 0.9, 2)]
    trace = Trace(produced=sorted(produced, key=lambda p: p.start), consumed=[Consumed(1, 1), Consumed(1, 1)])
    assert match(trace).consumed == [0, 1]


def test_run_scope_ignores_batches_of_earlier_runs_and_takes_the_build_batch():
    meta = {"match_scope": "run", "pre_run_consumes": 1}
    produced = [
        Produced(0.1, 0.2, 1, index=0),  # run 0
        Produced(0.3, 0.4, 1, index=1),  # run 0, never used
        Produced(2.0, 2.1, 1, index=0),  # built before run 1 began: Keras builds the model with it
        Produced(2.1, 2.2, 1, index=1),  # also before run 1: served first in run 1
        Produced(3.1, 3.2, 1, index=2),
    ]
    consumed = [Consumed(0.5, 0.5, run=0), Consumed(3.5, 3.5, run=1), Consumed(3.6, 3.6, run=1)]
    marks = run_marks(0.0, 1.0, 0) + run_marks(3.0, 4.0, 1)
    trace = Trace(meta=meta, produced=produced, consumed=consumed, marks=marks, end=4.0)
    m = match(trace)
    assert m.consumed == [0, 3, 4]
    assert m.hidden == [(1, 2)]
    r = analyze(trace)
    assert r.consumed_outside_steps == 1
    assert r.read_ahead_batches == 1


def test_coverage_reports_duplicates_and_never_per_epoch():
    meta = {"num_batches": 4}
    produced = [Produced(i, i, 1, index=ix) for i, ix in enumerate([0, 1, 1, 3, 0, 1, 2, 3])]
    consumed = [Consumed(i, i, epoch=i // 4) for i in range(8)]
    r = analyze(Trace(meta=meta, produced=produced, consumed=consumed, end=8))
    rows = [(c.epoch, c.unit, c.consumed, c.total, c.duplicates, c.never_count, c.never) for c in r.coverage]
    assert rows == [(0, "batch", 4, 4, [1], 1, [2]), (1, "batch", 4, 4, [], 0, [])]


def test_sample_coverage_uses_the_consumed_samples():
    meta = {"num_samples": 6}
    consumed = [Consumed(0, 0, samples=[0, 1, 2]), Consumed(1, 1, samples=[2, 3, 4])]
    r = analyze(Trace(meta=meta, consumed=consumed, end=2))
    (cov,) = r.coverage
    assert (cov.unit, cov.consumed, cov.duplicates, cov.never) == ("sample", 6, [2], [5])


def test_no_consumer_recorded_gives_unknowns_and_a_note():
    r = analyze(Trace(produced=[Produced(0, 1, 5)], end=1))
    assert r.consumed_batches is None and r.input_bound_fraction is None
    assert r.verdict == "unknown"
    assert r.notes


def test_memory_peaks_and_errors():
    memory = [MemorySample(0, 100, 10, 1), MemorySample(1, 150, 0, 0), MemorySample(2, 90, 70, 2)]
    trace = Trace(memory=memory, marks=[Mark(1, "error", "KeyError: 3")], end=2)
    r = analyze(trace)
    assert (r.peak_rss_bytes, r.peak_children_bytes, r.peak_total_bytes) == (150, 70, 160)
    assert r.errors == ["KeyError: 3"]


@pytest.mark.parametrize(
    "fraction,words",
    [
        (0.0, "not input-bound"),
        (0.0499, "not input-bound"),
        (0.05, "moderately input-bound"),
        (0.1999, "moderately input-bound"),
        (0.2, "highly input-bound"),
        (1.0, "highly input-bound"),
    ],
)
def test_verdict_thresholds(fraction, words):
    assert verdict(fraction) == words


REPORT_KEYS = {
    "meta",
    "produced_batches",
    "consumed_batches",
    "consumed_outside_steps",
    "read_ahead_batches",
    "read_ahead_bytes",
    "peak_in_flight_batches",
    "peak_in_flight_bytes",
    "mean_in_flight_batches",
    "peak_building_batches",
    "peak_pool_bytes",
    "producer_time",
    "consumer_step",
    "input_wait_seconds",
    "wall_seconds",
    "start",
    "steady_wait_seconds",
    "steady_seconds",
    "input_bound_fraction",
    "verdict",
    "batch_bytes",
    "peak_rss_bytes",
    "peak_children_bytes",
    "peak_total_bytes",
    "coverage",
    "errors",
    "series",
    "notes",
    "nodes",
    "series_start",
    "steady_starved_seconds",
    "steady_handover_seconds",
    "handover",
    "handover_seen",
    "build_busy_share",
    "memory",
    "coverage_partial",
    "device",
}


def test_report_json_schema():
    produced = [Produced(0, 1, 5, index=0)]
    trace = Trace(meta={"num_batches": 1}, produced=produced, consumed=[Consumed(0, 1)], end=1)
    data = json.loads(analyze(trace).to_json())
    assert set(data) == REPORT_KEYS
    assert data["peak_pool_bytes"] is None  # no pool marks: not a Prefetcher in process mode
    assert data["device"] is None  # no device stage's marks
    assert set(data["producer_time"]) == {"n", "median", "p95", "mean"}
    assert set(data["start"]) == {"runs", "first_batch_seconds", "seconds", "built_before_asked"}
    assert set(data["series"]) == {"t", "batches", "bytes"}
    assert set(data["coverage"][0]) == {
        "run",
        "epoch",
        "unit",
        "consumed",
        "total",
        "duplicates",
        "never_count",
        "never",
        "extra",
        "repeats",
        "cause",
        "unkeyed",
        "batches",
        "cut_short",
        "not_reached",
        "resumed_after",
    }
    assert "series" not in analyze(trace).to_dict(series=False)
    assert data["nodes"] == {}
    on_nodes = Trace(produced=[Produced(0, 1, 5, worker="n1:7")], consumed=[Consumed(0, 1)], end=1)
    node = json.loads(analyze(on_nodes).to_json())["nodes"]["n1"]
    assert set(node) == {
        "produced_batches",
        "produced_bytes",
        "peak_held_batches",
        "peak_held_bytes",
        "read_ahead_batches",
        "read_ahead_bytes",
    }


def test_blocks_matched_by_rows_leave_with_the_batch_that_takes_their_last_row():
    # Three blocks of 4 rows (ends 1, 2, 3; 10, 20 and 30 bytes, on two nodes);
    # the consumer takes batches of 3 rows asked for at 4, 5, 6 and 7.
    produced = [
        Produced(0.0, 1.0, 10, rows=4, worker="a:1"),
        Produced(0.0, 2.0, 20, rows=4, worker="b:2"),
        Produced(0.5, 3.0, 30, rows=4, worker="a:1"),
    ]
    consumed = [Consumed(t, t, rows=3) for t in (4.0, 5.0, 6.0, 7.0)]
    marks = run_marks(0.0, 8.0, 0)
    r = analyze(Trace(meta={"match": "rows"}, produced=produced, consumed=consumed, marks=marks, end=8.0))
    # Batch 2 (rows 3-5) takes block 0's last row, so block 0 goes at 6, when batch 3
    # is asked for; batch 3 (rows 6-8) ends block 1 (goes at 7); batch 4 ends block 2
    # (goes at the run's end, 8).
    assert r.produced_batches == 3 and r.consumed_batches == 4
    assert r.read_ahead_batches == 0 and r.read_ahead_bytes == 0
    assert r.peak_in_flight_batches == 3 and r.peak_in_flight_bytes == 60
    assert r.series["batches"] == [1, 2, 3, 2, 1, 0]
    assert r.nodes["a"].produced_batches == 2 and r.nodes["a"].peak_held_bytes == 40
    assert r.nodes["b"].peak_held_batches == 1 and r.nodes["b"].read_ahead_batches == 0
    # Stopped after two batches: block 0 is released, blocks 1 and 2 were read ahead.
    early = analyze(
        Trace(meta={"match": "rows"}, produced=produced, consumed=consumed[:2], marks=run_marks(0.0, 5.5, 0), end=5.5)
    )
    assert early.read_ahead_batches == 2 and early.read_ahead_bytes == 50
    assert early.nodes["a"].read_ahead_bytes == 30 and early.nodes["b"].read_ahead_bytes == 20
    from queuetune.render.text import report_rows

    rows = dict(report_rows(early))
    assert rows["node a"] == "built 2 (40 B); held at most 2 (40 B); at the end 1 (30 B)"
    assert rows["read-ahead at the end (never used)"] == "2 batches, 50 B"


def test_batches_a_pass_never_handed_over_leave_with_it():
    meta = {"match_scope": "run"}
    produced = [Produced(0.1, 0.2, 1, key=1), Produced(0.1, 0.3, 1, key=2), Produced(0.95, 1.1, 1, key=3)]
    produced += [Produced(2.1, 2.2, 1, key=1)]
    consumed = [Consumed(0.0, 0.2, run=0, key=1), Consumed(2.0, 2.2, run=1, key=1)]
    marks = run_marks(0.0, 1.0, 0) + run_marks(2.0, 3.0, 1)
    r = analyze(Trace(meta=meta, produced=produced, consumed=consumed, marks=marks, end=3.0))
    assert r.read_ahead_batches == 2
    # key 2 is let go when run 0 ends, key 3 (finished after it ended) at once; run 1 holds one
    t0 = 0.2  # the series starts at the first change
    assert r.series_start == pytest.approx(t0)
    series = {round(t + t0, 6): b for t, b in zip(r.series["t"], r.series["batches"])}
    assert series == {0.2: 1, 0.3: 2, 1.0: 0, 1.1: 0, 2.2: 1, 3.0: 0}
    assert r.peak_in_flight_batches == 2


def test_consumed_by_block_gives_each_block_the_batch_that_took_its_first_row():
    from queuetune.analysis.in_flight import consumed_by_block
    from queuetune.record.trace import Consumed, Produced

    # blocks of 3 rows, batches of 2: batch 1 takes the last row of block 0 and the first of block 1
    produced = [Produced(0, 1 + i, 30 + i, rows=3) for i in range(3)]
    consumed = [Consumed(10 + i, 10.5 + i, rows=2) for i in range(4)] + [Consumed(14, 14.5, rows=1)]
    trace = Trace(meta={"match": "rows"}, produced=produced, consumed=consumed)
    blocks = consumed_by_block(trace)
    assert [(c.requested, c.rows, c.nbytes) for c in blocks.consumed] == [(10, 3, 30), (11, 3, 31), (13, 3, 32)]
    assert blocks.produced == produced and trace.consumed == consumed  # the original is left alone
    # the releases of the same walk: each block with the batch that took its last row
    from queuetune.analysis.in_flight import row_releases

    assert row_releases(trace, [c.consumed for c in consumed]) == [11.5, 12.5, 14.5]
    # a trace matched by batches comes back as it is
    plain = Trace(produced=produced, consumed=consumed)
    assert consumed_by_block(plain) is plain


def _copying_worker(held_mib: list[int], objects_mib: float, warming_mib: int | None = None) -> list:
    """A worker (pid 7) that read 100 samples a batch and held ``held_mib`` at
    readings after batches 1, 2, ..., of a dataset of 10,000 samples whose
    Python objects take ``objects_mib``; with ``warming_mib``, read once more
    before its first batch was built."""
    from queuetune.analysis.memory import _growing
    from queuetune.record.trace import TraceMeta

    mib = 2**20
    trace = Trace(
        meta=TraceMeta(settings={"batch_size": 100}, num_samples=10_000),
        produced=[Produced(i, i + 0.5, 8, worker="7") for i in range(len(held_mib))],
    )
    readings = [MemorySample(i + 0.6, 0, workers=[[7, 0, m * mib, 0]]) for i, m in enumerate(held_mib)]
    if warming_mib is not None:
        readings.insert(0, MemorySample(0.1, 0, workers=[[7, 0, warming_mib * mib, 0]]))
    return _growing(trace, readings, copying=True, objects=int(objects_mib * mib))


def test_a_workers_growth_leaves_out_its_warming_up_before_its_first_batch():
    # Read 0.1 s after the fork, before its first batch, the worker held 2 MiB:
    # the pages a new worker writes first are its baseline, not copies of samples.
    mib = 2**20
    [growth] = _copying_worker([20, 30, 40, 50], objects_mib=100, warming_mib=2)
    assert growth.bytes == 30 * mib and growth.span == (0.6, 3.6)
    assert growth.heading == 120 * mib  # the baseline after the first batch + the objects
    # With one reading after its first batch, the growth is over all of them.
    [growth] = _copying_worker([20], objects_mib=100, warming_mib=2)
    assert growth.bytes == 18 * mib and growth.span == (0.1, 0.6)


def test_a_worker_that_copies_a_shuffled_dataset_over_its_first_batches_then_holds_is_named():
    # Half a MiB of objects over 10,000 samples, 78 to a page: read shuffled, a worker
    # has copied 54 % of the pages after its first 100 samples, 98 % after 500. Its
    # growth follows the samples read poorly (Pearson's r 0.74), the pages touched well.
    mib = 2**20
    held = [31, 41, 46, 48, 49, 49, 50, 50, 50, 50, 50, 50]
    [growth] = _copying_worker(held, objects_mib=0.5)
    assert growth.bytes == 19 * mib and growth.copy_on_read
    # Where the dataset's objects are not known, only the samples read are followed.
    assert _copying_worker(held, objects_mib=0) == []


def test_a_worker_that_copied_before_its_readings_after_its_first_batch_is_named_beyond_its_warming_up():
    # The dataset above, read at 10 MiB before the worker's first batch, then at 44-45 MiB
    # after each: the rise came before the readings after its first batch, which show
    # 1 MiB. Counted from its first reading, the growth is named where it passes what a
    # worker's warming up after the fork takes (16 MiB) by GROWTH_BYTES; not where
    # warming up can explain it.
    mib = 2**20
    [growth] = _copying_worker([44, 45, 45, 45, 45], objects_mib=0.5, warming_mib=10)
    assert growth.bytes == 35 * mib and growth.span == (0.1, 4.6)
    assert _copying_worker([28, 29, 29, 29, 29], objects_mib=0.5, warming_mib=10) == []


def test_a_copying_worker_heads_for_its_baseline_and_the_objects_and_never_below_what_it_holds():
    mib = 2**20
    [growth] = _copying_worker([10, 20, 30, 40], objects_mib=100)
    assert (growth.held, growth.heading) == (40 * mib, 110 * mib)  # 10 MiB baseline + 100 MiB of objects
    # A read copies the whole page an object lies on: after 400 of 10,000
    # samples the worker holds more than its baseline and the objects' bytes.
    [growth] = _copying_worker([10, 30, 50, 70], objects_mib=40)
    assert growth.held == 70 * mib and growth.heading == 70 * mib


def test_the_device_section_is_read_from_the_stages_marks_and_absent_without_them():
    marks = [
        *run_marks(0.0, 1.0),
        Mark(0.1, "pinned_bytes", 8192),
        Mark(0.1, "device_bytes", 4096),
        Mark(0.2, "device_copy", {"batch": 0, "seconds": 0.003}),
        Mark(0.2, "device_bytes", 0),
        Mark(0.3, "device_copy", {"batch": 1, "seconds": 0.001}),
        Mark(0.3, "device_copy", {"batch": 2, "seconds": 0.002}),
    ]
    trace = Trace(produced=[Produced(0, 1, 5, index=0)], consumed=[Consumed(0, 1)], marks=marks, end=1)
    device = analyze(trace).device
    assert device is not None
    assert (device.copies, device.staged_median_seconds, device.staged_max_seconds) == (3, 0.002, 0.003)
    assert (device.peak_pinned_bytes, device.peak_device_bytes) == (8192, 4096)
    data = json.loads(analyze(trace).to_json())
    assert Report.from_dict(data).device == device
    # a report saved before the section existed (no "device" key) reads as one without a stage
    plain = json.loads(analyze(Trace(produced=[Produced(0, 1, 5, index=0)])).to_json())
    del plain["device"]
    assert Report.from_dict(plain).device is None
