"""What a Prefetcher's device stage did (:class:`DeviceUse`): each batch's copy
time, the most pinned memory its staging buffers held, the most bytes of its
batches on the device ahead of the step; read from its marks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..record.trace import Trace


@dataclass
class DeviceUse:
    """The device stage's copies: ``copies`` batches handed over, the median and
    the largest of their times in seconds from the start of a batch's staging
    to its hand-over (a bound on its copy's time: its wait ahead of the step
    counts too); the most bytes of pinned staging buffers held
    (``peak_pinned_bytes``) and of batches on the device ahead of the step
    (``peak_device_bytes``)."""

    copies: int = 0
    staged_median_seconds: float | None = None
    staged_max_seconds: float | None = None
    peak_pinned_bytes: int = 0
    peak_device_bytes: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceUse:
        return cls(**data)


@dataclass(frozen=True)
class Device:
    """The report's section of the device stage (``device``): None where no stage ran."""

    device: DeviceUse | None


def device_of(trace: Trace) -> Device:
    """The device section of ``trace``, from its ``device_copy``, ``pinned_bytes``
    and ``device_bytes`` marks; None where it has none.

    >>> from queuetune.record.trace import Mark
    >>> marks = [Mark(0.0, "pinned_bytes", 4096), Mark(0.0, "device_bytes", 2048),
    ...          Mark(0.1, "device_copy", {"batch": 0, "seconds": 0.25}),
    ...          Mark(0.2, "device_copy", {"batch": 1, "seconds": 0.75})]
    >>> device_of(Trace(marks=marks)).device  # doctest: +NORMALIZE_WHITESPACE
    DeviceUse(copies=2, staged_median_seconds=0.5, staged_max_seconds=0.75,
              peak_pinned_bytes=4096, peak_device_bytes=2048)
    >>> device_of(Trace()).device is None
    True
    """
    kinds = ("device_copy", "pinned_bytes", "device_bytes")
    marks = [m for m in trace.marks if m.kind in kinds]
    if not marks:
        return Device(None)
    seconds = [float(m.value["seconds"]) for m in marks if m.kind == "device_copy"]
    return Device(
        DeviceUse(
            copies=len(seconds),
            staged_median_seconds=float(np.median(seconds)) if seconds else None,
            staged_max_seconds=max(seconds, default=None),
            peak_pinned_bytes=max((int(m.value) for m in marks if m.kind == "pinned_bytes"), default=0),
            peak_device_bytes=max((int(m.value) for m in marks if m.kind == "device_bytes"), default=0),
        )
    )
