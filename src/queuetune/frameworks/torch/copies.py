"""The step's copies of its batch to the device, timed: while a watched pass is
open, ``Tensor.to`` and ``Tensor.cuda`` called on a tensor of one of the last
batches it handed over are timed where they return a tensor on another
device, and each step's copies are recorded as one ``step_copy`` mark
(``{"batch": n, "seconds": s, "bytes": b, "pageable": p}``: the pass's batch
number, the seconds the step waited in them, the bytes copied and those read
from pageable memory).

A copy from pageable memory returns once its data has left the host, so the
time is what the step waited for; an asynchronous copy from pinned memory
(``non_blocking=True``) returns at once, and costs the step nothing here. The
methods are wrapped only while a pass that may copy is open (an accelerator
is available), and every other tensor's call passes through after a lookup.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ...record.recorder import Recorder, clock

#: The most tensors of one batch that are watched, and how deep its containers are read.
MOST_LEAVES, DEEPEST = 256, 4
#: The batches handed over last whose tensors are watched (a step may copy the next one ahead).
KEPT_BATCHES = 2
_METHODS = ("to", "cuda")

_lock = threading.Lock()
_open: list[StepCopies] = []
#: Each method as ``torch.Tensor`` had it: its own, or None where it inherits the C one.
_originals: dict[str, Any] = {}
_Entry = tuple[weakref.ref[torch.Tensor], "StepCopies"]
#: The watched tensors by id (a tensor freed may leave its id to a new one: the reference tells).
_watched: dict[int, _Entry] = {}


def leaves(batch: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """The tensors of ``batch`` and of the containers in it (lists, tuples, dicts).

    >>> [t.tolist() for t in leaves({"x": torch.ones(2), "y": [torch.zeros(1), "label"]})]
    [[1.0, 1.0], [0.0]]
    """
    if isinstance(batch, torch.Tensor):
        yield batch
    elif depth < DEEPEST and isinstance(batch, (list, tuple)):
        for item in batch:
            yield from leaves(item, depth + 1)
    elif depth < DEEPEST and isinstance(batch, dict):
        for item in batch.values():
            yield from leaves(item, depth + 1)


def _timed(name: str) -> Callable[..., Any]:
    def method(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        original = _originals.get(name) or getattr(torch._C.TensorBase, name)
        entry = _watched.get(id(self))
        if entry is None or entry[0]() is not self or torch.compiler.is_compiling():
            return original(self, *args, **kwargs)
        start = clock()
        moved = original(self, *args, **kwargs)
        seconds = clock() - start
        if isinstance(moved, torch.Tensor) and moved.device != self.device:
            entry[1].copied(seconds, moved.nbytes, _pageable(self))
        return moved

    method.__name__ = method.__qualname__ = name
    return method


def _pageable(tensor: torch.Tensor) -> bool:
    if tensor.device.type != "cpu":
        return False
    try:
        return not tensor.is_pinned()
    except RuntimeError:
        return True


class StepCopies:
    """One watched pass's copies to the device, a ``step_copy`` mark for each
    step that made any, recorded on ``recorder``: opened with the pass, told of
    each batch handed over (:meth:`handed`), closed as the pass ends.

    >>> from queuetune.record.trace import TraceMeta
    >>> recorder = Recorder(TraceMeta())
    >>> copies = StepCopies(recorder)
    >>> batch = {"x": torch.ones(4)}
    >>> copies.handed(batch)
    >>> on_meta = batch["x"].to("meta")  # another device: a copy the step waits for
    >>> copies.close()
    >>> [(m.kind, m.value["batch"], m.value["bytes"]) for m in recorder.trace().marks]
    [('step_copy', 0, 16)]
    >>> recorder.close()
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.batches = 0
        self.kept: list[list[tuple[int, _Entry]]] = []
        self.seconds, self.bytes, self.pageable = 0.0, 0, 0
        self.closed = False
        with _lock:
            if not _open:
                for name in _METHODS:
                    _originals[name] = torch.Tensor.__dict__.get(name)
                    setattr(torch.Tensor, name, _timed(name))
            _open.append(self)

    def handed(self, batch: Any) -> None:
        """The step that took the batch before ``batch`` has ended: its copies
        are recorded; ``batch``'s tensors are watched from now on."""
        if self.closed:
            return
        self._flush()
        entries = []
        for i, tensor in enumerate(leaves(batch)):
            if i == MOST_LEAVES:
                break
            entry = _watched[id(tensor)] = (weakref.ref(tensor), self)
            entries.append((id(tensor), entry))
        self.kept.append(entries)
        if len(self.kept) > KEPT_BATCHES:
            self._forget(self.kept.pop(0))
        self.batches += 1

    def copied(self, seconds: float, nbytes: int, pageable: bool) -> None:
        self.seconds += seconds
        self.bytes += nbytes
        self.pageable += nbytes if pageable else 0

    def close(self) -> None:
        """Record the last step's copies and stop watching; the methods are
        given back once no pass is open."""
        if self.closed:
            return
        self.closed = True
        self._flush()
        for entries in self.kept:
            self._forget(entries)
        self.kept.clear()
        with _lock:
            if self in _open:
                _open.remove(self)
            if not _open:
                for name in _METHODS:
                    original = _originals.pop(name)
                    if original is None:
                        delattr(torch.Tensor, name)
                    else:
                        setattr(torch.Tensor, name, original)

    def _flush(self) -> None:
        if self.bytes:
            value = {"batch": self.batches - 1, "seconds": self.seconds, "bytes": self.bytes, "pageable": self.pageable}
            self.recorder.mark("step_copy", value)
        self.seconds, self.bytes, self.pageable = 0.0, 0, 0

    def _forget(self, entries: list[tuple[int, _Entry]]) -> None:
        for key, entry in entries:
            if _watched.get(key) is entry:
                del _watched[key]


def may_copy() -> bool:
    """Whether a step may copy its batches to a device: an accelerator is available.

    >>> isinstance(may_copy(), bool)
    True
    """
    return bool(torch.accelerator.is_available())


def watched_steps(batches: Iterator[Any], recorder: Recorder) -> Iterator[Any]:
    """``batches`` handed over as they come, each step's copies of them recorded
    on ``recorder`` (a loader of queuetune's own, where it copies nothing ahead).

    >>> from queuetune.record.trace import TraceMeta
    >>> recorder = Recorder(TraceMeta())
    >>> [b.to("meta").device.type for b in watched_steps(iter([torch.ones(2), torch.ones(3)]), recorder)]
    ['meta', 'meta']
    >>> [m.value["bytes"] for m in recorder.trace().marks]
    [8, 12]
    >>> recorder.close()
    """
    copies = StepCopies(recorder)
    try:
        while True:
            try:
                # In a list, yielded by a pop: a batch the step lets go of is freed then, not held here.
                out = [next(batches)]
            except StopIteration:
                return
            copies.handed(out[0])
            yield out.pop()
    finally:
        copies.close()
        close = getattr(batches, "close", None)
        if close is not None:
            close()
