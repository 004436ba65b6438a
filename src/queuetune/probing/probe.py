"""Probing: wrap a loader so that it records what it builds and what is consumed,
and the :class:`Probe` that reads the record (printing it is the API's, :mod:`queuetune.api`)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ..common.launch import Launch
from ..frameworks import PYTHON, detect
from ..frameworks.adapters import adapter_of
from ..record.recorder import Recorder
from ..record.records import with_fields
from ..record.trace import Trace, TraceMeta

if TYPE_CHECKING:
    from ..analysis.report import Report
    from ..frameworks.base import Adapter

_PROBES: weakref.WeakKeyDictionary[Any, Probe] = weakref.WeakKeyDictionary()


class Probe:
    """The handle of a watched loader: its trace and its report (the one
    :func:`queuetune.watch` gives is :class:`queuetune.api.Probe`, which prints too).

    >>> loader = watch(iter([b"ab", b"cd", b"ef"]))
    >>> with probe_of(loader) as probe:
    ...     taken = list(loader)
    ...     len(probe.trace().produced), probe.settle(quiet=0.01)
    (3, 3)
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def trace(self) -> Trace:
        """What was recorded so far, as a :class:`Trace`."""
        return self.recorder.trace()

    def report(self) -> Report:
        """Analyse the trace: read-ahead, in flight, waits, memory, coverage."""
        from ..analysis.report import analyze

        return analyze(self.trace())

    def settle(self, quiet: float = 0.2, timeout: float = 5.0) -> int:
        """Wait until no batch has been built for ``quiet`` seconds (workers that
        were still building when the consumer stopped finish or are stopped), at
        most ``timeout`` seconds; return the batches produced so far.

        >>> import queuetune
        >>> queuetune.probe_of(queuetune.watch([1, 2])).settle(quiet=0.01)
        0
        """
        import time

        deadline = time.monotonic() + timeout
        count = self.recorder.produced_count()
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(min(quiet / 4, 0.05))
            now = self.recorder.produced_count()
            if now != count:
                count, quiet_since = now, time.monotonic()
            elif time.monotonic() - quiet_since >= quiet:
                break
        return count

    def close(self) -> None:
        """End the open run and stop the probe's helper threads."""
        self.recorder.close()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def watch(
    loader: Any, *, name: str | None = None, sample_memory: bool = True, key: Any = None, handle: type[Probe] = Probe
) -> Any:
    """Wrap ``loader`` so that it records every batch it builds and hands over.

    Returns an object to pass to your training code in place of ``loader``:
    a generator for a generator or iterator, an iterable for an iterable, a
    Keras ``PyDataset`` for a ``PyDataset``, a torch ``DataLoader`` for a
    ``DataLoader``, a dataset to iterate as before (``iter_batches``,
    ``iter_torch_batches``) for a Ray Data ``Dataset`` (its blocks are counted in
    the remote tasks that build them; Ray starts as Ray Data would start it). Its probe
    (``queuetune.probe_of(result)``, a ``handle``) gives the report.

    ``key`` says how samples are told apart for the coverage check where
    batches carry no index (a torch ``IterableDataset``): by default (None) a
    fingerprint of each sample's content, taken where it is built
    (:func:`queuetune.record.fingerprint.fingerprint`; a worker stops taking them
    where they would cost more than 2 % of a step); a function of one sample
    gives its key instead (an id, a file name); False takes none.

    >>> import numpy as np, queuetune
    >>> gen = queuetune.watch(np.ones((8, 8)) for _ in range(3))
    >>> sum(1 for _ in gen)
    3
    >>> queuetune.report(gen).produced_batches
    3
    """
    if loader is None or isinstance(loader, (str, bytes, dict, int, float, bool)):
        raise TypeError(
            f"watch() needs a loader (a generator, iterable, Keras PyDataset, torch "
            f"DataLoader or Ray Dataset), got {type(loader).__name__}"
        )
    if _is_watched(loader):
        raise ValueError("this loader is already watched by queuetune")
    meta = TraceMeta(name=name or None)
    launch = Launch.from_environment()
    if launch is not None:
        meta.rank, meta.world_size, meta.job = launch.rank, launch.world_size, launch.job
    try:
        framework = detect(loader)
    except TypeError:
        raise TypeError(
            f"watch() needs a loader (a generator, iterable, Keras PyDataset, torch DataLoader or Ray Dataset); "
            f"{type(loader).__name__} is not iterable"
        ) from None
    # A loader whose framework has no watcher of its own (tf.data) is read as a plain iterable.
    if key is not None and key is not False and not callable(key):
        raise TypeError(f"key must be a function of one sample, None or False, got {type(key).__name__}")
    watched = _watched(adapter_of(framework), loader, meta, sample_memory, key)
    if watched is None:
        watched = _watched(adapter_of(PYTHON), loader, meta, sample_memory, key)
    assert watched is not None  # any iterable has a watcher
    return _register(*watched, handle)


def probe_of(watched: Any) -> Probe:
    """The :class:`Probe` of an object returned by :func:`watch`.

    >>> import queuetune
    >>> queuetune.probe_of(queuetune.watch([1])).report().produced_batches
    0
    """
    try:
        return _PROBES[watched]
    except (KeyError, TypeError):
        raise ValueError(
            f"{type(watched).__name__} object is not watched: pass the object queuetune.watch() returned"
        ) from None


def report(watched: Any) -> Report:
    """Shortcut for ``probe_of(watched).report()``."""
    return probe_of(watched).report()


def _watched(
    adapter: Adapter, loader: Any, meta: TraceMeta, sample_memory: bool, key: Any
) -> tuple[Any, Recorder] | None:
    """``adapter``'s watched ``loader``, with what the adapter says of it merged into a copy of ``meta``."""
    return adapter.watch(loader, with_fields(meta, adapter.describe(loader)), sample_memory, key)


def _register(watched: Any, recorder: Recorder, handle: type[Probe]) -> Any:
    _PROBES[watched] = handle(recorder)
    return watched


def _is_watched(obj: Any) -> bool:
    try:
        return obj in _PROBES
    except TypeError:
        return False
