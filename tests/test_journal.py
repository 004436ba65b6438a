"""The journal ``queuetune run`` appends as it goes (issue 60, part 3): every batch
handed over once, also where the recorder lets old runs go, and written at once as
the loader's state is taken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import assert_nothing_left_running

from queuetune.analysis.resumes import Part
from queuetune.probing.session import Session
from queuetune.record.recorder import Recorder, clock
from queuetune.record.trace import TraceMeta
from queuetune.sinks.journal import journaling


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.timeout(120)
@settings(max_examples=20, deadline=None)
@given(runs=st.lists(st.integers(0, 5), min_size=1, max_size=6), keep=st.sampled_from([None, 1, 2]))
def test_every_batch_handed_over_is_in_the_journal_once(tmp_path_factory, runs, keep):
    folder = tmp_path_factory.mktemp("journal")
    with Session(sample_memory=False) as session:
        recorder = Recorder(TraceMeta(num_samples=100), sample_memory=False, keep_runs=keep)
        with journaling(session, lambda n, kind: folder / f"{n:02d}-{kind}.journal.jsonl", every=0.01):
            session.add("prefetcher", recorder.trace, recorder.close, recorder.live, recorder)
            sample = 0
            for batches in runs:
                recorder.run_begin()
                recorder.epoch_begin()
                for _ in range(batches):
                    t = clock()
                    recorder.consumed(t, t, samples=[sample])
                    sample += 1
                recorder.run_end()
        recorder.close()
    written = [entry["c"][2] for entry in lines(folder / "01-prefetcher.journal.jsonl") if "c" in entry]
    assert written == [[i] for i in range(sum(runs))]
    part = Part.of_journal(folder / "01-prefetcher.journal.jsonl")
    assert part.samples == 100 and not part.ended
    assert_nothing_left_running()


@pytest.mark.timeout(60)
def test_a_state_taken_writes_the_journal_at_once(tmp_path):
    with Session(sample_memory=False) as session:
        recorder = Recorder(TraceMeta(), sample_memory=False)
        path = tmp_path / "01-prefetcher.journal.jsonl"
        with journaling(session, lambda n, kind: path, every=3600):
            session.add("prefetcher", recorder.trace, recorder.close, recorder.live, recorder)
            recorder.run_begin()
            t = clock()
            recorder.consumed(t, t, samples=[7])
            assert not any("c" in entry for entry in lines(path))  # an hour to the next write
            recorder.checkpoint()
            assert [entry["c"][2] for entry in lines(path) if "c" in entry] == [[7]]
            assert any(entry.get("m") == "checkpoint" for entry in lines(path))
            recorder.run_end()
        recorder.close()
    assert_nothing_left_running()
