"""What the device stage tells the trace (:class:`Notes`): each batch's times as
a ``device_copy`` mark, the pinned bytes held and the device's bytes ahead as
``pinned_bytes`` and ``device_bytes`` marks where they changed."""

from __future__ import annotations

from collections import deque
from typing import Any

from ...record.recorder import Recorder
from .transfer import Copy


class Notes:
    """The device stage's marks in ``recorder``'s trace.

    >>> from queuetune.record.recorder import Recorder
    >>> from queuetune.record.trace import TraceMeta
    >>> recorder = Recorder(TraceMeta(loader="demo"), sample_memory=False)
    >>> notes = Notes(recorder)
    >>> from .transfer import HostCopy
    >>> notes.levels(1024, 512); notes.levels(1024, 0); notes.copied(0, 0.25, 0.125, HostCopy([]))
    >>> [(m.kind, m.value) for m in recorder.trace().marks]  # doctest: +NORMALIZE_WHITESPACE
    [('pinned_bytes', 1024), ('device_bytes', 512), ('device_bytes', 0),
     ('device_copy', {'batch': 0, 'seconds': 0.25, 'staging': 0.125, 'copy': None})]
    >>> recorder.close()
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.pinned: int | None = None
        self.device: int | None = None
        # Batches handed over whose copy the device has not timed yet: marked once it has.
        self.pending: deque[tuple[dict[str, Any], Copy]] = deque()

    def copied(self, number: int, seconds: float, staging: float, copy: Copy) -> None:
        """Batch ``number`` of the epoch was handed over, ``seconds`` after its
        staging began, which took ``staging`` seconds: marked with its ``copy``'s
        own time on the device, where the device times it, once it is done."""
        value = {"batch": number, "seconds": max(0.0, seconds), "staging": max(0.0, staging), "copy": None}
        self.pending.append((value, copy))
        self._mark(wait=False)

    def settle(self) -> None:
        """No copy is ahead any more: every batch handed over is marked, its copy waited for."""
        self._mark(wait=True)

    def _mark(self, wait: bool) -> None:
        while self.pending:
            value, copy = self.pending[0]
            try:
                elapsed = copy.elapsed(wait=False)
                if elapsed is None and wait:
                    elapsed = copy.elapsed(wait=True)
            except Exception:  # a copy that failed on the device: its error was the consumer's
                elapsed = None
            if elapsed is None and not wait and copy.timed:
                return
            self.pending.popleft()
            value["copy"] = elapsed
            self.recorder.mark("device_copy", value)

    def levels(self, pinned: int, device: int) -> None:
        """The pinned bytes held and the device's bytes ahead now: marked where they changed."""
        if pinned != self.pinned:
            self.pinned = pinned
            self.recorder.mark("pinned_bytes", pinned)
        if device != self.device:
            self.device = device
            self.recorder.mark("device_bytes", device)
