"""A watched ``DataLoader``'s pinning timed: each batch's copy into pinned
memory (``pin_memory=True``), in torch's pin-memory thread where the loader
has workers and in the main process where it has none, recorded as a
``pin_copy`` mark (``{"seconds": s}``) of the loader's recorder.

torch pins through one function, ``torch.utils.data._utils.pin_memory.pin_memory``,
which calls itself for each part of a batch; its outermost call in a thread the
loader owns is the batch's copy. The function is wrapped while such a thread
lives and passes through in every other thread: another loader's pinning is
neither timed nor slowed beyond a lookup. torch disables pinning where no accelerator is
available, so on a machine without one nothing is pinned and nothing timed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch.utils.data import _utils as torch_utils
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter, _SingleProcessDataLoaderIter

from ...record.recorder import Recorder, clock

#: The threads whose pinning is timed, each with the recorder it reports to.
_owners: dict[int, tuple[threading.Thread, Recorder]] = {}
_inside = threading.local()
_lock = threading.Lock()


class _Wrapped:
    """The pinning function wrapped: ``original`` is the one it calls."""

    def __init__(self, original: Callable[..., Any]) -> None:
        self.original = original

    def __call__(self, data: Any, device: Any = None) -> Any:
        owner = _owners.get(threading.get_ident())
        if owner is None or getattr(_inside, "active", False) or owner[0] is not threading.current_thread():
            return self.original(data, device)
        if data is None:  # persistent workers' answer as a pass begins: not a batch
            return self.original(data, device)
        _inside.active = True
        start = clock()
        try:
            pinned = self.original(data, device)
        finally:
            _inside.active = False
        owner[1].mark("pin_copy", {"seconds": clock() - start})
        return pinned


def _installed() -> None:
    """Have torch's pinning function wrapped (again, where something put another in its place)."""
    module = torch_utils.pin_memory
    if not isinstance(module.pin_memory, _Wrapped):
        module.pin_memory = _Wrapped(module.pin_memory)


def _given_back() -> None:
    """Give torch its own pinning function back, where no thread is timed any more."""
    module = torch_utils.pin_memory
    if not _owners and isinstance(module.pin_memory, _Wrapped):
        module.pin_memory = module.pin_memory.original


def own(thread: threading.Thread, recorder: Recorder) -> None:
    """Time the pinning ``thread`` does, for ``recorder``.

    >>> from queuetune.record.trace import TraceMeta
    >>> recorder = Recorder(TraceMeta())
    >>> own(threading.current_thread(), recorder)
    >>> _ = torch_utils.pin_memory.pin_memory("not a tensor")
    >>> [m.kind for m in recorder.trace().marks]
    ['pin_copy']
    >>> disown(threading.current_thread()); recorder.close()
    >>> isinstance(torch_utils.pin_memory.pin_memory, _Wrapped)  # given back with the last thread
    False
    """
    with _lock:
        _installed()
        for ident, (alive, _) in list(_owners.items()):
            if not alive.is_alive():
                _owners.pop(ident, None)
        if thread.ident is not None:
            _owners[thread.ident] = (thread, recorder)


def disown(thread: threading.Thread) -> None:
    """Stop timing ``thread``'s pinning; torch's own function is given back with the last."""
    with _lock:
        if thread.ident is not None:
            _owners.pop(thread.ident, None)
        _given_back()


@contextmanager
def owning(recorder: Recorder) -> Iterator[None]:
    """Time the pinning this thread does inside the block, for ``recorder``."""
    thread = threading.current_thread()
    own(thread, recorder)
    try:
        yield
    finally:
        disown(thread)


class SingleProcessIterator(_SingleProcessDataLoaderIter):
    """torch's iterator without workers, its batches' pinning timed."""

    def __init__(self, loader: Any, recorder: Recorder) -> None:
        self._queuetune_recorder = recorder
        super().__init__(loader)

    def _next_data(self) -> Any:
        if not self._pin_memory:
            return super()._next_data()  # type: ignore[no-untyped-call]
        with owning(self._queuetune_recorder):
            return super()._next_data()  # type: ignore[no-untyped-call]


class PinTimed(_MultiProcessingDataLoaderIter):
    """torch's iterator over worker processes, its pin-memory thread's pinning
    timed from before its first batch: the thread is claimed as the workers are
    first given indices, which is after it starts and before anything reaches it."""

    _queuetune_pins: Recorder | None = None

    def __init__(self, loader: Any, recorder: Recorder) -> None:
        self._queuetune_pins = recorder
        super().__init__(loader)

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        thread = getattr(self, "_pin_memory_thread", None) if self._pin_memory else None
        if thread is not None and self._queuetune_pins is not None:
            own(thread, self._queuetune_pins)
        super()._reset(loader, first_iter)

    def _shutdown_workers(self) -> None:
        thread = getattr(self, "_pin_memory_thread", None)
        super()._shutdown_workers()
        if thread is not None and not thread.is_alive():
            disown(thread)
