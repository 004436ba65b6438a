"""Trace: what a probe recorded, as plain data that saves to and loads from JSON.

Times are seconds on the system's monotonic clock (shared by the worker
processes of one machine), so events from workers and from the consumer
compare directly.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

FORMAT = "queuetune-trace"
VERSION = 1


@dataclass
class Produced:
    """A batch the loader finished building, counted where it was built."""

    start: float
    end: float
    nbytes: int
    index: int | None = None
    key: Any = None
    worker: str = ""


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


@dataclass
class Mark:
    """A point in time on the consumer's side: ``run_begin``, ``run_end``,
    ``epoch_begin``, ``epoch_end``, ``error``, ``pause``."""

    t: float
    kind: str
    value: Any = None


@dataclass
class MemorySample:
    """Resident memory of the process and the unique memory of its children."""

    t: float
    rss: int
    children: int = 0
    n_children: int = 0


@dataclass
class Trace:
    """Everything one probe recorded.

    >>> t = Trace(meta={"loader": "generator"}, start=0.0, end=1.0)
    >>> Trace.from_json(t.to_json()).meta["loader"]
    'generator'
    """

    meta: dict[str, Any] = field(default_factory=dict)
    start: float = 0.0
    end: float = 0.0
    produced: list[Produced] = field(default_factory=list)
    consumed: list[Consumed] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    memory: list[MemorySample] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The trace as JSON-ready plain data, with its format and version."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "meta": self.meta,
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
        >>> Trace(meta={"loader": "x"}).save(p); Trace.load(p).meta
        {'loader': 'x'}
        """
        Path(path).write_text(self.to_json())

    @classmethod
    def from_dict(cls, data: Any) -> Trace:
        """Build a trace from plain data; a clear ValueError if it is not one."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a queuetune trace (no 'format': 'queuetune-trace' key)")
        version = data.get("version")
        if version != VERSION:
            raise ValueError(
                f"trace format version {version!r} is not supported by this queuetune "
                f"(it reads version {VERSION})"
            )
        try:
            return cls(
                meta=dict(data.get("meta") or {}),
                start=float(data.get("start", 0.0)),
                end=float(data.get("end", 0.0)),
                produced=[_build(Produced, p) for p in data.get("produced", [])],
                consumed=[_build(Consumed, c) for c in data.get("consumed", [])],
                marks=[_build(Mark, m) for m in data.get("marks", [])],
                memory=[_build(MemorySample, m) for m in data.get("memory", [])],
            )
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"malformed queuetune trace: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> Trace:
        """Parse a JSON string written by :meth:`to_json`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"trace is not valid JSON: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """Read a trace saved with :meth:`save`."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ValueError(f"cannot read trace {str(path)!r}: {exc.strerror or exc}") from None
        except ValueError as exc:  # a path with a NUL byte, or a file that is not UTF-8
            raise ValueError(f"cannot read trace {str(path)!r}: {exc}") from None
        return cls.from_json(text)


def _plain(record: dict[str, Any]) -> dict[str, Any]:
    key = record.get("key")
    if isinstance(key, tuple):
        record["key"] = list(key)
    return record


def _build(kind: type, data: Any) -> Any:
    names = {f.name for f in fields(kind)}
    record = kind(**{k: v for k, v in data.items() if k in names})
    if isinstance(getattr(record, "key", None), list):
        record.key = tuple(record.key)
    return record
