"""watch(): wrap a loader so that it records what it builds and what is consumed."""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .kinds import is_dataloader, is_pydataset, is_ray_dataset
from .nbytes import nbytes
from .recorder import Recorder, clock
from .trace import Trace, TraceMeta

if TYPE_CHECKING:
    from .analysis import Report

_PROBES: weakref.WeakKeyDictionary[Any, Probe] = weakref.WeakKeyDictionary()


class Probe:
    """The handle of a watched loader: its trace, its report, its Keras callback.

    >>> import numpy as np, queuetune
    >>> loader = queuetune.watch([np.zeros(4), np.zeros(4)])
    >>> for batch in loader:
    ...     pass
    >>> probe = queuetune.probe_of(loader)
    >>> probe.report().consumed_batches
    2
    >>> probe.close()
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def trace(self) -> Trace:
        """What was recorded so far, as a :class:`Trace`."""
        return self.recorder.trace()

    def report(self) -> Report:
        """Analyse the trace: read-ahead, in flight, waits, memory, coverage."""
        from .analysis import analyze

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

    def keras_callback(self, print_report: bool = True) -> Any:
        """A ``keras.callbacks.Callback`` that records consumption by ``fit``/``predict``/
        ``evaluate`` and prints the report when the call ends.

        Put it last in ``callbacks``: the time from its ``on_*_batch_end`` to the
        next ``on_*_batch_begin`` counts as waiting for input, so callbacks after
        it would count as input wait.

        >>> # model.fit(ds, callbacks=[queuetune.probe_of(ds).keras_callback()])
        """
        from .frameworks.keras import ProbeCallback

        return ProbeCallback(self, print_report=print_report)

    def close(self) -> None:
        """End the open run and stop the probe's helper threads."""
        self.recorder.close()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def watch(loader: Any, *, name: str | None = None, sample_memory: bool = True) -> Any:
    """Wrap ``loader`` so that it records every batch it builds and hands over.

    Returns an object to pass to your training code in place of ``loader``:
    a generator for a generator or iterator, an iterable for an iterable, a
    Keras ``PyDataset`` for a ``PyDataset``, a torch ``DataLoader`` for a
    ``DataLoader``, a dataset to iterate as before (``iter_batches``,
    ``iter_torch_batches``) for a Ray Data ``Dataset`` (its blocks are counted in
    the remote tasks that build them; Ray starts as Ray Data would start it). Its probe
    (``queuetune.probe_of(result)``) gives the report.

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
    if is_pydataset(loader):
        from .frameworks.keras import watch_pydataset

        return _register(*watch_pydataset(loader, meta, sample_memory))
    if is_dataloader(loader):
        from .frameworks.torch import watch_dataloader

        return _register(*watch_dataloader(loader, meta, sample_memory))
    if is_ray_dataset(loader):
        from .frameworks.ray import watch_dataset

        return _register(*watch_dataset(loader, meta, sample_memory))
    if isinstance(loader, Iterator):
        meta.loader = "generator" if isinstance(loader, types.GeneratorType) else "iterator"
        recorder = Recorder(_with_loader_meta(meta, loader), sample_memory=sample_memory)
        return _register(watched_generator(loader, recorder), recorder)
    if isinstance(loader, Iterable):
        meta.loader = "iterable"
        recorder = Recorder(_with_loader_meta(meta, loader), sample_memory=sample_memory)
        return _register(WatchedIterable(loader, recorder), recorder)
    raise TypeError(
        f"watch() needs a loader (a generator, iterable, Keras PyDataset, torch DataLoader or Ray Dataset); "
        f"{type(loader).__name__} is not iterable"
    )


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


def _register(watched: Any, recorder: Recorder) -> Any:
    _PROBES[watched] = Probe(recorder)
    return watched


def _is_watched(obj: Any) -> bool:
    try:
        return obj in _PROBES
    except TypeError:
        return False


def _with_loader_meta(meta: TraceMeta, loader: Any) -> TraceMeta:
    meta.framework = meta.framework or "python"
    meta.type = type(loader).__qualname__
    meta.depth = 0  # a plain loader reads nothing ahead (knobs: depth 0)
    try:
        meta.num_batches = len(loader)
    except TypeError:
        pass
    return meta


def watched_generator(source: Iterator[Any], recorder: Recorder) -> Iterator[Any]:
    """A generator over ``source`` that records each batch as built and, unless a
    callback records consumption, as consumed when it is handed over."""
    seq = 0

    def record(asked: float, got: float, batch: Any) -> None:
        nonlocal seq
        size = nbytes(batch)
        recorder.produced(asked, got, size, None, seq)
        if recorder.consumer == "iterator":
            recorder.consumed(asked, got, nbytes=size, key=seq)
        seq += 1

    return recorded(source, recorder, record)


def recorded(
    source: Iterator[Any],
    recorder: Recorder,
    record: Callable[[float, float, Any], None],
    close_source: bool = False,
) -> Iterator[Any]:
    """A generator over ``source`` that times each ``next`` and passes (asked, got,
    batch) to ``record`` before handing the batch on. Unless a callback records
    consumption, the pass is one run. An error from ``source`` is noted on the
    recorder and raised; with ``close_source`` the source is closed when the
    generator ends.

    >>> rec = Recorder(TraceMeta(), sample_memory=False)
    >>> seen = []
    >>> list(recorded(iter("ab"), rec, lambda asked, got, batch: seen.append(batch)))
    ['a', 'b']
    >>> seen, [m.kind for m in rec.trace().marks]
    (['a', 'b'], ['run_begin', 'run_end'])
    >>> rec.close()
    """
    own_runs = recorder.consumer == "iterator"
    if own_runs:
        recorder.run_begin()
    try:
        while True:
            asked = clock()
            try:
                batch = next(source)
            except StopIteration:
                return
            record(asked, clock(), batch)
            yield batch
    except GeneratorExit:
        raise
    except BaseException as exc:
        recorder.error(exc)
        raise
    finally:
        if close_source:
            close = getattr(source, "close", None)
            if close is not None:
                close()
        if own_runs:
            recorder.run_end()


class WatchedIterable:
    """An iterable whose every pass is watched (one run and one epoch per pass)."""

    def __init__(self, inner: Iterable[Any], recorder: Recorder) -> None:
        self._inner = inner
        self._recorder = recorder

    def __iter__(self) -> Iterator[Any]:
        return watched_generator(iter(self._inner), self._recorder)

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_inner", "_recorder"):
            raise AttributeError(name)
        return getattr(self._inner, name)
