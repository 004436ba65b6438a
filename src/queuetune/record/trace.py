"""Trace: what a probe recorded, as plain data that saves to and loads from JSON."""

from __future__ import annotations

import functools
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..common import units
from .reading import Malformed, check_memory, check_meta, convert, memory_to_read, plain, records_of
from .records import Consumed, Mark, MarkKind, MemorySample, Produced, TraceMeta

__all__ = [
    "FORMAT",
    "READABLE",
    "VERSION",
    "Consumed",
    "Mark",
    "MarkKind",
    "MemorySample",
    "Produced",
    "Trace",
    "TraceMeta",
    "memory_to_read",
]

_shown = functools.partial(units._shown, limit=40)
FORMAT = "queuetune-trace"
#: The version this queuetune writes: 2 adds the memory of each process of the
#: tree (:class:`MemorySample`'s ``pss``, ``uss``, ``shm``, ``shared``, ``workers``).
VERSION = 2
#: The versions it reads: a version-1 trace loads with those fields None.
READABLE = (1, 2)
_READS = f"versions {READABLE[0]} to {READABLE[-1]}"


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
            "produced": [plain(asdict(p)) for p in self.produced],
            "consumed": [plain(asdict(c)) for c in self.consumed],
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
                raise Malformed(f"'meta' must be an object, got {_shown(meta)}")
            check_meta(meta)
            return cls(
                meta=TraceMeta.from_dict(meta),
                start=convert("float", data.get("start", 0.0), "start"),
                end=convert("float", data.get("end", 0.0), "end"),
                produced=records_of(Produced, data, "produced"),
                consumed=records_of(Consumed, data, "consumed"),
                marks=records_of(Mark, data, "marks"),
                memory=records_of(MemorySample, data, "memory"),
            )
        except Malformed as exc:
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
                check_memory(2 * size, size, path)  # the text alone, before reading it
                raw = file.read()
        except OSError as exc:
            raise ValueError(f"cannot read trace {str(path)!r}: {exc.strerror or exc}") from None
        except ValueError as exc:  # a path with a NUL byte
            raise ValueError(f"cannot read trace {str(path)!r}: {exc}") from None
        check_memory(memory_to_read(raw), len(raw), path)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"cannot read trace {str(path)!r}: {exc}") from None
        del raw
        return cls.from_json(text)
