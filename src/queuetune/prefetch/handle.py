"""The prefetcher's handle, :class:`Prefetcher`: its settings, each epoch begun,
and what outlives an epoch (the trace, the sizes of batches seen, where it stands
among its epochs, the workers it keeps)."""

from __future__ import annotations

import dataclasses
import multiprocessing.context
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..frameworks import detect
from ..frameworks.adapters import adapter_of
from ..record.trace import Trace
from . import faults
from .config import BatchSizes
from .epoch import Epoch, refuse_second_reader
from .kept import Kept
from .options import PrefetchOptions, source_length
from .place import Place
from .recording import prefetcher_recorder
from .settings import PrefetcherSettings

if TYPE_CHECKING:
    from ..analysis.report import Report


class Prefetcher(PrefetcherSettings):
    """Builds batches ahead of the consumer within a budget in bytes.

    ``source`` is indexable (a Keras ``PyDataset``, a torch map-style dataset,
    anything with ``__getitem__`` and ``__len__``; with ``batch_size`` its items
    are samples that ``collate_fn`` joins into batches) or a plain iterable (a
    generator, an iterator: read by one worker thread). Each ``for`` loop is one
    epoch: every batch exactly once, in order unless ``ordered=False``, nothing
    read past the end, no batch carried into the next epoch.

    The workers (threads or processes) and the depth are kept from one epoch to
    the next, as torch's ``persistent_workers=True`` keeps its workers, so each
    epoch after the first starts at full speed; ``close()`` (or the end of a
    ``with`` block) ends them. An epoch that ends with an error lets its workers
    go, and the next starts new ones. One epoch runs at a time::

        with Prefetcher(dataset, batch_size=128, max_bytes="2GiB", mode="process", workers=8) as loader:
            for epoch in range(90):
                for images, labels in loader:
                    step(images, labels)

    With ``adaptive=True`` the depth (batches being built or ready) starts with
    every worker building and one batch more, grows while the consumer waits
    and shrinks when the queue stays full; it never passes ``max_bytes``.
    With ``adaptive=False`` it is fixed at ``depth`` (by default ``workers``).
    The bytes of batches built or being built and not yet taken stay within
    ``max_bytes``: each is reserved, before it starts, as much as the largest
    of the latest batches (more while they grow). A batch that outgrows its
    reservation is held all the same, and no batch starts until the bytes fit
    again; only a batch larger than ``max_bytes`` by itself is a
    :class:`BudgetExceeded` error. In process mode the shared memory itself
    (``/dev/shm``: segments of batches under way, ready, handed over and still
    in use, or kept for reuse) never passes ``max_bytes``: an array that finds
    no room there comes through the pipe instead.

    ``workers``: how many build at once (by default 2 for an indexable source
    and 1 for a plain iterable, which one thread reads: more is a ``ValueError``),
    or ``"auto"`` (indexable sources only): added while the consumer waits for
    builds and idle cores can take them, removed when they idle (see
    :class:`.crew.WorkerController`), at most ``max_workers`` (by default one per
    core in process mode; four per core, 8 to 32, in thread mode). Each epoch
    starts with the count the one before ended with.

    ``timeout``: seconds the consumer waits for one batch (its build, and in
    process mode its copy into shared memory) before a ``TimeoutError`` naming
    the batch; the epoch then stops its workers (a thread whose build never
    returns keeps running: use ``mode="process"`` for builds that can hang).
    ``close()`` from another thread wakes a waiting consumer with :class:`PrefetcherClosed`.

    ``multiprocessing_context`` (``mode="process"`` only), as for torch's
    ``DataLoader``: ``"fork"``, ``"forkserver"``, ``"spawn"``, a context from
    ``multiprocessing.get_context``, or ``None`` for Python's default. With
    ``forkserver`` and ``spawn`` the source and ``collate_fn`` are pickled to
    each worker, so define them at a module's top level (docs/prefetcher.md
    says when each start method forks its workers, and what Python keeps).

    ``trace_epochs``: how many of the latest epochs :meth:`trace` keeps (a batch's
    record is a few hundred bytes, weeks of epochs many); ``None`` keeps them all.

    ``device="cuda"``: arrays and tensors reach the device ``device_depth`` batches ahead, through reused pinned
    buffers (docs/prefetcher.md, "The device stage"); ``pin_memory=True`` alone hands over pinned tensors.

    >>> import numpy as np
    >>> batches = [np.full(1000, i) for i in range(6)]
    >>> with Prefetcher(batches, max_bytes="1MiB") as p:
    ...     [int(b[0]) for b in p]
    [0, 1, 2, 3, 4, 5]

    A consumer that must not wait forever for a stuck source:

    >>> release = threading.Event()
    >>> class Stuck:
    ...     def __len__(self): return 3
    ...     def __getitem__(self, i): release.wait(10) if i == 1 else None; return np.zeros(10)
    >>> with Prefetcher(Stuck(), max_bytes="1MiB", workers=1, timeout=0.5) as p:
    ...     for batch in p: pass
    Traceback (most recent call last):
    TimeoutError: batch 1 of the epoch (index 1) was not ready within timeout=0.5 s; the epoch is stopped
    >>> release.set()
    """

    def __new__(cls, source: Any = None, *args: Any, **kwargs: Any) -> Any:
        return _in_form(super().__new__(cls), source, args, kwargs)

    def __init__(
        self,
        source: Any,
        *,
        max_bytes: int | str | float,
        workers: int | str | None = None,
        max_workers: int | None = None,
        mode: str = "thread",
        adaptive: bool = True,
        depth: int | None = None,
        max_depth: int = 64,
        ordered: bool = True,
        batch_size: int | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        shuffle: bool = False,
        seed: int | None = None,
        drop_last: bool = False,
        sample_memory: bool = True,
        timeout: float | None = None,
        trace_epochs: int | None = 16,
        multiprocessing_context: str | multiprocessing.context.BaseContext | None = None,
        device: str | Any | None = None,
        pin_memory: bool = False,
        device_depth: int = 2,
        device_bytes: int | str | float | None = None,
        pinned_bytes: int | str | float | None = None,
    ) -> None:
        #: The settings, checked (see :class:`.options.PrefetchOptions`): every argument as given, by name.
        self.options = options = PrefetchOptions.checked(**{k: v for k, v in locals().items() if k != "self"})
        self._adopt(options)
        self._owner, self._source, self._indexable, self._closed = os.getpid(), source, options.indexable, False
        self.recorder = prefetcher_recorder(options, source)
        # Where it stands among its epochs; the sizes of batches seen; what it keeps from one epoch to the next.
        self._place, self._sizes, self._kept = Place(), BatchSizes(), Kept(options, source, self.recorder)
        self._epoch: Epoch | None = None
        self._lock = threading.RLock()  # held while an epoch is made, replaced or stopped: one at a time
        self._finalizer = self._kept.finalizer(self)

    @property
    def source(self) -> Any:
        """The dataset or iterable the prefetcher reads."""
        return self._source

    def __len__(self) -> int:
        return self.options.batches(source_length(self._source)) if self._indexable else len(self._source)

    def __iter__(self) -> Iterator[Any]:
        if os.getpid() != self._owner:
            raise faults.forked(self._owner)
        with self._lock:
            if self._closed:
                raise ValueError("this Prefetcher is closed")
            refuse_second_reader(self._epoch)
            self._end_epoch()
            plan, handed = (
                self._place.next_plan(self.options, self._source, self.recorder) if self._indexable else (None, None)
            )
            self._epoch = self._kept.epoch(self.num_workers, plan, handed, self._sizes)
            return self._kept.read(self._epoch, self)

    def state_dict(self) -> dict[str, Any]:
        """Where this prefetcher stands, as small plain data (JSON-able): the
        epoch under way, the batches of it handed over, the seed of its order.
        Taken between any two batches, a new Prefetcher over the same source (in
        a new process, with any worker count, mode or ``max_bytes``) given it by
        :meth:`load_state_dict` hands over exactly the batches this one would
        have from there: the rest of the epoch (a batch built and not yet taken
        is built again), then every later epoch in the same order.

        >>> import numpy as np
        >>> items = [np.full(4, i) for i in range(6)]
        >>> with Prefetcher(items, max_bytes="1MiB", shuffle=True, seed=1) as p:
        ...     it = iter(p); first = [int(next(it)[0]) for _ in range(2)]; state = p.state_dict()
        ...     rest = [int(b[0]) for b in it]
        >>> state["epoch"], state["done"]
        (0, 2)
        >>> with Prefetcher(items, max_bytes="1MiB", shuffle=True, seed=1, workers=1) as resumed:
        ...     resumed.load_state_dict(state)
        ...     [int(b[0]) for b in resumed] == rest
        True
        """
        state = self._place.state(self.options, self._source)
        self.recorder.checkpoint()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state`` (what :meth:`state_dict` gave, here or in another
        process): the next loop hands over what the prefetcher that gave it would
        have handed over next. Load it before the loop; a state of another source
        (another length, batch size, ``drop_last`` or ``shuffle``) is a ``ValueError``.

        >>> p = Prefetcher(list(range(8)), max_bytes="1MiB", batch_size=2)
        >>> p.load_state_dict({**p.state_dict(), "done": 3}); [b.tolist() for b in p]
        [[6, 7]]
        >>> Prefetcher(list(range(9)), max_bytes="1MiB", batch_size=2).load_state_dict(p.state_dict())
        Traceback (most recent call last):
        ...
        ValueError: the state is of a source of 8 items, and this one has 9: resume over the same source
        >>> p.close()
        """
        progress, seed = Place.read(state, self.options, self._source)
        with self._lock:
            if self._epoch is not None and self._epoch.running:
                raise ValueError("a state is loaded between epochs, not while one is being read: load it first")
            # Each epoch's order is drawn from the seed and the epoch's number (see .resume).
            self.options = dataclasses.replace(self.options, seed=seed)
            self._place.resume(progress)

    def _end_epoch(self, reason: str = "a new epoch began", wait: bool = True, release: bool = False) -> None:
        if self._epoch is not None:
            self._epoch.stop(reason, wait=wait, release=release)
            if self._epoch.crew is not None:
                self.num_workers = self._epoch.crew.workers
            self._epoch = None

    def build_now(self, index: int) -> Any:
        """Build batch ``index`` (of the unshuffled order) in the calling thread."""
        return self.options.build(self._source, index)

    @property
    def depth(self) -> int:
        """The current depth: batches allowed to be being built or ready."""
        epoch = self._epoch
        return epoch.depth if epoch is not None else self._kept.depth()

    @property
    def workers(self) -> int:
        """The workers building at once now (with ``workers="auto"``, as last decided)."""
        epoch, kept = self._epoch, self._kept.workers
        return epoch.workers.count if epoch is not None else kept[0].count if kept else self.num_workers

    def trace(self) -> Trace:
        """What was recorded: batches built and taken, and every depth decision."""
        return self.recorder.trace()

    def report(self) -> Report:
        """The probe's report of everything recorded so far."""
        from ..analysis.report import analyze

        return analyze(self.trace())

    def close(self) -> None:
        """Stop the current epoch, the workers and the helper threads (idempotent).

        Called from another thread while the consumer waits for a batch, it wakes
        the consumer with :class:`PrefetcherClosed` at once; a build still running
        in a worker thread finishes in the background and is dropped.
        """
        with self._lock:
            self._closed = True
            epoch = self._epoch
            if epoch is not None:
                epoch.on_leave = self._finalizer
            elsewhere = epoch is not None and epoch.consumer not in (None, threading.get_ident())
            self._end_epoch("close() was called", wait=not elsewhere, release=True)
            if not elsewhere:
                self._kept.release()
        if not (elsewhere and epoch.running):  # type: ignore[union-attr]
            self._finalizer()
        # else the consumer, woken, closes the recorder as it leaves the epoch

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _in_form(prefetcher: Prefetcher, source: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``prefetcher`` as the framework that reads loaders of ``source``'s kind takes it (a Keras ``PyDataset``)."""
    try:
        form = adapter_of(detect(source)).prefetcher_form()
    except TypeError:  # not iterable: a map-style dataset
        form = None
    if type(prefetcher) is not Prefetcher or form is None:
        return prefetcher
    Prefetcher.__init__(prefetcher, source, *args, **kwargs)
    return form(prefetcher)
