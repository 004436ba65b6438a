"""Trace: what a probe recorded, as plain data that saves to and loads from JSON."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import psutil

from ..common import units
from ..common.units import _is_int

_shown = functools.partial(units._shown, limit=40)

FORMAT = "queuetune-trace"
#: The version this queuetune writes: 2 adds the memory of each process of the
#: tree (:class:`MemorySample`'s ``pss``, ``uss``, ``shm``, ``shared``, ``workers``).
VERSION = 2
#: The versions it reads: a version-1 trace loads with those fields None.
READABLE = (1, 2)
_READS = f"versions {READABLE[0]} to {READABLE[-1]}"


@dataclass
class Produced:
    """A batch the loader finished building, counted where it was built.

    ``rows``: samples in it, when batches are matched to consumed ones by rows
    (``meta.match == "rows"``: Ray Data builds blocks, the trainer takes
    batches of another size). ``worker`` may name a node before a colon
    (``"node:pid"``), for the report's bytes per node. ``samples``: the keys
    of its samples where the batch carries no index (an iterable dataset's
    content fingerprints, or a user's key), for coverage. ``busy``: the seconds
    the building thread was on a CPU or waiting for one while it built it (less
    than ``end - start`` where the build waited, on I/O or a lock), where measured.
    """

    start: float
    end: float
    nbytes: int
    index: int | None = None
    key: Any = None
    worker: str = ""
    rows: int | None = None
    samples: list[int] | None = None
    busy: float | None = None


@dataclass
class Consumed:
    """A batch handed to the model: asked for at ``requested``, received at ``consumed``."""

    requested: float
    consumed: float
    run: int = 0
    epoch: int = 0
    nbytes: int | None = None
    key: Any = None
    samples: list[int] | None = None
    rows: int | None = None


#: What a :class:`Mark` marks.
MarkKind = Literal[
    "run_begin",
    "run_end",
    "epoch_begin",
    "epoch_end",
    "error",
    "pause_begin",
    "pause_end",
    "depth",
    "workers",
    "pool",
    "samples_capped",
    "cut_short",
    "resumed",
    "checkpoint",
    "sampler_epoch",
]


@dataclass
class Mark:
    """A point in time on the consumer's side: ``run_begin``, ``run_end``,
    ``epoch_begin``, ``epoch_end``, ``error``, ``pause_begin``, ``pause_end``; and a
    Prefetcher's ``depth``, ``workers`` and ``pool`` (the bytes of its shared-memory
    segments) as they change; ``samples_capped`` where a run's sample keys reached
    the most it keeps; ``cut_short`` (its value the epoch) where an epoch ended
    before its loader was exhausted; ``resumed`` where a Prefetcher resumed an
    epoch another process had begun (its value ``{"epoch": e, "batches": k}``:
    this trace's epoch ``e``, ``k`` batches of it handed over before); and
    ``checkpoint`` where the loader's state was taken (what it hands over after
    is replayed where a run resumes from that state); ``sampler_epoch`` where an
    epoch began with a sampler that draws by epoch (``{"epoch": e, "sampler": s}``:
    this trace's epoch ``e`` drew the sampler's epoch ``s``, as ``set_epoch`` set it)."""

    t: float
    kind: MarkKind
    value: Any = None


@dataclass
class MemorySample:
    """Resident memory of the process and the unique memory of its children
    (``children``, of ``n_children`` processes). Where the whole tree was read
    at that moment (version 2; see :mod:`queuetune.record.real_memory`), also the
    process's ``pss`` and ``uss``, each child's ``[pid, pss, uss, shm]``
    (``workers``; its ``shm``: the bytes of shared-memory files it maps), the
    bytes of the tree's shared-memory files that none of it maps (``shm``) and
    of all of them (``shared``); None in the samples between such readings, and
    in traces of version 1. With the tree, ``cpu`` and ``idle`` (see below;
    None where not read), from which :mod:`queuetune.tune.machine` tells what
    the run took of the machine's cores."""

    t: float
    rss: int
    children: int = 0
    n_children: int = 0
    pss: int | None = None
    uss: int | None = None
    shm: int | None = None
    shared: int | None = None
    workers: list[list[int]] | None = None
    #: CPU seconds the tree has used so far (this process, its children that ended
    #: and were reaped, and those alive), and idle seconds of the cores this process
    #: may run on, summed over them: both since boot, read with the tree (None between).
    cpu: float | None = None
    idle: float | None = None
    #: Of ``cpu``, the seconds queuetune's own sampling took so far (its reading of
    #: the tree, in this process): not the loader's, and gone where it runs plainly.
    probe: float | None = None

    @property
    def total(self) -> int | None:
        """What the tree costs the machine: PSS summed over it, plus the shared
        memory none of it maps (None where the tree was not read)."""
        if self.pss is None or self.workers is None:
            return None
        return self.pss + sum(w[1] for w in self.workers) + (self.shm or 0)


