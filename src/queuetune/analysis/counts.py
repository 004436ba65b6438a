"""The report's counts: batches built, handed over, taken outside the steps, and read ahead."""

from __future__ import annotations

from dataclasses import dataclass

from ..record.trace import Trace
from .in_flight import Flows


@dataclass(frozen=True)
class Counts:
    """The report's section of counts: the batches built (``produced_batches``),
    handed over (``consumed_batches``), taken by the framework outside the
    training steps (``consumed_outside_steps``), and built and never handed over
    (``read_ahead_batches``, ``read_ahead_bytes``); those of the consumer None
    where no consumption was recorded."""

    produced_batches: int
    consumed_batches: int | None
    consumed_outside_steps: int
    read_ahead_batches: int | None
    read_ahead_bytes: int | None


def counts_of(trace: Trace, flows: Flows, outside_steps: int, asked: bool) -> Counts:
    """The counts of ``trace``, whose batches left flight as ``flows`` say;
    ``outside_steps``: the batches taken outside the steps; ``asked``: whether
    any consumption was recorded.

    >>> from queuetune.record.trace import Produced
    >>> t = Trace(produced=[Produced(0.0, 1.0, 10)])
    >>> counts_of(t, Flows([], [None], t.produced, 1), 0, True)
    Counts(produced_batches=1, consumed_batches=0, consumed_outside_steps=0, read_ahead_batches=1, read_ahead_bytes=10)
    """
    return Counts(
        produced_batches=len(trace.produced),
        consumed_batches=len(trace.consumed) if asked else None,
        consumed_outside_steps=outside_steps,
        read_ahead_batches=max(0, flows.read_ahead) if asked else None,
        read_ahead_bytes=sum(p.nbytes for p in flows.unmatched) if asked else None,
    )
