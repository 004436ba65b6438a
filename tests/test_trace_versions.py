"""Traces saved by older versions of queuetune load; files this version cannot read fail naming the version.

The files are in tests/data/traces/ (README.md there says how each was made).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from queuetune.analysis.report import analyze
from queuetune.cli import main
from queuetune.record.trace import FORMAT, VERSION, Trace

TRACES = Path(__file__).parent / "data" / "traces"

# file: (batches produced, batches consumed, errors that reached the consumer)
OLD = {
    "2e2d073-generator.json": (5, 5, []),
    "2e2d073-iterable.json": (6, 6, []),
    "2e2d073-error.json": (3, 3, ["RuntimeError: batch 3 cannot be read"]),
    "2e2d073-keras.json": (4, 4, []),
    "829e633-torch0.json": (4, 4, []),
    "829e633-torch2.json": (4, 4, []),
    "af51450-generator.json": (5, 5, []),
    "af51450-torch0.json": (4, 4, []),
    "af51450-keras.json": (4, 4, []),
}
# file: what the message must say besides the version this queuetune reads
UNSUPPORTED = {
    "unsupported-version-3.json": "trace format version 3 is not supported",
    "unsupported-no-version.json": "trace format version is missing",
    "unsupported-format-name.json": "'format' is 'queuetune-tune'",
    "unsupported-missing-end.json": "produced[2] has no 'end'",
}
READS = "reads versions 1 to 2"


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_every_fixture_is_listed_and_described():
    files = {path.name for path in TRACES.glob("*.json")}
    assert files == set(OLD) | set(UNSUPPORTED)
    readme = (TRACES / "README.md").read_text()
    for name in files:
        assert name in readme


@pytest.mark.parametrize("name", sorted(OLD))
def test_old_trace_loads_and_analyses(name):
    produced, consumed, errors = OLD[name]
    raw = json.loads((TRACES / name).read_text())
    assert raw["format"] == FORMAT and raw["version"] == 1
    trace = Trace.load(TRACES / name)
    assert len(trace.produced) == produced and len(trace.consumed) == consumed
    report = analyze(trace)
    assert report.produced_batches == produced
    assert report.consumed_batches == consumed
    assert report.errors == errors
    assert report.meta.depth == raw["meta"]["depth"]  # the depth the old version recorded is kept as it was


@pytest.mark.parametrize("name", sorted(OLD))
def test_old_trace_saved_again_reads_back_the_same(name, tmp_path):
    trace = Trace.load(TRACES / name)
    trace.save(tmp_path / name)
    assert Trace.load(tmp_path / name) == trace


@pytest.mark.parametrize("name", sorted(OLD))
def test_report_command_reads_old_traces(name):
    code, out, err = run(["report", str(TRACES / name), "--json"])
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["produced_batches"] == OLD[name][0]
    assert data["consumed_batches"] == OLD[name][1]
    code, out, err = run(["report", str(TRACES / name)])
    assert (code, err) == (0, "") and out


def test_old_plain_loaders_recorded_a_depth_of_one_and_later_ones_zero():
    # The one difference between these files: af51450 made a loader with no read-ahead depth 0.
    depths = {name: Trace.load(TRACES / name).meta.depth for name in OLD}
    assert depths["2e2d073-generator.json"] == depths["829e633-torch0.json"] == 1
    assert depths["af51450-generator.json"] == depths["af51450-torch0.json"] == 0
    assert depths["829e633-torch2.json"] == 4
    # The Keras probe's meta gained pre_run_consumes after 2e2d073; older files read as 0.
    assert Trace.load(TRACES / "2e2d073-keras.json").meta.pre_run_consumes is None
    assert Trace.load(TRACES / "af51450-keras.json").meta.pre_run_consumes == 1


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_trace_names_the_versions(name):
    with pytest.raises(ValueError) as info:
        Trace.load(TRACES / name)
    message = str(info.value)
    assert UNSUPPORTED[name] in message
    assert READS in message


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_report_command_refuses_unsupported_trace_in_one_line(name):
    code, out, err = run(["report", str(TRACES / name)])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("queuetune: error: ")
    assert UNSUPPORTED[name] in err and READS in err


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"version": "1"}, "version '1' is not supported"),
        ({"version": 1.0}, "version 1.0 is not supported"),
        ({"version": True}, "version True is not supported"),
        ({"version": 0}, "version 0 is not supported"),
        ({"version": None}, "version None is not supported"),
        ({"meta": [1, 2]}, "'meta' must be an object"),
        ({"produced": {"start": 1}}, "'produced' must be a list"),
        ({"consumed": [3]}, "consumed[0] must be an object"),
        ({"consumed": [{"requested": 1.0, "consumed": "2"}]}, "consumed[0].consumed must be a finite number"),
        ({"marks": [{"t": 1.0, "kind": 3}]}, "marks[0].kind must be a string"),
        ({"memory": [{"t": 1.0, "rss": 1.5}]}, "memory[0].rss must be an integer"),
        ({"produced": [{"start": 1, "end": 2, "nbytes": True}]}, "produced[0].nbytes must be an integer"),
        ({"start": "0"}, "start must be a finite number"),
        ({"consumed": [{"requested": float("nan"), "consumed": 1.0}]}, "consumed[0].requested must be a finite number"),
        # found by tests/test_cli_fuzz.py: each loaded, then the analysis or the report failed
        ({"consumed": [{"requested": 0.0, "consumed": 0.0, "key": {}}]}, "consumed[0].key must be"),
        ({"marks": [{"t": 0.0, "kind": "run_begin", "value": []}]}, "'run_begin' mark must be an integer"),
        ({"marks": [{"t": 0.0, "kind": "run_begin"}]}, "'run_begin' mark must be an integer"),
        ({"consumed": [{"requested": 0.0, "consumed": 0.0, "samples": [[]]}]}, "samples must be a list of integers"),
        ({"meta": {"match_scope": "run", "pre_run_consumes": "abc"}}, "meta.pre_run_consumes must be an integer"),
        ({"meta": {"settings": [1]}}, "meta.settings must be an object"),
        ({"produced": [{"start": 0.0, "end": 0.0, "nbytes": -1}]}, "produced[0].nbytes must be >= 0"),
        # the device stage's marks: a copy's batch and seconds, the bytes as counts
        ({"marks": [{"t": 0.0, "kind": "device_copy", "value": 0.5}]}, "'device_copy' mark must be"),
        ({"marks": [{"t": 0.0, "kind": "device_copy", "value": {"batch": 0, "seconds": -1}}]}, "'device_copy' mark"),
        ({"marks": [{"t": 0.0, "kind": "pinned_bytes", "value": -4}]}, "'pinned_bytes' mark must be an integer"),
        ({"marks": [{"t": 0.0, "kind": "device_bytes", "value": "1"}]}, "'device_bytes' mark must be an integer"),
    ],
)
def test_malformed_version_1_content_names_the_field(change, fragment):
    data = {**json.loads((TRACES / "af51450-generator.json").read_text()), **change}
    with pytest.raises(ValueError) as info:
        Trace.from_dict(data)
    assert fragment in str(info.value)
    assert READS in str(info.value)


def test_fields_a_later_version_adds_are_ignored():
    data = json.loads((TRACES / "af51450-generator.json").read_text())
    data["produced"] = [{**p, "stage": "decode"} for p in data["produced"]]
    data["pauses"] = []
    trace = Trace.from_dict(data)
    assert analyze(trace).produced_batches == 5


def test_consumed_batches_without_recorded_production_report_no_negative_counts(tmp_path):
    # Found by tests/test_cli_fuzz.py: the in-flight count went to -1 and the report failed to print.
    # A trace cut short by a fault can hold a consumed batch whose production record never arrived.
    data = {"format": FORMAT, "version": VERSION, "consumed": [{"requested": 0.0, "consumed": 0.5, "nbytes": 8}]}
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(data))
    report = analyze(Trace.load(path))
    assert report.consumed_batches == 1 and report.produced_batches == 0
    assert report.peak_in_flight_batches == 0 and report.peak_in_flight_bytes == 0
    assert report.read_ahead_batches == 0
    code, out, err = run(["report", str(path)])
    assert (code, err) == (0, "") and out