@dataclass
class TraceMeta:
    """What a trace says about the loader it recorded; every entry is optional.

    ``loader``: how it was watched (``generator``, ``iterable``, ``pydataset``,
    ``dataloader``, ``ray dataset``, ``prefetcher``...); ``framework``: a name of
    :mod:`queuetune.frameworks`; ``type``: the class of its dataset;
    ``settings``: the knobs that bound its queue; ``depth``: that bound, in
    batches. ``match_scope="run"``: a batch built before a run began is never
    handed over in it (the loader's workers start afresh each run);
    ``pre_run_consumes=k``: batches built between two runs belong to the next,
    and the framework takes the first ``k`` of them itself (Keras builds the
    model with one); ``match="rows"``: consumed batches are cut from produced
    ones by rows (Ray Data's blocks). ``rank``, ``world_size``, ``job``: the
    process's place in a distributed launch (torchrun), where it had one.
    ``extra``: entries this version does not know, kept as they were.

    >>> meta = TraceMeta.from_dict({"loader": "generator", "depth": 0, "from_the_future": 1})
    >>> meta.loader, meta.extra, meta.to_dict()
    ('generator', {'from_the_future': 1}, {'loader': 'generator', 'depth': 0, 'from_the_future': 1})
    """

    name: str | None = None
    loader: str | None = None
    framework: str | None = None
    type: str | None = None
    settings: dict[str, Any] | None = None
    depth: int | None = None
    num_batches: int | None = None
    num_samples: int | None = None
    match_scope: str | None = None
    match: str | None = None
    pre_run_consumes: int | None = None
    versions: dict[str, Any] | None = None
    nodes: dict[str, str] | None = None
    forgotten_runs: int | None = None
    rank: int | None = None
    world_size: int | None = None
    job: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceMeta:
        """Known entries into fields, the others into ``extra`` (no checks: see :meth:`Trace.from_dict`)."""
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(
            **{k: v for k, v in data.items() if k in known},
            extra={k: v for k, v in data.items() if k not in known},
        )

    def to_dict(self) -> dict[str, Any]:
        """The entries that are set, as plain data (``extra`` merged in)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**{k: v for k, v in data.items() if v is not None}, **self.extra}


@dataclass
class Trace:
    """Everything one probe recorded. A ``meta`` given as a dict becomes a :class:`TraceMeta`.

    Times are seconds on the system's monotonic clock, which the worker processes
    of one machine share, so events from workers and from the consumer compare
    directly.

    >>> t = Trace(meta=TraceMeta(loader="generator"), start=0.0, end=1.0)
    >>> Trace.from_json(t.to_json()).meta.loader
    'generator'
    """

    meta: TraceMeta = field(default_factory=TraceMeta)
    start: float = 0.0
    end: float = 0.0
    produced: list[Produced] = field(default_factory=list)
    consumed: list[Consumed] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    memory: list[MemorySample] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.meta, dict):
            self.meta = TraceMeta.from_dict(self.meta)

    def to_dict(self) -> dict[str, Any]:
        """The trace as JSON-ready plain data, with its format and version."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "meta": self.meta.to_dict(),
            "start": self.start,
            "end": self.end,
            "produced": [_plain(asdict(p)) for p in self.produced],
            "consumed": [_plain(asdict(c)) for c in self.consumed],
            "marks": [asdict(m) for m in self.marks],
            "memory": [asdict(m) for m in self.memory],
        }

    def to_json(self, indent: int | None = None) -> str:
        """Serialise to a JSON string."""
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path: str | Path) -> None:
        """Write the trace to ``path`` as JSON.

        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "t.json")
        >>> Trace(meta=TraceMeta(loader="x")).save(p); Trace.load(p).meta.loader
        'x'
        """
        Path(path).write_text(self.to_json())

    @classmethod
    def from_dict(cls, data: Any) -> Trace:
        """Build a trace from plain data; a ValueError naming the version found if it is not one we read.

        Every file of a version in ``READABLE`` loads, whichever queuetune saved
        it: a record's fields missing from older files take their defaults.

        >>> Trace.from_dict({"format": FORMAT, "version": 3})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: trace format version 3 is not supported by this queuetune (it reads versions 1 to 2); ...
        """
        if not isinstance(data, dict):
            raise ValueError(
                f"not a queuetune trace: expected a JSON object with 'format': {FORMAT!r}, "
                f"got {type(data).__name__} (this queuetune reads {_READS})"
            )
        found = data.get("format")
        if found != FORMAT:
            raise ValueError(
                f"not a queuetune trace: 'format' is {_shown(found)}, expected {FORMAT!r} "
                f"(this queuetune reads {_READS})"
            )
        if "version" not in data:
            raise ValueError(f"trace format version is missing; this queuetune reads {_READS}")
        version = data["version"]
        if type(version) is not int or version not in READABLE:
            newer = "; it was saved by a newer queuetune" if type(version) is int and version > VERSION else ""
            raise ValueError(
                f"trace format version {_shown(version)} is not supported by this queuetune (it reads {_READS}){newer}"
            )
        try:
            meta = data.get("meta") or {}
            if not isinstance(meta, dict):
                raise _Malformed(f"'meta' must be an object, got {_shown(meta)}")
            _check_meta(meta)
            return cls(
                meta=TraceMeta.from_dict(meta),
                start=_convert("float", data.get("start", 0.0), "start"),
                end=_convert("float", data.get("end", 0.0), "end"),
                produced=_records(Produced, data, "produced"),
                consumed=_records(Consumed, data, "consumed"),
                marks=_records(Mark, data, "marks"),
                memory=_records(MemorySample, data, "memory"),
            )
        except _Malformed as exc:
            raise ValueError(
                f"malformed queuetune trace (version {version}; this queuetune reads {_READS}): {exc}"
            ) from None
        except RecursionError:  # a key of lists within lists, in data not read from JSON
            raise ValueError(
                f"malformed queuetune trace (version {version}; this queuetune reads {_READS}): nested too deeply"
            ) from None

    @classmethod
    def from_json(cls, text: str | bytes) -> Trace:
        """Parse a JSON string written by :meth:`to_json`; a ValueError for text
        that is no JSON, or JSON that Python's parser cannot hold (nested
        deeper than its recursion limit, or an integer of thousands of digits).

        >>> Trace.from_json("[" * 100_000)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: trace is not valid JSON: nested too deeply ...
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"trace is not valid JSON: {exc}") from None
        except RecursionError:
            raise ValueError("trace is not valid JSON: nested too deeply (a trace nests a few levels)") from None
        except ValueError:  # int() refuses an integer of more digits than sys.get_int_max_str_digits()
            raise ValueError(
                f"trace holds an integer of more than {sys.get_int_max_str_digits()} digits "
                "(a trace's integers fit in 64 bits)"
            ) from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """Read a trace saved with :meth:`save`; a ValueError naming the file when
        it cannot be read, is no trace, or needs more memory than is available
        (see :func:`memory_to_read`)."""
        try:
            with open(path, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                _check_memory(2 * size, size, path)  # the text alone, before reading it
                raw = file.read()
        except OSError as exc:
            raise ValueError(f"cannot read trace {str(path)!r}: {exc.strerror or exc}") from None
        except ValueError as exc:  # a path with a NUL byte
            raise ValueError(f"cannot read trace {str(path)!r}: {exc}") from None
        _check_memory(memory_to_read(raw), len(raw), path)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"cannot read trace {str(path)!r}: {exc}") from None
        del raw
        return cls.from_json(text)


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


def _check_memory(needed: int, size: int, path: str | Path) -> None:
    available = _available_memory()
    if needed > available:
        raise ValueError(
            f"cannot read trace {str(path)!r}: it is {units.format_bytes(size)}, and reading it takes "
            f"about {units.format_bytes(needed)} of memory; {units.format_bytes(available)} is available"
        )


def _plain(record: dict[str, Any]) -> dict[str, Any]:
    key = record.get("key")
    if isinstance(key, tuple):
        record["key"] = list(key)
    return record


class _Malformed(Exception):
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
_COUNTED_MARKS = ("run_begin", "run_end", "epoch_begin", "epoch_end", "pool", "cut_short", "depth", "workers")


def _settings(value: Any) -> bool:
    # A loader's knobs as its framework names them: plain values, numbers that a float holds.
    return isinstance(value, dict) and all(
        v is None or isinstance(v, (str, bool)) or _finite(v) for v in value.values()
    )


def _convert(annotation: str, value: Any, where: str) -> Any:
    check = _CHECKS.get(annotation)
    if check is None:
        return value
    what, ok = check
    if not ok(value):
        raise _Malformed(f"{where} must be {what}, got {_shown(value)}")
    return float(value) if annotation == "float" or (annotation == "float | None" and value is not None) else value


def _check_meta(meta: dict[str, Any]) -> None:
    for name, annotation in _META.items():
        if name in meta:
            _convert(annotation, meta[name], f"meta.{name}")
    rank, world_size = meta.get("rank"), meta.get("world_size")
    if world_size is not None and not 1 <= world_size <= MAX_WORLD_SIZE:
        raise _Malformed(f"meta.world_size must be from 1 to {MAX_WORLD_SIZE}, got {world_size}")
    if rank is not None and world_size is not None and rank >= world_size:
        raise _Malformed(f"meta.rank must be below meta.world_size ({world_size}), got {rank}")


def _records(kind: type, data: dict[str, Any], name: str) -> list[Any]:
    items = data.get(name, [])
    if not isinstance(items, list):
        raise _Malformed(f"{name!r} must be a list, got {_shown(items)}")
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
        raise _Malformed(f"{where} must be an object, got {_shown(data)}")
    values = {}
    for name, required, what, ok, size, to_float in _fields_of(kind):
        if name in data:
            value = data[name]
            if not ok(value):
                raise _Malformed(f"{where}.{name} must be {what}, got {_shown(value)}")
            if size and value is not None and value < 0:
                raise _Malformed(f"{where}.{name} must be >= 0, got {value}")
            values[name] = float(value) if to_float and value is not None else value
        elif required:
            raise _Malformed(f"{where} has no {name!r}")
    # Keys a later version adds are left out: they carry nothing this version reads.
    record = kind(**values)
    if "key" in values:
        if not _is_key(record.key):
            raise _Malformed(f"{where}.key must be a number, string, list or null, got {_shown(record.key)}")
        if isinstance(record.key, list):
            record.key = _tuple(record.key)
    if kind is Mark and record.kind in _COUNTED_MARKS and not _count(record.value):
        raise _Malformed(f"{where}.value of a {record.kind!r} mark must be {_COUNT}, got {_shown(record.value)}")
    return record


def _is_key(value: Any) -> bool:
    # Keys match produced batches to consumed ones, so they must be hashable once lists become tuples.
    if isinstance(value, list):
        return all(_is_key(v) for v in value)
    return value is None or isinstance(value, (bool, str)) or _finite(value)


def _tuple(value: list[Any]) -> tuple[Any, ...]:
    return tuple(_tuple(v) if isinstance(v, list) else v for v in value)
