"""A recorder's lists read whole, as a :class:`~queuetune.record.trace.Trace`, or
lately, as the :class:`~queuetune.record.channel.Live` figures of the last seconds."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from .channel import Built, Live
from .trace import Consumed, Mark, MemorySample, Produced, Trace, TraceMeta


def as_trace(
    meta: TraceMeta,
    start: float,
    built: list[Built],
    consumed: list[Consumed],
    marks: list[Mark],
    memory: list[MemorySample],
) -> Trace:
    """The records since ``start`` as a trace of their copies, each list in time
    order; a batch built in another process is placed by its pid, one built
    here by its thread.

    >>> built = [Built(2.0, 3.0, 8, 1, None, os.getpid(), 7), Built(1.0, 2.0, 8, 0, None, 1, 0)]
    >>> trace = as_trace(TraceMeta(), 0.0, built, [], [], [])
    >>> [(p.start, p.worker) for p in trace.produced], trace.end
    ([(1.0, '1'), (2.0, 'thread-7')], 3.0)
    """
    parent = os.getpid()
    produced = [
        Produced(
            b.start,
            b.end,
            b.nbytes,
            b.batch_index,
            b.key,
            str(b.pid) if b.pid != parent else f"thread-{b.thread}",
            samples=None if b.samples is None else list(b.samples),
            busy=b.busy,
        )
        for b in list(built)
    ]
    produced.sort(key=lambda p: p.start)
    consumed = list(consumed)
    marks = sorted(marks, key=lambda m: m.t)
    memory = list(memory)
    times = [start] + [p.end for p in produced] + [c.consumed for c in consumed]
    times += [m.t for m in marks]
    return Trace(
        meta=dataclasses.replace(meta, settings=_copy(meta.settings), extra=dict(meta.extra)),
        start=start,
        end=max(times),
        produced=produced,
        consumed=consumed,
        marks=marks,
        memory=memory,
    )


def live_of(
    built: list[Built],
    consumed: list[Consumed],
    memory: list[MemorySample],
    start: float,
    window: float,
    now: float,
) -> Live:
    """:class:`Live` at ``now``, over the last ``window`` seconds since ``start``,
    read without a copy of the records (a batch built and not yet taken counts
    as in flight).

    >>> built = [Built(1.0, 1.0, 8, 0, None, 1, 0), Built(1.0, 1.0, 8, 1, None, 1, 0)]
    >>> live_of(built, [Consumed(0.5, 1.0)], [], start=0.0, window=2.0, now=2.0)
    Live(rate=0.5, waiting=0.25, in_flight=1, in_flight_bytes=8, rss=None, batches=1)
    """
    since = now - window
    ahead = max(0, len(built) - len(consumed))
    recent: list[Consumed] = []
    for c in reversed(consumed[-4096:]):
        if c.consumed < since:
            break
        recent.append(c)
    span = min(window, max(1e-9, now - start))
    waited = sum(c.consumed - max(c.requested, since) for c in recent)
    latest = memory[-1:] if memory else []
    return Live(
        rate=len(recent) / span,
        waiting=min(1.0, waited / span),
        in_flight=ahead,
        in_flight_bytes=sum(b.nbytes for b in built[len(built) - ahead :]) if ahead else 0,
        rss=latest[0].rss if latest else None,
        batches=len(consumed),
    )


def _copy(settings: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if settings is None else dict(settings)
