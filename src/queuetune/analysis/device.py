"""What copies to a device took (:class:`DeviceUse`): a Prefetcher's device
stage (each batch's copy time, the most pinned memory its staging buffers held,
the most bytes of its batches on the device ahead of the step), a watched
loader's pinning (``pin_memory=True``), and the step's own copies of its
batches to the device; read from their marks."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..record.trace import Trace


@dataclass
class DeviceUse:
    """The device stage's copies (a Prefetcher's): ``copies`` batches handed over, the median and
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
    #: The device stage's parts of a batch's way: the median seconds of its staging into
    #: the pinned buffers (on the stage's thread), and of its copy to the device and the
    #: largest, as the device timed it (CUDA's events; None where nothing timed it).
    staging_median_seconds: float | None = None
    copy_median_seconds: float | None = None
    copy_max_seconds: float | None = None
    #: A watched loader's pinning: the batches it pinned, the median seconds of one.
    pins: int = 0
    pin_median_seconds: float | None = None
    #: The step's copies of its batch to a device: the steps that made any, the median
    #: seconds a step waited in them, their share of all the steps' time, and the
    #: share of the bytes they copied that were read from pageable memory.
    step_copies: int = 0
    step_copy_median_seconds: float | None = None
    step_copy_share: float | None = None
    pageable_share: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceUse:
        return cls(**data)


@dataclass(frozen=True)
class Device:
    """The report's section of the device stage (``device``): None where no stage ran."""

    device: DeviceUse | None


def device_of(trace: Trace) -> Device:
    """The device section of ``trace``, from its ``device_copy``, ``pinned_bytes``,
    ``device_bytes``, ``pin_copy`` and ``step_copy`` marks; None where it has none.

    >>> from queuetune.record.trace import Mark
    >>> marks = [Mark(0.0, "pinned_bytes", 4096), Mark(0.0, "device_bytes", 2048),
    ...          Mark(0.1, "device_copy", {"batch": 0, "seconds": 0.25, "staging": 0.5, "copy": 0.125}),
    ...          Mark(0.2, "device_copy", {"batch": 1, "seconds": 0.75})]  # as saved before its parts were
    >>> use = device_of(Trace(marks=marks)).device
    >>> use.copies, use.staged_median_seconds, use.staged_max_seconds, use.peak_pinned_bytes, use.peak_device_bytes
    (2, 0.5, 0.75, 4096, 2048)
    >>> use.staging_median_seconds, use.copy_median_seconds, use.copy_max_seconds
    (0.5, 0.125, 0.125)
    >>> from queuetune.record.trace import Consumed
    >>> steps = [Consumed(0.0, 0.0), Consumed(1.0, 1.0), Consumed(2.0, 2.0)]  # two steps of a second
    >>> copied = [Mark(0.5, "step_copy", {"batch": 0, "seconds": 0.5, "bytes": 8, "pageable": 8})]
    >>> use = device_of(Trace(consumed=steps, marks=copied)).device
    >>> use.step_copies, use.step_copy_share, use.pageable_share
    (1, 0.25, 1.0)
    >>> device_of(Trace()).device is None
    True
    """
    kinds = ("device_copy", "pinned_bytes", "device_bytes", "pin_copy", "step_copy")
    marks = [m for m in trace.marks if m.kind in kinds]
    if not marks:
        return Device(None)
    copies = [m.value for m in marks if m.kind == "device_copy"]
    seconds = [float(v["seconds"]) for v in copies]
    timed = [float(v["copy"]) for v in copies if v.get("copy") is not None]
    pins = [float(m.value["seconds"]) for m in marks if m.kind == "pin_copy"]
    return Device(
        DeviceUse(
            copies=len(seconds),
            staged_median_seconds=_median(seconds),
            staged_max_seconds=max(seconds, default=None),
            peak_pinned_bytes=max((int(m.value) for m in marks if m.kind == "pinned_bytes"), default=0),
            peak_device_bytes=max((int(m.value) for m in marks if m.kind == "device_bytes"), default=0),
            staging_median_seconds=_median([float(v["staging"]) for v in copies if "staging" in v]),
            copy_median_seconds=_median(timed),
            copy_max_seconds=max(timed, default=None),
            pins=len(pins),
            pin_median_seconds=_median(pins),
            **_step_copies([m.value for m in marks if m.kind == "step_copy"], trace),
        )
    )


def _step_copies(values: list[dict[str, Any]], trace: Trace) -> dict[str, Any]:
    """The step's copies of ``values`` (``step_copy`` marks): how many steps made
    any, the median seconds of a step's, their share of the steps' time (each
    step from its batch's hand-over to the next request of its run)."""
    if not values:
        return {}
    waited = [float(v["seconds"]) for v in values]
    copied = sum(int(v["bytes"]) for v in values)
    runs = trace.consumed
    steps = sum(max(0.0, after.requested - c.consumed) for c, after in itertools.pairwise(runs) if after.run == c.run)
    return {
        "step_copies": len(values),
        "step_copy_median_seconds": _median(waited),
        "step_copy_share": min(1.0, sum(waited) / steps) if steps > 0 else None,
        "pageable_share": sum(int(v["pageable"]) for v in values) / copied if copied else None,
    }


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None
