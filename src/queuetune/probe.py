"""watch(): wrap a loader so that it records what it builds and what is consumed."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from .frameworks import PYTHON, detect
from .launch import Launch
from .recorder import Recorder
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

    def print_report(self, console: Any = None) -> None:
        """Print the report as a table on the terminal (on ``console``, a rich Console, if given)."""
        from .render.console import print_report

        print_report(self.report(), console)

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

    def keras_callback(self, print_report: bool = True, tensorboard: str | None = None, every: float = 1.0) -> Any:
        """A ``keras.callbacks.Callback`` that records consumption by ``fit``/``predict``/
        ``evaluate`` and prints the report when the call ends.

        Put it last in ``callbacks``: the time from its ``on_*_batch_end`` to the
        next ``on_*_batch_begin`` counts as waiting for input, so callbacks after
        it would count as input wait. ``tensorboard``: a log folder where the
        input wait, bytes in flight and batches/s are written as TensorBoard
        scalars each ``every`` seconds (``pip install 'queuetune[tensorboard]'``).

        >>> # model.fit(ds, callbacks=[queuetune.probe_of(ds).keras_callback(tensorboard="logs")])
        """
        from .frameworks.keras.watch import ProbeCallback

        scalars = None
        if tensorboard is not None:
            from .render.tensorboard import ScalarWriter, writer_class

            writer_class()  # a missing tensorboard is an error now, not at the first batch
            logdir = tensorboard
            scalars = lambda: ScalarWriter(logdir)  # noqa: E731
        return ProbeCallback(self, print_report=print_report, scalars=scalars, every=every)

    def close(self) -> None:
        """End the open run and stop the probe's helper threads."""
        self.recorder.close()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def watch(loader: Any, *, name: str | None = None, sample_memory: bool = True, key: Any = None) -> Any:
    """Wrap ``loader`` so that it records every batch it builds and hands over.

    Returns an object to pass to your training code in place of ``loader``:
    a generator for a generator or iterator, an iterable for an iterable, a
    Keras ``PyDataset`` for a ``PyDataset``, a torch ``DataLoader`` for a
    ``DataLoader``, a dataset to iterate as before (``iter_batches``,
    ``iter_torch_batches``) for a Ray Data ``Dataset`` (its blocks are counted in
    the remote tasks that build them; Ray starts as Ray Data would start it). Its probe
    (``queuetune.probe_of(result)``) gives the report.

    ``key`` says how samples are told apart for the coverage check where
    batches carry no index (a torch ``IterableDataset``): by default (None) a
    fingerprint of each sample's content, taken where it is built
    (:func:`queuetune.fingerprint.fingerprint`; a worker stops taking them
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
    watched = framework.watch(loader, meta, sample_memory, key) or PYTHON.watch(loader, meta, sample_memory, key)
    return _register(*watched)


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


def print_report(watched: Any, console: Any = None) -> None:
    """Shortcut for ``probe_of(watched).print_report()``: the report as a table.

    >>> import io, queuetune
    >>> from rich.console import Console
    >>> loader = queuetune.watch([b"12"])
    >>> _ = list(loader)
    >>> out = io.StringIO()
    >>> queuetune.print_report(loader, Console(file=out, width=100))
    >>> "produced (built)" in out.getvalue()
    True
    """
    probe_of(watched).print_report(console)


def _register(watched: Any, recorder: Recorder) -> Any:
    _PROBES[watched] = Probe(recorder)
    return watched


def _is_watched(obj: Any) -> bool:
    try:
        return obj in _PROBES
    except TypeError:
        return False
