"""What a trial's trace says about throughput, once start-up is left out."""

from __future__ import annotations

import dataclasses

from ..analysis.waits import built_before_asked
from ..record.matching import match
from ..record.trace import Trace


def after_warmup(trace: Trace, warmup: int) -> Trace:
    """The trace without its first ``warmup`` consumed batches and the batches
    built for them (start-up: imports, model build, worker start). Batches are
    matched on the whole trace first, so batches finished out of order keep
    their partners.

    >>> from queuetune.record.trace import Consumed, Produced
    >>> t = Trace(produced=[Produced(i, i, 1) for i in range(8)], consumed=[Consumed(i, i) for i in range(8)])
    >>> len(after_warmup(t, 2).consumed), len(after_warmup(t, 2).produced)
    (6, 6)
    """
    if warmup <= 0 or len(trace.consumed) - warmup < 4:
        return trace
    matching = match(trace)
    dropped = {j for j in matching.consumed[:warmup] if j is not None}
    dropped |= {i for _, i in matching.hidden}
    return Trace(
        meta=dataclasses.replace(trace.meta, pre_run_consumes=None),
        start=trace.start,
        end=trace.end,
        produced=[p for i, p in enumerate(trace.produced) if i not in dropped],
        consumed=trace.consumed[warmup:],
        marks=trace.marks,
        memory=trace.memory,
    )


def startup_backlog(trace: Trace) -> int:
    """Batches already built when the consumer first asked (the report's
    ``start.built_before_asked``). A trial counts throughput only after the
    consumer has taken them: they cost the timed window nothing, so a deeper
    queue would look faster in a short run than it is.

    >>> from queuetune.record.trace import Consumed, Produced
    >>> startup_backlog(Trace(produced=[Produced(0, t, 1) for t in (0.5, 0.8, 1.5)],
    ...                       consumed=[Consumed(1.0, 1.0)]))
    2
    """
    return built_before_asked(trace.produced, trace.consumed)


def throughput(trace: Trace, warmup: int = 0) -> float:
    """Batches per second the consumer took, after the first ``warmup`` batches.

    >>> from queuetune.record.trace import Consumed
    >>> throughput(Trace(consumed=[Consumed(0, t) for t in (0.0, 1.0, 1.5, 2.0)]), warmup=1)
    2.0
    """
    times = [c.consumed for c in trace.consumed]
    if len(times) - warmup < 2:
        warmup = 0
    times = times[warmup:]
    if len(times) < 2 or times[-1] <= times[0]:
        return 0.0
    return (len(times) - 1) / (times[-1] - times[0])
