"""Pure functions from a Trace to a Report: read-ahead, in flight, waits, memory, coverage.

:func:`analyze` runs one small pure pass per section of the report, each its own
typed record: :class:`~.counts.Counts`, :class:`~.in_flight.InFlight`,
:class:`~.timing.Timings`, :class:`~.waits.Waits`, :class:`~.memory.Memory`,
:class:`~.coverage.Coverages`, :class:`Remarks` and :class:`~.device.Device`. A :class:`Report` holds
their fields side by side (the form its constructor and its JSON keep), and
:func:`section_of` takes one section back, for the consumer that needs it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, TypeVar

from ..common.jsonio import dumps
from ..record.matching import match, releases_of, runs_of
from ..record.trace import Trace, TraceMeta
from .counts import Counts, counts_of
from .coverage import Coverage, Coverages, Repeat, coverage_of
from .device import Device, DeviceUse, device_of
from .in_flight import InFlight, NodeHeld, flows_of, in_flight_of, in_flight_steps
from .memory import Memory, MemoryUse, memory_of
from .timing import Timing, Timings, timings_of
from .waits import HIGH, MODERATE, Start, Verdict, Waits, verdict, waits_of

__all__ = [
    "HIGH",
    "MODERATE",
    "SECTIONS",
    "Coverage",
    "Remarks",
    "Report",
    "Timing",
    "Verdict",
    "analyze",
    "assemble",
    "remarks_of",
    "section_of",
    "verdict",
]


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

    Its fields are its sections' (:data:`SECTIONS`), side by side after ``meta``;
    :func:`section_of` takes one back:

    >>> from queuetune.analysis.waits import Waits
    >>> section_of(Waits, r).steady_seconds
    1.0
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
    #: What a Prefetcher's device stage did: each batch's copy time, the peaks of its
    #: pinned staging buffers and of its batches on the device ahead of the step
    #: (see :mod:`queuetune.analysis.device`); None where no stage ran.
    device: DeviceUse | None = None

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
        fields["device"] = DeviceUse.from_dict(data["device"]) if data.get("device") else None
        fields["series"] = data.get("series", {})
        return cls(**fields)


@dataclass(frozen=True)
class Remarks:
    """The report's section of what was said: the errors the run recorded, and notes."""

    errors: list[str]
    notes: list[str]


def remarks_of(trace: Trace, asked: bool) -> Remarks:
    """The errors ``trace`` recorded, and a note where no consumption was (``asked`` false).

    >>> remarks_of(Trace(), True)
    Remarks(errors=[], notes=[])
    """
    notes = []
    if not asked:
        notes.append(
            "no consumption recorded: iterate the watched loader, or pass the probe's "
            "keras_callback() to fit/predict/evaluate"
        )
    return Remarks([str(m.value) for m in trace.marks if m.kind == "error"], notes)


#: The sections a :class:`Report` is made of; their fields and ``meta`` are its fields.
SECTIONS = (Counts, InFlight, Timings, Waits, Memory, Coverages, Remarks, Device)
Section = TypeVar("Section", Counts, InFlight, Timings, Waits, Memory, Coverages, Remarks, Device)


def section_of(kind: type[Section], report: Report) -> Section:
    """The section ``kind`` of ``report``: the consumer that needs the waits takes the waits.

    >>> from queuetune.analysis.waits import Waits
    >>> section_of(Waits, analyze(Trace())).verdict
    'unknown'
    """
    return kind(**{f.name: getattr(report, f.name) for f in fields(kind)})


def assemble(
    meta: TraceMeta, *sections: Counts | InFlight | Timings | Waits | Memory | Coverages | Remarks | Device
) -> Report:
    """The report of a loader described by ``meta`` whose sections are ``sections`` (each of :data:`SECTIONS`)."""
    return Report(meta=replace(meta), **{f.name: getattr(s, f.name) for s in sections for f in fields(s)})


def analyze(trace: Trace) -> Report:
    """Turn a :class:`Trace` into a :class:`Report` (pure; no clock, no I/O): a pass a section."""
    runs = runs_of(trace)
    releases = releases_of(trace.consumed, runs, trace.end)
    matching = match(trace, runs)
    asked = bool(trace.consumed) or any(m.kind == "run_begin" for m in trace.marks)
    flows = flows_of(trace, runs, releases, matching)
    steps = in_flight_steps(trace.produced, flows.flows)
    times, _, held = steps
    return assemble(
        trace.meta,
        counts_of(trace, flows, len(matching.hidden), asked),
        in_flight_of(trace, flows, steps),
        timings_of(trace.produced, trace.consumed, releases),
        waits_of(trace, runs, matching.consumed, asked),
        memory_of(trace, times, held),
        coverage_of(trace, matching.consumed),
        remarks_of(trace, asked),
        device_of(trace),
    )
