"""The watcher of any iterable: each batch counted where ``next`` returns it."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ...common.kinds import Settings
from ...record.fingerprint import KeyBudget, SampleKey
from ...record.nbytes import nbytes
from ...record.recorder import Recorder, clock, recorded
from ...record.records import MetaFields
from ...record.trace import TraceMeta
from ..base import Adapter


def watched_generator(source: Iterator[Any], recorder: Recorder, keyer: SampleKey | None = None) -> Iterator[Any]:
    """A generator over ``source`` that records each batch as built and, unless a
    callback records consumption, as consumed when it is handed over; with a
    ``keyer``, the keys of the batch's rows (see :func:`~queuetune.record.fingerprint.row_keys`),
    while their :class:`~queuetune.record.fingerprint.KeyBudget` allows.

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


@dataclasses.dataclass(frozen=True)
class PythonAdapter(Adapter):
    """Watches any iterable; in tuning, the buffer is queuetune's own (none by default)."""

    def describe(self, loader: Any) -> MetaFields:
        if isinstance(loader, Iterator):
            kind = "generator" if isinstance(loader, types.GeneratorType) else "iterator"
        else:
            kind = "iterable"
        # a plain loader reads nothing ahead
        added: MetaFields = {"loader": kind, "framework": "python", "type": type(loader).__qualname__, "depth": 0}
        try:
            added["num_batches"] = len(loader)
        except TypeError:
            pass
        return added

    def watch(
        self, loader: Any, meta: TraceMeta, sample_memory: bool, key: Any = None
    ) -> tuple[Iterator[Any] | WatchedIterable, Recorder]:
        keyer = None if key is False else SampleKey(key)
        recorder = Recorder(meta, sample_memory=sample_memory)
        if isinstance(loader, Iterator):
            return watched_generator(loader, recorder, keyer), recorder
        return WatchedIterable(loader, recorder, keyer), recorder

    def tuner_defaults(self, factory: Callable[..., Any], loader: Any, kwargs: dict[str, Any]) -> Settings:
        return {"buffer": 0}


ADAPTERS: dict[str, type[Adapter]] = {"python": PythonAdapter}
