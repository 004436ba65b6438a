"""Trace: plain data that round-trips through JSON and refuses what it cannot read."""

from __future__ import annotations

import json

import pytest

from queuetune.record.trace import FORMAT, VERSION, Consumed, Mark, MemorySample, Produced, Trace


def sample_trace() -> Trace:
    return Trace(
        meta={"loader": "pydataset", "settings": {"workers": 4}},
        start=1.0,
        end=3.0,
        produced=[Produced(1.0, 1.5, 64, index=3, key=3, worker="123"), Produced(1.1, 1.6, 64, key=(1, 2))],
        consumed=[Consumed(1.5, 1.7, run=0, epoch=0, nbytes=64, samples=[1, 2])],
        marks=[Mark(1.0, "run_begin", 0), Mark(2.0, "error", "KeyError: 3")],
        memory=[MemorySample(1.2, 1000, 10, 1)],
    )


def test_round_trip_is_lossless(tmp_path):
    trace = sample_trace()
    path = tmp_path / "trace.json"
    trace.save(path)
    assert Trace.load(path) == trace
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and data["version"] == VERSION
    assert set(data) == {"format", "version", "meta", "start", "end", "produced", "consumed", "marks", "memory"}


@pytest.mark.parametrize(
    "text,message",
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "not a queuetune trace"),
        ('{"format": "other"}', "not a queuetune trace"),
        (json.dumps({"format": FORMAT, "version": 99}), "version 99 is not supported"),
        (json.dumps({"format": FORMAT, "version": VERSION, "produced": [{"start": 1}]}), "malformed"),
    ],
)
def test_bad_traces_are_clear_errors(text, message):
    with pytest.raises(ValueError, match=message):
        Trace.from_json(text)


def test_missing_file_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="cannot read trace"):
        Trace.load(tmp_path / "nope.json")


def test_meta_fields_name_every_entry_of_the_meta():
    from dataclasses import fields

    from queuetune.record.records import MetaFields, TraceMeta, with_fields

    assert set(MetaFields.__annotations__) == {f.name for f in fields(TraceMeta)}
    base = TraceMeta(name="a", extra={"x": 1})
    merged = with_fields(base, {"framework": "torch", "extra": {"y": 2}})
    assert (merged.name, merged.framework, merged.extra) == ("a", "torch", {"x": 1, "y": 2})
    assert base == TraceMeta(name="a", extra={"x": 1})
