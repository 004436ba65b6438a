"""`queuetune report` on malformed or hostile traces: one line and exit 2, or a
report; never a traceback, a hang or memory without bound.

Every field of real saved traces (tests/data/real/, README.md there says how
they were made) is replaced in turn by values of the wrong type or out of
range; the loader checks them all (Trace.from_dict), so the analysis only ever
sees well-typed values.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli
from queuetune.record import reading as trace_module
from queuetune.record.trace import FORMAT, VERSION, Trace

REAL = Path(__file__).parent / "data" / "real"
ERROR = "queuetune: error: "

#: What each field is replaced by: the wrong types, and numbers out of range.
HOSTILE = ["text", [], {}, None, True, -1, -0.5, 2**62, 2**63, 10**400, 1e308]


run = run_cli


def check(argv: list[str]) -> tuple[int, str, str]:
    """A report (exit 0, nothing on stderr), or exit 2 with one short line on stderr."""
    code, out, err = run(argv)
    if code == 0:
        assert err == ""
        return code, out, err
    assert code == 2, (code, err)
    assert out == "" and err.startswith(ERROR) and err.count("\n") == 1 and len(err) < 600, err
    return code, out, err


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path] if path else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*path, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += _paths(inner, (*path, i))
    return found


def _shape(data: Any, path: tuple[Any, ...]) -> tuple[Any, ...]:
    """``path`` with each list index replaced by what the entry is (a mark by its kind)."""
    shape, node = [], data
    for step in path:
        if isinstance(step, int):
            entry = node[step]
            shape.append(entry.get("kind", "*") if isinstance(entry, dict) and "kind" in entry else "*")
        else:
            shape.append(step)
        node = node[step]
    return tuple(shape)


def fields_of_real_traces() -> list[tuple[str, tuple[Any, ...]]]:
    """One path to each field of the real traces: every entry of each trace's
    ``meta`` (its settings by name), and each field of each kind of record once,
    at a record where it holds a value."""
    chosen: dict[tuple[Any, ...], tuple[str, tuple[Any, ...], Any]] = {}
    for file in sorted(REAL.glob("*.json")):
        data = json.loads(file.read_text())
        for path in _paths(data):
            shape = _shape(data, path)
            key = (file.name, *shape) if shape[0] == "meta" else shape
            value = _get(data, path)
            if key not in chosen or (chosen[key][2] in (None, [], {}) and value not in (None, [], {})):
                chosen[key] = (file.name, path, value)
    return [(name, path) for name, path, _ in chosen.values()]


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        data = data[step]
    return data


def _put(data: Any, path: tuple[Any, ...], value: Any) -> None:
    _get(data, path[:-1])[path[-1]] = value


FIELDS = fields_of_real_traces()


def test_the_real_traces_load_and_every_kind_of_field_is_covered():
    names = {path[-1] for _, path in FIELDS if isinstance(path[-1], str)}
    assert {"nbytes", "busy", "samples", "key", "worker", "workers", "pss", "settings", "rank", "world_size"} <= names
    assert {"host_memory", "containers", "forked", "pre_run_consumes", "num_workers", "max_queue_size"} <= names
    for file in REAL.glob("*.json"):
        assert check(["report", str(file)])[0] == 0
    readme = (REAL / "README.md").read_text()
    assert all(file.name in readme for file in REAL.glob("*.json"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("name", "path"), FIELDS, ids=[f"{n}:{'.'.join(map(str, p))}" for n, p in FIELDS])
def test_any_value_at_any_field_gives_a_report_or_one_line(tmp_path, name, path):
    base = json.loads((REAL / name).read_text())
    file = tmp_path / "trace.json"
    for value in HOSTILE:
        data = copy.deepcopy(base)
        _put(data, path, value)
        file.write_text(json.dumps(data))
        for form in ([], ["--json"]):
            code, _, err = check(["report", str(file), *form])
            if code == 2:
                # The loader refused it, naming the field: the analysis never saw it.
                assert "malformed queuetune trace" in err or "not a queuetune trace" in err or "version" in err, err


def _trace(**change: Any) -> dict[str, Any]:
    return {**json.loads((REAL / "dataloader.json").read_text()), **change}


def test_a_huge_integer_literal_is_refused_naming_its_field(tmp_path):
    text = json.dumps(_trace()).replace('"nbytes": 128', '"nbytes": 1' + "0" * 400, 1)
    assert '"nbytes": 1000' in text
    file = tmp_path / "huge.json"
    file.write_text(text)
    code, _, err = check(["report", str(file)])
    assert code == 2 and "produced[0].nbytes must be an integer (at most 64 bits), got 1000" in err
    # Beyond the digits Python converts to an int at all: refused by the parser, as one line.
    file.write_text(text.replace('"nbytes": 1' + "0" * 400, '"nbytes": ' + "9" * 5000))
    code, _, err = check(["report", str(file)])
    assert code == 2 and "an integer of more than 4300 digits" in err and str(file) in err


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_json_nested_200000_deep_is_one_line(tmp_path, opening):
    file = tmp_path / "deep.json"
    file.write_text(opening * 200_000)
    code, _, err = check(["report", str(file)])
    assert code == 2 and "nested too deeply" in err


def test_values_of_python_data_are_checked_as_those_of_json():
    # Trace.from_dict takes plain data that did not come from JSON: numbers too
    # large for a float, keys nested deeper than the recursion limit.
    with pytest.raises(ValueError, match=r"start must be a finite number, got 1000"):
        Trace.from_dict(_trace(start=10**400))
    key: Any = 1
    for _ in range(sys.getrecursionlimit() * 2):
        key = [key]
    consumed = [{"requested": 0.0, "consumed": 1.0, "key": key}]
    with pytest.raises(ValueError, match="nested too deeply"):
        Trace.from_dict({"format": FORMAT, "version": VERSION, "consumed": consumed})


@pytest.mark.parametrize(
    ("meta", "fragment"),
    [
        ({"rank": 3, "world_size": 2}, "meta.rank must be below meta.world_size (2), got 3"),
        ({"rank": 0, "world_size": 2**40}, "meta.world_size must be from 1 to 1048576"),
        ({"world_size": 0}, "meta.world_size must be from 1"),
        ({"containers": {"rows": 3}}, "meta.containers must be an object of strings"),
        ({"settings": {"num_workers": [2]}}, "meta.settings must be an object of strings, numbers"),
        ({"num_samples": -1}, "meta.num_samples must be an integer >= 0"),
    ],
)
def test_meta_out_of_range_names_the_entry(meta, fragment):
    with pytest.raises(ValueError) as info:
        Trace.from_dict(_trace(meta={**_trace()["meta"], **meta}))
    assert fragment in str(info.value)


def test_a_dataset_of_billions_of_samples_is_counted_not_listed(tmp_path):
    # Coverage counted the samples never consumed by listing them: 2^62 of them hung the report.
    data = _trace()
    data["meta"] = {k: v for k, v in data["meta"].items() if k not in ("rank", "world_size", "job")}
    data["meta"]["num_samples"] = 2**62
    file = tmp_path / "trace.json"
    file.write_text(json.dumps(data))
    code, out, _ = check(["report", "--json", str(file)])
    assert code == 0
    [first, _] = json.loads(out)["coverage"]
    assert first["never_count"] == 2**62 - 12 and first["never"] == list(range(12, 32))


def test_a_trace_larger_than_the_memory_available_is_refused(tmp_path, monkeypatch):
    file = tmp_path / "trace.json"
    file.write_text(json.dumps(_trace()))
    needed = trace_module.memory_to_read(file.read_bytes())
    monkeypatch.setattr(trace_module, "_available_memory", lambda: needed - 1)
    code, _, err = check(["report", str(file)])
    assert code == 2
    assert f"cannot read trace '{file}': it is " in err and "of memory; " in err and " is available" in err
    monkeypatch.setattr(trace_module, "_available_memory", lambda: needed)
    assert check(["report", str(file)])[0] == 0


def _long_run(path: Path, target: int) -> int:
    """A trace of a long run of a DataLoader with workers, about ``target`` bytes; its batches."""
    produced, consumed = [], []
    batch = 0
    size = 400  # the envelope below
    while size < target:
        t = 1000.0 + batch * 0.01
        worker = str(4000 + batch % 4)
        produced.append(
            f'{{"start": {t:.9f}, "end": {t + 0.008:.9f}, "nbytes": 1572864, "index": null, '
            f'"key": {batch}, "worker": "{worker}", "rows": null, "samples": null, "busy": 0.0071}}'
        )
        consumed.append(
            f'{{"requested": {t + 0.007:.9f}, "consumed": {t + 0.009:.9f}, "run": 0, "epoch": 0, '
            f'"nbytes": 1572864, "key": {batch}, "samples": null, "rows": null}}'
        )
        size += len(produced[-1]) + len(consumed[-1]) + 4
        batch += 1
    end = 1000.0 + batch * 0.01 + 0.01
    meta = {"loader": "dataloader", "framework": "torch", "settings": {"num_workers": 4, "prefetch_factor": 2}}
    path.write_text(
        f'{{"format": "{FORMAT}", "version": {VERSION}, "meta": {json.dumps(meta)}, "start": 1000.0, "end": {end}, '
        f'"produced": [{", ".join(produced)}], "consumed": [{", ".join(consumed)}], '
        f'"marks": [{{"t": 1000.0, "kind": "run_begin", "value": 0}}, {{"t": {end}, "kind": "run_end", "value": 0}}], '
        '"memory": []}'
    )
    return batch


@pytest.mark.timeout(600)
def test_a_100_mb_trace_is_read_within_the_memory_it_is_said_to_take(tmp_path):
    file = tmp_path / "long.json"
    batches = _long_run(file, 101 * 2**20)
    size = file.stat().st_size
    assert size >= 100 * 2**20
    promised = trace_module.memory_to_read(file.read_bytes())
    argv = ["report", str(file), "--json", "-o", str(tmp_path / "report.json")]
    # VmHWM: the peak resident memory of this process's own pages. getrusage's peak
    # counts the pages of the test's process too, the child's before its exec.
    measured = (
        "import re, sys; from queuetune.cli import main; code = main(sys.argv[1:]); "
        "print(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read())[1]); sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", measured, *argv], capture_output=True, text=True, timeout=560)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "report.json").read_text())["consumed_batches"] == batches
    peak = int(done.stdout) * 1024
    assert peak < promised, (peak, promised, size)
    assert peak < 12 * size  # the promise itself is not far above what reading takes
