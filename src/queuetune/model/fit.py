"""Fitting a :class:`PipelineModel` to a recorded trace, and the loader's overheads read from it."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..record.matching import match
from ..record.trace import Trace
from .distribution import Distribution
from .pipeline import PipelineModel
from .rules import LoaderRules

__all__ = ["dispatch_time", "fit", "fit_unbuffered", "handover_time", "kept_by_consumer", "transit_time"]

MIN_PRODUCED = 5
MIN_STEPS = 3


def fit(trace: Trace, rules: LoaderRules, ordered: bool = True) -> PipelineModel:
    """The model of a recorded run.

    Producer times are ``end - start`` of the produced batches; consumer
    steps are the times from one batch's ``consumed`` to the next batch's
    ``requested`` in the same run, plus :func:`handover_time`; ``workers`` is
    the ``rules``' workers (what the loader's settings give) when known, else the
    number of distinct ``worker`` values, at least 1; ``batch_bytes`` is the
    median ``nbytes`` of the produced batches; the assignment and release rules
    are the loader's ``rules`` (for a recorded trace,
    :func:`queuetune.frameworks.rules_of` its meta), the transit :func:`transit_time`,
    the hand-over :func:`handover_time`, the dispatch :func:`dispatch_time`.

    >>> from queuetune.record.trace import Consumed, Produced
    >>> t = Trace(produced=[Produced(i, i + 0.5, 100, worker="w") for i in range(6)],
    ...           consumed=[Consumed(i + 0.5, i + 0.5) for i in range(6)])
    >>> m = fit(t, LoaderRules())
    >>> m.producer.mean, m.consumer.mean, m.workers, m.batch_bytes, m.transit
    (0.5, 1.0, 1, 100.0, 0.0)
    """
    produced = trace.produced
    if len(produced) < MIN_PRODUCED:
        raise ValueError(f"the trace has {len(produced)} produced batches; the model needs at least {MIN_PRODUCED}")
    ready, delivered = _handover_waits(trace)
    overhead = _mean_or_zero(ready)
    # Clamped at 0: a request recorded a hair before the previous hand-over
    # (clock resolution) is a step of no time, not a negative one.
    steps = [
        max(0.0, nxt.requested - cur.consumed) + overhead
        for cur, nxt in zip(trace.consumed, trace.consumed[1:])
        if nxt.run == cur.run
    ]
    if len(steps) < MIN_STEPS:
        raise ValueError(
            f"the trace has {len(steps)} consumer steps (consecutive batches of one run); "
            f"the model needs at least {MIN_STEPS}"
        )
    try:
        producer = Distribution(max(0.0, p.end - p.start) for p in produced)
        consumer = Distribution(steps)
    except ValueError as exc:
        raise ValueError(f"the trace's times cannot make a model: {exc}") from None
    return PipelineModel(
        producer=producer,
        consumer=consumer,
        workers=_workers(trace, rules),
        batch_bytes=float(np.median([p.nbytes for p in produced])),
        ordered=ordered,
        assignment=rules.assignment,
        release=rules.release,
        transit=_transit(overhead, delivered, rules.processes),
        handover=overhead,
        dispatch=dispatch_time(trace, rules),
    )


def fit_unbuffered(unbuffered: Trace, buffered: Trace, rules: LoaderRules) -> PipelineModel:
    """The model of a loader that reads ahead where the probe cannot see its
    builds (tf.data's ``prefetch`` runs inside TensorFlow), from two runs of it:
    ``unbuffered``, read without read-ahead, where each request builds its batch
    (so the requests' durations are the build times), and ``buffered``, read
    ahead, which shows what of each request stays with the consumer
    (:func:`kept_by_consumer`). That part moves from the build to the step; the
    place it held frees as the request takes the batch, before that part (the
    buffer's head is popped first), so the model's ``handover`` stays 0.

    >>> from queuetune.record.trace import Consumed, Produced
    >>> bare = Trace(produced=[Produced(2 * i, 2 * i + 1.2, 1) for i in range(8)],
    ...              consumed=[Consumed(2 * i, 2 * i + 1.2) for i in range(8)])
    >>> ahead = Trace(consumed=[Consumed(i, i + 0.2) for i in range(8)])
    >>> m = fit_unbuffered(bare, ahead, LoaderRules())
    >>> round(m.producer.mean, 6), round(m.consumer.mean, 6), m.handover
    (1.0, 1.0, 0.0)
    """
    model = fit(unbuffered, rules)
    kept = kept_by_consumer(unbuffered, buffered)
    builds = model.producer.values
    assert builds is not None  # fitted to a trace: the measured times
    steps = model.consumer.values
    assert steps is not None
    return dataclasses.replace(
        model,
        producer=Distribution(np.maximum(builds - kept, 0.0)),
        consumer=Distribution(steps + kept),
    )


def kept_by_consumer(unbuffered: Trace, buffered: Trace) -> float:
    """Seconds of each request that a loader keeps in the consumer's thread when
    it reads ahead (its iterator, the conversion of the batch).

    Two pipelines fit the same pair of runs: one whose builds bound the
    read-ahead, cycling at the build time, so that the bare request is that
    plus the part kept (the unbuffered mean request less the buffered mean
    cycle), and one whose steps bound it, its requests the part kept alone (the
    buffered requests' lower quartile, which leaves out the odd wait). Both
    predict the same at the depth measured; the smaller is taken, as the more
    likely (a hand-over costs less than a build).

    >>> from queuetune.record.trace import Consumed
    >>> bare = Trace(consumed=[Consumed(3 * i, 3 * i + 2.0) for i in range(6)])
    >>> waited = Trace(consumed=[Consumed(1.8 * i, 1.8 * i + 1.0) for i in range(6)])
    >>> round(kept_by_consumer(bare, waited), 6)  # 2.0 a request bare, a batch every 1.8 read ahead
    0.2
    """
    durations = [c.consumed - c.requested for c in buffered.consumed]
    cycles = [b.consumed - a.consumed for a, b in zip(buffered.consumed, buffered.consumed[1:]) if b.run == a.run]
    bare = [c.consumed - c.requested for c in unbuffered.consumed]
    if len(durations) < MIN_STEPS or not cycles or not bare:
        return 0.0
    request = float(np.mean(bare))
    kept = float(np.percentile(durations, 25))
    bound_by_builds = request - float(np.mean(cycles))
    if bound_by_builds >= 0:
        kept = min(kept, bound_by_builds)
    return max(0.0, min(kept, request))


def _handover_waits(trace: Trace) -> tuple[list[float], list[float]]:
    """For the consumed batches matched to a produced one: the waits of those
    already built when the consumer asked (``consumed - requested``), and for the
    others the time from their end in the worker to their hand-over."""
    produced = trace.produced
    ready: list[float] = []
    delivered: list[float] = []
    for c, j in zip(trace.consumed, match(trace).consumed):
        if j is None:
            continue
        if produced[j].end <= c.requested:
            ready.append(c.consumed - c.requested)
        else:
            delivered.append(c.consumed - produced[j].end)
    return ready, delivered


def _mean_or_zero(values: list[float]) -> float:
    return max(0.0, float(np.mean(values))) if len(values) >= 3 else 0.0


def _transit(handover: float, delivered: list[float], processes: bool) -> float:
    if len(delivered) >= 3:
        return max(0.0, float(np.mean(delivered)) - handover)
    # No batch was waited for, so the trip cannot be seen: a batch from a worker
    # process is taken to cost the sender what it costs the receiver (pickling,
    # unpickling). Measured with torch 2.13 (64 KiB batches, 2 workers): hand-over
    # 0.9-1.1 ms, waited batches' end-to-hand-over 1.6-2.0 ms.
    return handover if processes else 0.0


def handover_time(trace: Trace) -> float:
    """The consumer's time to take a batch that is already built (the framework's
    conversion, its callbacks, the probe): the mean wait of the batches that
    were finished before the consumer asked for them (the mean, since the
    consumer pays every one of them), 0 when there are fewer
    than 3 such batches. It stays whatever the depth, so it belongs to the step.

    >>> from queuetune.record.trace import Consumed, Produced
    >>> t = Trace(produced=[Produced(0, 0.1, 1) for _ in range(4)],
    ...           consumed=[Consumed(r, r + 0.01) for r in (1.0, 2.0, 3.0, 4.0)])
    >>> round(handover_time(t), 6)
    0.01
    """
    return _mean_or_zero(_handover_waits(trace)[0])


def transit_time(trace: Trace, rules: LoaderRules) -> float:
    """Seconds from a batch's end in its worker until a waiting consumer can take
    it, beyond :func:`handover_time`: the mean over the batches the consumer
    waited for (at least 3), else, when batches come from worker processes, the
    hand-over time again (sending costs about what receiving does), else 0.

    >>> from queuetune.record.trace import Consumed, Produced
    >>> t = Trace(produced=[Produced(r - 0.5, r + 0.1, 1) for r in (1.0, 2.0, 3.0)],
    ...           consumed=[Consumed(r, r + 0.13) for r in (1.0, 2.0, 3.0)])
    >>> round(transit_time(t, LoaderRules()), 6)
    0.03
    """
    ready, delivered = _handover_waits(trace)
    return _transit(_mean_or_zero(ready), delivered, rules.processes)


def dispatch_time(trace: Trace, rules: LoaderRules) -> float:
    """Seconds from the moment a batch could start until its build started: the
    median, over the produced batches after the first of each worker, of the
    time from the latest event that can start a batch (a build's end, or the
    consumer freeing a place: its request or its hand-over, by the loader's
    rules; its request for a loader of depth 0, which builds when asked) to the
    batch's start; 0 with fewer than 3
    such batches. The latest such event is at or after the one that really
    started the batch, so this errs low, never high.

    >>> from queuetune.record.trace import Consumed, Produced
    >>> t = Trace(produced=[Produced(i + 0.001, i + 0.5, 1, worker="w") for i in range(6)],
    ...           consumed=[Consumed(i + 0.6, i + 1.0) for i in range(6)])
    >>> round(dispatch_time(t, LoaderRules()), 6)
    0.001
    """
    produced = sorted(trace.produced, key=lambda p: p.start)
    # A loader of depth 0 (a plain generator run in the consumer's thread) starts
    # each batch when it is asked for: that request, not the last hand-over, is
    # what started it, or the consumer's whole step would read as dispatch.
    at_request = rules.release == "request" or trace.meta.depth == 0
    frees = [c.requested if at_request else c.consumed for c in trace.consumed]
    triggers = np.sort(np.array([p.end for p in produced] + frees, dtype=float))
    skip = _workers(trace, rules)
    gaps = []
    for p in produced[skip:]:
        i = int(np.searchsorted(triggers, p.start, side="right"))
        if i:
            gaps.append(p.start - triggers[i - 1])
    return float(np.median(gaps)) if len(gaps) >= 3 else 0.0


def _workers(trace: Trace, rules: LoaderRules) -> int:
    if rules.workers is not None:
        return max(1, rules.workers)
    return max(1, len({p.worker for p in trace.produced}))
