"""A trace read from plain data: each field checked, so that a hostile or broken
file is one clear error; and the memory reading one takes."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import psutil

from ..common import units
from ..common.units import _is_int
from .records import Mark

_shown = functools.partial(units._shown, limit=40)


#: What reading a trace takes for each JSON value in it, beyond its text: the
#: parsed value, the record made of it and the analysis's share. Measured at
#: 35-100 bytes on traces of records and of hostile content (objects, lists,
#: numbers, strings), 2026-11-28.
BYTES_PER_VALUE = 150


def memory_to_read(raw: bytes) -> int:
    """About the most memory reading and analysing the trace ``raw`` takes: its
    text twice (as read and decoded) and :data:`BYTES_PER_VALUE` for each value in
    it, counted from above as the commas and opening brackets (a fast count).

    >>> memory_to_read(b'{"produced": [1, 2]}')
    490
    """
    values = raw.count(b",") + raw.count(b"[") + raw.count(b"{")
    return 2 * len(raw) + BYTES_PER_VALUE * values


def _available_memory() -> int:
    return int(psutil.virtual_memory().available)


def check_memory(needed: int, size: int, path: str | Path) -> None:
    available = _available_memory()
    if needed > available:
        raise ValueError(
            f"cannot read trace {str(path)!r}: it is {units.format_bytes(size)}, and reading it takes "
            f"about {units.format_bytes(needed)} of memory; {units.format_bytes(available)} is available"
        )


def plain(record: dict[str, Any]) -> dict[str, Any]:
    key = record.get("key")
    if isinstance(key, tuple):
        record["key"] = list(key)
    return record


class Malformed(Exception):
    """A trace whose content does not fit the format."""


#: Integers in a trace fit in 64 bits, as the recorder's records do. A larger one
#: is no measurement, and arithmetic in floats on it overflows.
INT_LIMIT = 2**63
#: The most ranks a trace's launch may have (``meta.world_size``).
MAX_WORLD_SIZE = 2**20


def _int64(value: Any) -> bool:
    if type(value) is int:  # what JSON gives: the common case, checked first
        return -INT_LIMIT <= value < INT_LIMIT
    return _is_int(value) and -INT_LIMIT <= value < INT_LIMIT


def _count(value: Any) -> bool:
    return _int64(value) and value >= 0


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return _int64(value)  # an integer too large for a float is not finite there


def _or_null(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or (isinstance(value, list) and all(check(x) for x in value))


def _worker(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 4 and all(_count(x) for x in value)


_INT = "an integer (at most 64 bits)"
_COUNT = "an integer >= 0 (at most 64 bits)"
# What each field takes, by its annotation (a string: the module defers them), or
# by the names below where a field's values are sizes or counts.
_CHECKS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "float": ("a finite number", _finite),
    "int": (_INT, _int64),
    "int | None": (f"{_INT} or null", _or_null(_int64)),
    "float | None": ("a finite number or null", _or_null(_finite)),
    "str": ("a string", lambda v: isinstance(v, str)),
    # A kind this version does not know is kept: a newer version's trace.
    "MarkKind": ("a string", lambda v: isinstance(v, str)),
    "bool | None": ("true, false or null", _or_null(lambda v: isinstance(v, bool))),
    "dict | None": ("an object or null", _or_null(lambda v: isinstance(v, dict))),
    "str-dict | None": (
        "an object of strings or null",
        _or_null(lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values())),
    ),
    "list[int] | None": ("a list of integers (at most 64 bits) or null", _list_of(_int64)),
    "list[list[int]] | None": (
        "a list of [pid, pss, uss, shm] lists of integers >= 0 (at most 64 bits) or null",
        _list_of(_worker),
    ),
    "count": (_COUNT, _count),
    "count | None": (f"{_COUNT} or null", _or_null(_count)),
    "settings": ("an object of strings, numbers, true, false or null, or null", _or_null(lambda v: _settings(v))),
}
#: Fields whose values are sizes or counts: never below 0.
_SIZES = (
    *("nbytes", "rss", "children", "n_children", "rows", "busy"),
    *("pss", "uss", "shm", "shared", "cpu", "idle", "probe"),
)

# What each entry of ``meta`` must hold when present; ``extra`` entries that
# :mod:`queuetune.analysis.memory` reads are checked as well.
_META = {
    "name": "str",
    "type": "str",
    "loader": "str",
    "framework": "str",
    "match_scope": "str",
    "match": "str",
    "settings": "settings",
    "depth": "count | None",
    "num_batches": "count | None",
    "num_samples": "count | None",
    "pre_run_consumes": "count | None",
    "versions": "dict | None",
    "nodes": "str-dict | None",
    "forgotten_runs": "count | None",
    "rank": "count | None",
    "world_size": "count | None",
    "job": "str",
    "host_memory": "count | None",
    "cores": "count | None",
    "objects_bytes": "count | None",
    "batch_size": "count | None",
    "forked": "bool | None",
    "containers": "str-dict | None",
    "epoch_samples": "count | None",
}
#: Marks whose value is a count: a run or epoch number, a depth, workers, bytes.
_COUNTED_MARKS = (
    *("run_begin", "run_end", "epoch_begin", "epoch_end", "pool", "cut_short", "depth", "workers"),
    *("pinned_bytes", "device_bytes"),
)


def _settings(value: Any) -> bool:
    # A loader's knobs as its framework names them: plain values, numbers that a float holds.
    return isinstance(value, dict) and all(
        v is None or isinstance(v, (str, bool)) or _finite(v) for v in value.values()
    )


def convert(annotation: str, value: Any, where: str) -> Any:
    check = _CHECKS.get(annotation)
    if check is None:
        return value
    what, ok = check
    if not ok(value):
        raise Malformed(f"{where} must be {what}, got {_shown(value)}")
    return float(value) if annotation == "float" or (annotation == "float | None" and value is not None) else value


def check_meta(meta: dict[str, Any]) -> None:
    for name, annotation in _META.items():
        if name in meta:
            convert(annotation, meta[name], f"meta.{name}")
    rank, world_size = meta.get("rank"), meta.get("world_size")
    if world_size is not None and not 1 <= world_size <= MAX_WORLD_SIZE:
        raise Malformed(f"meta.world_size must be from 1 to {MAX_WORLD_SIZE}, got {world_size}")
    if rank is not None and world_size is not None and rank >= world_size:
        raise Malformed(f"meta.rank must be below meta.world_size ({world_size}), got {rank}")


def records_of(kind: type, data: dict[str, Any], name: str) -> list[Any]:
    items = data.get(name, [])
    if not isinstance(items, list):
        raise Malformed(f"{name!r} must be a list, got {_shown(items)}")
    return [_build(kind, item, f"{name}[{i}]") for i, item in enumerate(items)]


@functools.cache
def _fields_of(kind: type) -> tuple[tuple[str, bool, str, Callable[[Any], bool], bool, bool], ...]:
    """Each field of a record: its name, whether it is required, what it takes and
    its check, whether it is a size (never below 0) and whether it is a float."""
    out = []
    for f in fields(kind):
        what, ok = _CHECKS.get(str(f.type), ("anything", lambda v: True))
        required = f.default is MISSING and f.default_factory is MISSING
        out.append((f.name, required, what, ok, f.name in _SIZES, str(f.type) in ("float", "float | None")))
    return tuple(out)


def _build(kind: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise Malformed(f"{where} must be an object, got {_shown(data)}")
    values = {}
    for name, required, what, ok, size, to_float in _fields_of(kind):
        if name in data:
            value = data[name]
            if not ok(value):
                raise Malformed(f"{where}.{name} must be {what}, got {_shown(value)}")
            if size and value is not None and value < 0:
                raise Malformed(f"{where}.{name} must be >= 0, got {value}")
            values[name] = float(value) if to_float and value is not None else value
        elif required:
            raise Malformed(f"{where} has no {name!r}")
    # Keys a later version adds are left out: they carry nothing this version reads.
    record = kind(**values)
    if "key" in values:
        if not _is_key(record.key):
            raise Malformed(f"{where}.key must be a number, string, list or null, got {_shown(record.key)}")
        if isinstance(record.key, list):
            record.key = _tuple(record.key)
    if kind is Mark and record.kind in _COUNTED_MARKS and not _count(record.value):
        raise Malformed(f"{where}.value of a {record.kind!r} mark must be {_COUNT}, got {_shown(record.value)}")
    if kind is Mark and record.kind == "device_copy" and not _device_copy(record.value):
        raise Malformed(f"{where}.value of a 'device_copy' mark must be {_DEVICE_COPY}, got {_shown(record.value)}")
    return record


_DEVICE_COPY = '{"batch": an integer >= 0, "seconds": a finite number >= 0}'


def _device_copy(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and _count(value.get("batch"))
        and _finite(value.get("seconds"))
        and value["seconds"] >= 0
    )


def _is_key(value: Any) -> bool:
    # Keys match produced batches to consumed ones, so they must be hashable once lists become tuples.
    if isinstance(value, list):
        return all(_is_key(v) for v in value)
    return value is None or isinstance(value, (bool, str)) or _finite(value)


def _tuple(value: list[Any]) -> tuple[Any, ...]:
    return tuple(_tuple(v) if isinstance(v, list) else v for v in value)
