"""Plain Python loaders (generators, iterators, iterables) in your own loop, which
queuetune's own read-ahead thread can prefetch; and ``none``, a loader that reads
nothing ahead."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..fingerprint import KeyBudget, SampleKey
from ..nbytes import nbytes
from ..recorder import Recorder, clock, recorded
from ..trace import TraceMeta
from .base import Framework, Lines, buffer_depth, buffer_for


@dataclass(frozen=True)
class Python(Framework):
    """Any iterable. In tuning trials queuetune reads it ahead with its own thread
    (``buffer`` batches ready, 0 for none); watched, it is counted where each
    ``next`` returns.

    >>> PYTHON.depth({"buffer": 3}), PYTHON.settings_for(4, None), PYTHON.recognises(iter([]))
    (4, {'buffer': 3}, True)
    """

    def recognises(self, loader: Any) -> bool:
        return isinstance(loader, Iterable)

    def depth(self, settings: dict[str, Any]) -> int:
        return buffer_depth(settings.get("buffer", 0))

    def settings_for(self, depth: int, workers: int | None) -> dict[str, Any] | None:
        buffer = buffer_for(depth)
        return None if buffer is None else {"buffer": buffer}

    def watch(self, loader: Any, meta: TraceMeta, sample_memory: bool, key: Any = None) -> tuple[Any, Recorder]:
        keyer = None if key is False else SampleKey(key)
        if isinstance(loader, Iterator):
            meta.loader = "generator" if isinstance(loader, types.GeneratorType) else "iterator"
            recorder = Recorder(_loader_meta(meta, loader), sample_memory=sample_memory)
            return watched_generator(loader, recorder, keyer), recorder
        meta.loader = "iterable"
        recorder = Recorder(_loader_meta(meta, loader), sample_memory=sample_memory)
        return WatchedIterable(loader, recorder, keyer), recorder

    def tuner_defaults(self, factory: Callable[..., Any], loader: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {"buffer": 0}

    def factory_kwargs(self, settings: dict[str, Any]) -> dict[str, Any]:
        return {}  # the buffer is queuetune's own


@dataclass(frozen=True)
class Nothing(Framework):
    """A loader that reads nothing ahead: only the batch being consumed is held.

    >>> NONE.read_ahead({}, 100)
    ({}, [], 0)
    """

    def read_ahead(self, settings: dict[str, Any], batch_bytes: int) -> tuple[dict[str, Any], Lines, int]:
        return {}, [], 0


def _loader_meta(meta: TraceMeta, loader: Any) -> TraceMeta:
    meta.framework = meta.framework or "python"
    meta.type = type(loader).__qualname__
    meta.depth = 0  # a plain loader reads nothing ahead
    try:
        meta.num_batches = len(loader)
    except TypeError:
        pass
    return meta


def watched_generator(source: Iterator[Any], recorder: Recorder, keyer: SampleKey | None = None) -> Iterator[Any]:
    """A generator over ``source`` that records each batch as built and, unless a
    callback records consumption, as consumed when it is handed over; with a
    ``keyer``, the keys of the batch's rows (see :func:`~queuetune.fingerprint.row_keys`),
    while their :class:`~queuetune.fingerprint.KeyBudget` allows.

    >>> rec = Recorder(TraceMeta(), sample_memory=False)
    >>> list(watched_generator(iter([b"ab", b"c"]), rec)), len(rec.trace().consumed)
    ([b'ab', b'c'], 2)
    >>> rec.close()
    """
    seq = 0
    budget = KeyBudget(keyer) if keyer is not None else None
    handed: float | None = None

    def record(asked: float, got: float, batch: Any) -> None:
        nonlocal seq, handed
        size = nbytes(batch)
        samples = None
        if budget is not None:
            if handed is not None:
                budget.keyer.note_step(asked - handed)
            samples = budget.row_keys(batch)
        recorder.produced(asked, got, size, None, seq, samples)
        if recorder.consumer == "iterator":
            recorder.consumed(asked, got, nbytes=size, key=seq)
        seq += 1
        handed = clock()

    return recorded(source, recorder, record)


class WatchedIterable:
    """An iterable whose every pass is watched (one run and one epoch per pass)."""

    def __init__(self, inner: Iterable[Any], recorder: Recorder, keyer: SampleKey | None = None) -> None:
        self._inner = inner
        self._recorder = recorder
        self._keyer = keyer

    def __iter__(self) -> Iterator[Any]:
        return watched_generator(iter(self._inner), self._recorder, self._keyer)

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_inner", "_recorder", "_keyer"):
            raise AttributeError(name)
        return getattr(self._inner, name)


PYTHON = Python("python", depth_knob="buffer", tuned_knobs=("buffer",), read_ahead_by_queuetune=True)
NONE = Nothing("none", estimate_settings=())
