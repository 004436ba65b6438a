"""What the device stage tells the trace (:class:`Notes`): each batch's copy time
as a ``device_copy`` mark, the pinned bytes held and the device's bytes ahead as
``pinned_bytes`` and ``device_bytes`` marks where they changed."""

from __future__ import annotations

from ...record.recorder import Recorder


class Notes:
    """The device stage's marks in ``recorder``'s trace.

    >>> from queuetune.record.recorder import Recorder
    >>> from queuetune.record.trace import TraceMeta
    >>> recorder = Recorder(TraceMeta(loader="demo"), sample_memory=False)
    >>> notes = Notes(recorder)
    >>> notes.levels(1024, 512); notes.levels(1024, 0); notes.copied(0, 0.25)
    >>> [(m.kind, m.value) for m in recorder.trace().marks]  # doctest: +NORMALIZE_WHITESPACE
    [('pinned_bytes', 1024), ('device_bytes', 512), ('device_bytes', 0),
     ('device_copy', {'batch': 0, 'seconds': 0.25})]
    >>> recorder.close()
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.pinned: int | None = None
        self.device: int | None = None

    def copied(self, number: int, seconds: float) -> None:
        """Batch ``number`` of the epoch was handed over, ``seconds`` after its staging began."""
        self.recorder.mark("device_copy", {"batch": number, "seconds": max(0.0, seconds)})

    def levels(self, pinned: int, device: int) -> None:
        """The pinned bytes held and the device's bytes ahead now: marked where they changed."""
        if pinned != self.pinned:
            self.pinned = pinned
            self.recorder.mark("pinned_bytes", pinned)
        if device != self.device:
            self.device = device
            self.recorder.mark("device_bytes", device)
