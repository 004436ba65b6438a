"""Pure functions from a Trace to a Report: read-ahead, in flight, waits, memory, coverage."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from ..common.jsonio import dumps
from ..record.matching import match, releases_of, run_floors, runs_of
from ..record.trace import Trace, TraceMeta
from .coverage import Coverage, Repeat, coverage
from .in_flight import (
    NodeHeld,
    downsample,
    dropped_with_run,
    freed_at,
    held_by_node,
    in_flight_steps,
    peak_overlap,
    row_releases,
    time_mean,
)
from .memory import MemoryUse, memory_use
from .waits import Start, busy_share, split_wait, start_and_steady, starting_batches

MODERATE, HIGH = 0.05, 0.20
#: The TensorFlow Profiler's words for an input-wait fraction (see :func:`verdict`).
Verdict = Literal["unknown", "not input-bound", "moderately input-bound", "highly input-bound"]


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


@dataclass
class Report:
    """What a traced run did (all bytes in bytes, times in seconds); the words are
    those of docs/index.md's "Words used": produced, consumed, read-ahead, in flight, input wait.

    >>> from queuetune.record.trace import Trace, Produced, Consumed, Mark
    >>> t = Trace(produced=[Produced(0.0, 1.0, 10)], consumed=[Consumed(0.0, 1.0)],
    ...           marks=[Mark(0.0, "run_begin", 0), Mark(2.0, "run_end", 0)])
    >>> r = analyze(t)
    >>> r.produced_batches, r.consumed_batches, r.start.first_batch_seconds
    (1, 1, 1.0)
    >>> r.input_wait_seconds, r.wall_seconds, r.steady_seconds, r.input_bound_fraction
    (1.0, 2.0, 1.0, 0.0)

    ``input_wait_seconds`` and ``wall_seconds`` cover whole runs; the
    input-bound fraction and the verdict describe the steady state (after each
    run's starting batches, see :func:`starting_batches`: ``steady_wait_seconds``
    of ``steady_seconds``), the start is reported apart (``start``). The
    fraction counts only the waits for batches not yet built
    (``steady_starved_seconds``); the waits to take batches already built are
    the hand-over (``steady_handover_seconds``, ``handover`` per batch), which no
    worker count or depth removes (see :func:`split_wait`).
    """

    meta: TraceMeta
    produced_batches: int
    consumed_batches: int | None
    consumed_outside_steps: int
    read_ahead_batches: int | None
    read_ahead_bytes: int | None
    peak_in_flight_batches: int
    peak_in_flight_bytes: int
    mean_in_flight_batches: float
    peak_building_batches: int
    #: The most shared memory a Prefetcher in process mode kept for its batches (its
    #: segments: in flight, held by the step, and spare), from its ``pool`` marks; None without.
    peak_pool_bytes: int | None
    producer_time: Timing
    consumer_step: Timing
    input_wait_seconds: float | None
    wall_seconds: float | None
    start: Start | None
    steady_wait_seconds: float | None
    steady_seconds: float | None
    input_bound_fraction: float | None
    verdict: Verdict
    batch_bytes: Timing
    peak_rss_bytes: int | None
    peak_children_bytes: int | None
    peak_total_bytes: int | None
    coverage: list[Coverage]
    errors: list[str]
    series: dict[str, list[float]]
    notes: list[str]
    nodes: dict[str, NodeHeld] = field(default_factory=dict)
    #: Seconds from the trace's start to the series' first point (its ``t`` = 0).
    series_start: float | None = None
    #: Of ``steady_wait_seconds``: the waits for batches not yet built (starvation,
    #: what ``input_bound_fraction`` and the verdict are about) and the waits to take
    #: batches already built (the hand-over: a pipe, unpickling, a copy; more workers
    #: or a deeper queue cannot remove it). See :func:`split_wait`.
    steady_starved_seconds: float | None = None
    steady_handover_seconds: float | None = None
    #: The hand-over per batch in the steady state (batches already built when asked).
    handover: Timing = field(default_factory=Timing)
    #: Whether builds were seen apart from the requests (in workers or threads); where
    #: not (a plain iterable, tf.data), every wait counts as waiting for a build.
    handover_seen: bool = False
    #: The share of the builds' time their threads were busy: on a CPU or waiting for
    #: one (see :func:`busy_share`). Well under 1, the builds wait (on I/O, mostly),
    #: and more workers than cores can help. None where it was not measured.
    build_busy_share: float | None = None
    #: The tree's real memory by cause, and the workers that copy what they read
    #: (see :mod:`queuetune.analysis.memory`); None where the tree was not read.
    memory: MemoryUse | None = None
    #: Some epoch's coverage is partial: batches left without sample keys (their
    #: fingerprints stopped for their cost, or over the keys a run keeps), which
    #: its counts leave out (see :attr:`Coverage.unkeyed`). Derived from
    #: ``coverage`` where not given (a report saved before it existed).
    coverage_partial: bool = False

    def __post_init__(self) -> None:
        self.coverage_partial = self.coverage_partial or any(c.partial for c in self.coverage)

    def to_dict(self, series: bool = True) -> dict[str, Any]:
        """Plain data for JSON; ``series=False`` leaves out the time series."""
        data = asdict(self)
        data["meta"] = self.meta.to_dict()
        if not series:
            data.pop("series")
        return data

    def to_json(self, indent: int | None = 2, series: bool = True) -> str:
        return dumps(self.to_dict(series=series), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """The report :meth:`to_dict` made (its time series empty where it was left out).

        >>> from queuetune.record.trace import Trace, Produced
        >>> r = analyze(Trace(produced=[Produced(0.0, 1.0, 10)]))
        >>> Report.from_dict(r.to_dict(series=False)) == replace(r, series={})
        True
        """
        fields = dict(data)
        fields["meta"] = TraceMeta.from_dict(data["meta"])
        fields["producer_time"] = Timing(**data["producer_time"])
        fields["consumer_step"] = Timing(**data["consumer_step"])
        fields["batch_bytes"] = Timing(**data["batch_bytes"])
        fields["start"] = None if data["start"] is None else Start(**data["start"])
        fields["coverage"] = [
            Coverage(**{**c, "repeats": [Repeat(**r) for r in c["repeats"]]}) for c in data["coverage"]
        ]
        fields["nodes"] = {name: NodeHeld(**held) for name, held in data.get("nodes", {}).items()}
        fields["handover"] = Timing(**data.get("handover", {}))
        fields["memory"] = MemoryUse.from_dict(data["memory"]) if data.get("memory") else None
        fields["series"] = data.get("series", {})
        return cls(**fields)


def verdict(fraction: float | None) -> Verdict:
    """The TensorFlow Profiler's words for an input-wait fraction.

    >>> verdict(0.01), verdict(0.05), verdict(0.2)
    ('not input-bound', 'moderately input-bound', 'highly input-bound')
    """
    if fraction is None:
        return "unknown"
    if fraction >= HIGH:
        return "highly input-bound"
    if fraction >= MODERATE:
        return "moderately input-bound"
    return "not input-bound"


def analyze(trace: Trace) -> Report:
    """Turn a :class:`Trace` into a :class:`Report` (pure; no clock, no I/O)."""
    produced, consumed = trace.produced, trace.consumed
    runs = runs_of(trace)
    releases = releases_of(consumed, runs, trace.end)
    matching = match(trace, runs)
    matches = matching.consumed
    notes: list[str] = []
    has_consumer = bool(consumed) or any(m.kind == "run_begin" for m in trace.marks)
    if not has_consumer:
        notes.append(
            "no consumption recorded: iterate the watched loader, or pass the probe's "
            "keras_callback() to fit/predict/evaluate"
        )

    if trace.meta.match == "rows":
        freed = row_releases(trace, releases)
        flows = [(r, 1, p.nbytes) for p, r in zip(produced, freed) if r is not None]
        released = {i for i, r in enumerate(freed) if r is not None}
        read_ahead = len(produced) - len(released)
    else:
        consumed_bytes = [produced[j].nbytes if j is not None else (c.nbytes or 0) for c, j in zip(consumed, matches)]
        flows = [(r, 1, size) for r, size in zip(releases, consumed_bytes) if r is not None]
        flows += [(runs[r].begin, 1, produced[i].nbytes) for r, i in matching.hidden]
        released = {j for j in matches if j is not None} | {i for _, i in matching.hidden}
        read_ahead = len(produced) - len(consumed) - len(matching.hidden)
        freed = freed_at(produced, matches, releases, matching.hidden, runs)
    unmatched = [p for i, p in enumerate(produced) if i not in released]
    if trace.meta.match_scope == "run":
        floors = run_floors(runs, bool(trace.meta.pre_run_consumes))
        flows += [(t, 1, size) for t, size in dropped_with_run(unmatched, runs, floors)]
    times, batches, held = in_flight_steps(produced, flows)
    # The step functions start at 0 before their first change; a consumed batch whose
    # production was not recorded (a trace cut short by a fault) must not take them below it.
    peak_batches = int(max([0, *batches]))
    peak_bytes = int(max([0, *held]))
    mean_batches = time_mean(times, batches, trace.start, trace.end)

    waits = [c.consumed - c.requested for c in consumed]
    wall = sum(end - begin for begin, end in runs.values()) if runs else None
    wait_total = float(sum(waits)) if has_consumer else None
    starting = starting_batches(produced, consumed, matches)
    start, steady_wait, steady = (
        start_and_steady(produced, consumed, runs, starting) if has_consumer else (None, None, None)
    )
    split = split_wait(produced, consumed, matches, starting)
    starved = handed = None
    if steady_wait is not None:
        starved, handed = split.starved, split.handover
    fraction = (starved / steady) if (steady and starved is not None) else None
    if fraction is not None:
        fraction = min(max(fraction, 0.0), 1.0)

    errors = [str(m.value) for m in trace.marks if m.kind == "error"]
    peak_rss = max((m.rss for m in trace.memory), default=None)
    peak_children = max((m.children for m in trace.memory), default=None)
    peak_total = max((m.rss + m.children for m in trace.memory), default=None)
    return Report(
        meta=replace(trace.meta),
        produced_batches=len(produced),
        consumed_batches=len(consumed) if has_consumer else None,
        consumed_outside_steps=len(matching.hidden),
        read_ahead_batches=max(0, read_ahead) if has_consumer else None,
        read_ahead_bytes=sum(p.nbytes for p in unmatched) if has_consumer else None,
        peak_in_flight_batches=peak_batches,
        peak_in_flight_bytes=peak_bytes,
        mean_in_flight_batches=mean_batches,
        peak_building_batches=peak_overlap([(p.start, p.end) for p in produced]),
        peak_pool_bytes=max((int(m.value) for m in trace.marks if m.kind == "pool"), default=None),
        producer_time=Timing.of([p.end - p.start for p in produced]),
        consumer_step=Timing.of([r - c.consumed for c, r in zip(consumed, releases) if r is not None]),
        input_wait_seconds=wait_total,
        wall_seconds=wall,
        start=start,
        steady_wait_seconds=steady_wait,
        steady_seconds=steady,
        input_bound_fraction=fraction,
        verdict=verdict(fraction),
        batch_bytes=Timing.of([float(p.nbytes) for p in produced]),
        peak_rss_bytes=peak_rss,
        peak_children_bytes=peak_children,
        peak_total_bytes=peak_total,
        coverage=coverage(trace, matches),
        errors=errors,
        series=downsample(times, batches, held),
        notes=notes,
        nodes=held_by_node(produced, freed),
        series_start=times[0] - trace.start if times else None,
        steady_starved_seconds=starved,
        steady_handover_seconds=handed,
        handover=Timing.of(split.per_batch),
        handover_seen=split.seen,
        build_busy_share=busy_share(produced),
        memory=memory_use(trace, times, held),
    )
