"""Coverage that does not depend on the machine's load: sample keys priced, not
timed; coverage that says when it is partial; an epoch cut short said as such."""

from __future__ import annotations

import contextlib
import gc
import json
import time

import numpy as np
import pytest

import queuetune
from helpers import assert_nothing_left_running, busy
from queuetune.analysis.report import Report, analyze
from queuetune.record import recorder as recorder_module
from queuetune.record.fingerprint import BUDGET_SHARE, KeyBudget, SampleKey, fingerprint, fingerprint_priced
from queuetune.record.recorder import Recorder, built_here, clock
from queuetune.record.trace import Consumed, Mark, Produced, Trace, TraceMeta
from queuetune.render.text import report_rows

RUNS = 20
SAMPLES = 64
STEP = 0.005


# A process that keeps a core busy streaming memory (two 32 MiB arrays, more than
# the caches hold), as another training job would.
STREAMING = "import numpy as np\na = np.ones(2**22); b = np.empty_like(a)\nwhile True: np.copyto(b, a)"


def busy_streaming(extra: int = 1) -> contextlib.AbstractContextManager[None]:
    """Keep every core busy, caches and memory bandwidth included (one
    :data:`STREAMING` process per core, and ``extra`` more), for the block."""
    return busy(STREAMING, extra)


def coverage_rows(report: Report) -> list[str]:
    return [value for label, value in report_rows(report) if label.startswith("coverage")]


def test_a_fingerprints_price_depends_on_the_sample_alone():
    sample = (np.zeros((3, 32, 32), dtype=np.float32), 7)
    key, price = fingerprint_priced(sample)
    assert key == fingerprint(sample)
    assert [fingerprint_priced(sample)[1] for _ in range(100)] == [price] * 100
    # More bytes cost more; a user's integer key costs nothing.
    assert fingerprint_priced(np.zeros(2**20, dtype=np.uint8))[1] > fingerprint_priced(np.zeros(4))[1] > 0
    assert SampleKey(lambda s: s[1]).priced(sample) == (7, 0.0)


def test_a_batch_of_small_samples_stays_within_the_budget_of_a_short_step():
    # 8 small samples a batch, 5 ms steps: keyed to the end, whatever the machine
    # does meanwhile; 64 of them a batch cost more than 2 % of that step.
    small = [np.full(4, float(i), dtype=np.float32) for i in range(SAMPLES)]
    keyer = SampleKey()
    keyer.note_step(STEP)
    budget = KeyBudget(keyer)
    for start in range(0, SAMPLES, 8):
        assert budget.row_keys(np.stack(small[start : start + 8])) is not None
    assert not budget.spent
    wide = KeyBudget(keyer)
    kept = [wide.row_keys(np.stack(small)) for _ in range(6)]
    assert [k is not None for k in kept] == [True] * 5 + [False]
    assert fingerprint_priced(small[0])[1] * SAMPLES > BUDGET_SHARE * STEP


