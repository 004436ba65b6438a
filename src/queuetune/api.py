"""The API a user holds: :func:`watch` and the :class:`Probe` it gives, with its
conveniences: the report printed as a table, a Keras callback, TensorBoard
scalars. Probing itself is :mod:`queuetune.probing.probe`; presentation, :mod:`queuetune.render`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .probing import probe as probing

if TYPE_CHECKING:
    from rich.console import Console

    from .analysis.report import Report

__all__ = ["Probe", "print_report", "probe_of", "report", "watch"]


class Probe(probing.Probe):
    """The handle of a watched loader: its trace, its report, the report printed,
    its Keras callback.

    >>> import numpy as np, queuetune
    >>> loader = queuetune.watch([np.zeros(4), np.zeros(4)])
    >>> for batch in loader:
    ...     pass
    >>> probe = queuetune.probe_of(loader)
    >>> probe.report().consumed_batches
    2
    >>> probe.close()
    """

    def print_report(self, console: Console | None = None) -> None:
        """Print the report's headline (see :mod:`queuetune.tune.headline`) and the
        report as a table on the terminal (on ``console``, a rich Console, if given)."""
        from .analysis.report import analyze
        from .terminal import print_report
        from .tune.headline import advise

        trace = self.trace()
        report = analyze(trace)
        print_report(report, console, headline=advise(trace, report)[1])

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
            from .sinks.tensorboard import ScalarWriter, writer_class

            writer_class()  # a missing tensorboard is an error now, not at the first batch
            logdir = tensorboard
            scalars = lambda: ScalarWriter(logdir)  # noqa: E731
        return ProbeCallback(self, on_end=self.print_report if print_report else None, scalars=scalars, every=every)


def watch(loader: Any, *, name: str | None = None, sample_memory: bool = True, key: Any = None) -> Any:
    """Wrap ``loader`` so that it records every batch it builds and hands over
    (see :func:`queuetune.probing.probe.watch`); its probe is a :class:`Probe`.

    >>> import numpy as np, queuetune
    >>> gen = queuetune.watch(np.ones((8, 8)) for _ in range(3))
    >>> sum(1 for _ in gen)
    3
    >>> queuetune.report(gen).produced_batches
    3
    """
    return probing.watch(loader, name=name, sample_memory=sample_memory, key=key, handle=Probe)


def probe_of(watched: Any) -> Probe:
    """The :class:`Probe` of an object returned by :func:`watch`, or of a
    :class:`queuetune.Prefetcher` (which records itself).

    >>> import queuetune
    >>> queuetune.probe_of(queuetune.watch([1])).report().produced_batches
    0
    """
    from .prefetch.handle import Prefetcher

    if isinstance(watched, Prefetcher):
        return Probe(watched.recorder)
    probe = probing.probe_of(watched)
    return probe if isinstance(probe, Probe) else Probe(probe.recorder)


def report(watched: Any) -> Report:
    """Shortcut for ``probe_of(watched).report()``: the report of a watched
    loader or of a :class:`queuetune.Prefetcher`.

    >>> import queuetune
    >>> with queuetune.Prefetcher(range(4), max_bytes="1MiB") as p:
    ...     _ = list(p)
    ...     queuetune.report(p).consumed_batches
    4
    """
    return probe_of(watched).report()


def print_report(watched: Any, console: Console | None = None) -> None:
    """Shortcut for ``probe_of(watched).print_report()``: the report as a table,
    of a watched loader or of a :class:`queuetune.Prefetcher`.

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
