"""How long builds and steps took, and how large batches were: each a :class:`Timing`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..record.trace import Consumed, Produced


@dataclass
class Timing:
    """Median, 95th percentile and mean of a set of durations, in seconds."""

    n: int = 0
    median: float | None = None
    p95: float | None = None
    mean: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> Timing:
        if not values:
            return cls()
        arr = np.asarray(values, dtype=float)
        return cls(len(arr), float(np.median(arr)), float(np.percentile(arr, 95)), float(arr.mean()))


@dataclass(frozen=True)
class Timings:
    """The report's section of timings: each build's time (``producer_time``), each
    step's (``consumer_step``: from a batch's hand-over to its release) and each
    batch's bytes (``batch_bytes``)."""

    producer_time: Timing
    consumer_step: Timing
    batch_bytes: Timing


def timings_of(produced: list[Produced], consumed: list[Consumed], releases: list[float | None]) -> Timings:
    """The timings of the builds, the steps and the batches' sizes.

    >>> t = timings_of([Produced(0.0, 1.0, 10)], [Consumed(0.0, 1.0)], [3.0])
    >>> t.producer_time.median, t.consumer_step.median, t.batch_bytes.median
    (1.0, 2.0, 10.0)
    """
    return Timings(
        producer_time=Timing.of([p.end - p.start for p in produced]),
        consumer_step=Timing.of([r - c.consumed for c, r in zip(consumed, releases) if r is not None]),
        batch_bytes=Timing.of([float(p.nbytes) for p in produced]),
    )