@pytest.mark.torch
@pytest.mark.timeout(240)
def test_every_duplicate_is_found_on_a_busy_machine():
    # The case a user found: 64 duplicates in two runs, 40 in a third (keys cut
    # after 5 batches while the machine was busy). Every core kept busy, 20 passes.
    # With the keys timed in CPU time, 1 to 6 passes of 20 found all 64 here.
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    class Everywhere(IterableDataset):
        # 64 samples that every worker reads whole (not sharded).
        def __iter__(self):
            for i in range(SAMPLES):
                yield torch.full((4,), float(i))

    loader = queuetune.watch(DataLoader(Everywhere(), batch_size=8, num_workers=2))
    batches = []
    try:
        with busy_streaming():
            for _ in range(RUNS):
                taken = 0
                for batch in loader:
                    assert isinstance(batch, torch.Tensor)
                    time.sleep(STEP)
                    taken += 1
                batches.append(taken)
        report = queuetune.report(loader)
    finally:
        gc.collect()
        queuetune.probe_of(loader).close()
    assert_nothing_left_running()
    assert batches == [2 * SAMPLES // 8] * RUNS
    found = [(len(c.duplicates), c.unkeyed) for c in report.coverage]
    assert found == [(SAMPLES, 0)] * RUNS
    assert not report.coverage_partial and not any(c.cut_short for c in report.coverage)


@pytest.mark.torch
@pytest.mark.timeout(60)
def test_keys_cut_for_their_cost_make_the_coverage_partial_and_say_so():
    from torch.utils.data import DataLoader, IterableDataset

    big = np.zeros(2**20, dtype=np.uint8)

    class Instant(IterableDataset):
        # Items cost nothing to fetch, 1 MiB each to fingerprint; the loop's steps are microseconds.
        def __iter__(self):
            for _ in range(64):
                yield big

    loader = queuetune.watch(DataLoader(Instant(), batch_size=4, collate_fn=lambda items: len(items)))
    assert sum(1 for _ in loader) == 16
    report = queuetune.report(loader)
    queuetune.probe_of(loader).close()
    assert_nothing_left_running()
    [cov] = report.coverage
    # Judged once 32 items and 5 batches were keyed: from the 9th batch on, none are.
    assert (cov.consumed, cov.batches, cov.unkeyed, cov.partial) == (32, 16, 8, True)
    assert len(cov.duplicates) == 1
    assert report.coverage_partial and not cov.cut_short
    [line] = coverage_rows(report)
    assert "coverage partial: 8 of 16 batches not keyed" in line


def test_keys_over_a_runs_cap_make_the_coverage_partial(monkeypatch):
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
    report = analyze(trace)
    assert report.coverage_partial
    assert [(c.run, c.batches, c.unkeyed) for c in report.coverage] == [(0, 4, 2), (1, 4, 2)]
    assert all("coverage partial: 2 of 4 batches not keyed" in line for line in coverage_rows(report))
    # In the JSON; a report saved before the field existed derives it from its coverage.
    data = json.loads(report.to_json())
    assert data["coverage_partial"] is True
    del data["coverage_partial"]
    assert Report.from_dict(data).coverage_partial


def test_an_epoch_whose_batches_all_went_without_keys_is_listed():
    # Epoch 0: one batch keyed, one not; epoch 1: its one batch not keyed.
    trace = Trace(
        produced=[Produced(0, 1, 8, key=0, samples=[1, 2]), Produced(1, 2, 8, key=1), Produced(3, 4, 8, key=2)],
        consumed=[Consumed(1, 1, 0, 0, key=0), Consumed(2, 2, 0, 0, key=1), Consumed(4, 4, 0, 1, key=2)],
        end=4,
    )
    report = analyze(trace)
    assert [(c.epoch, c.consumed, c.batches, c.unkeyed) for c in report.coverage] == [(0, 2, 2, 1), (1, 0, 1, 1)]
    assert report.coverage_partial


def test_a_finished_report_without_unkeyed_batches_is_complete():
    trace = Trace(produced=[Produced(0, 1, 8, samples=[5, 6])], consumed=[Consumed(0, 1)], end=1)
    report = analyze(trace)
    assert not report.coverage_partial and not report.coverage[0].partial
    assert "coverage partial" not in coverage_rows(report)[0]


def _epoch(indices: list[list[int]], cut: bool) -> Trace:
    consumed = [Consumed(float(i), float(i), samples=s) for i, s in enumerate(indices)]
    marks = [Mark(0.0, "run_begin", 0), Mark(0.0, "epoch_begin", 0)]
    if cut:
        marks.append(Mark(len(indices), "cut_short", 0))
    marks += [Mark(len(indices), "epoch_end", 0), Mark(len(indices), "run_end", 0)]
    return Trace(meta=TraceMeta(num_samples=20, num_batches=5), consumed=consumed, marks=marks, end=len(indices))


def test_an_epoch_cut_short_counts_samples_not_reached_not_never():
    [cut] = analyze(_epoch([[0, 1, 2, 3], [4, 5, 6, 7]], cut=True)).coverage
    assert (cut.cut_short, cut.batches, cut.not_reached, cut.never_count, cut.never) == (True, 2, 12, None, [])
    [finished] = analyze(_epoch([[0, 1, 2, 3], [4, 5, 6, 7]], cut=False)).coverage
    assert (finished.cut_short, finished.not_reached, finished.never_count) == (False, None, 12)
    assert finished.never[:3] == [8, 9, 10]
    # Older JSON (no cut_short field) loads as a finished epoch.
    data = analyze(_epoch([[0, 1, 2, 3]], cut=False)).to_dict()
    for cov in data["coverage"]:
        del cov["cut_short"], cov["not_reached"], cov["batches"]
    assert not Report.from_dict(data).coverage[0].cut_short


@pytest.mark.torch
@pytest.mark.timeout(60)
def test_a_loop_broken_off_reads_as_cut_short_and_a_finished_epoch_as_never():
    import torch
    from torch.utils.data import DataLoader

    data = [torch.full((2,), float(i)) for i in range(20)]
    broken = queuetune.watch(DataLoader(data, batch_size=4))
    for i, _batch in enumerate(broken):
        if i == 1:
            break
    # Every batch taken, the loader never asked for one more (as Keras does): not cut short.
    counted = queuetune.watch(DataLoader(data, batch_size=4))
    assert len(list(zip(range(5), counted))) == 5
    # A sampler that skips samples 12..19, its epoch run to its end.
    skipping = queuetune.watch(DataLoader(data, batch_size=4, sampler=list(range(12))))
    assert sum(1 for _ in skipping) == 3
    try:
        cut, finished, whole = queuetune.report(broken), queuetune.report(skipping), queuetune.report(counted)
        marks = [m.kind for m in queuetune.probe_of(broken).trace().marks]
    finally:
        for loader in (broken, skipping, counted):
            queuetune.probe_of(loader).close()
    assert_nothing_left_running()
    assert marks == ["run_begin", "epoch_begin", "cut_short", "epoch_end", "run_end"]
    [cov] = cut.coverage
    assert (cov.cut_short, cov.batches, cov.consumed, cov.not_reached, cov.never_count) == (True, 2, 8, 12, None)
    [line] = coverage_rows(cut)
    assert "epoch cut short after 2 of 5 batches: 12 samples not reached" in line and "never" not in line
    [cov] = finished.coverage
    assert (cov.cut_short, cov.batches, cov.consumed, cov.never_count) == (False, 3, 12, 8)
    assert cov.never == list(range(12, 20))
    [line] = coverage_rows(finished)
    assert "never: 8 (12, 13" in line and "cut short" not in line
    [cov] = whole.coverage
    assert (cov.cut_short, cov.batches, cov.never_count) == (False, 5, 0)
