"""Pure functions from a Trace to a Report: read-ahead, in flight, waits, memory, coverage."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from ..common.jsonio import dumps
from ..frameworks import FRAMEWORKS, PYTHON, Framework
from ..record.matching import Span, match, releases_of, run_floors, runs_of
from ..record.trace import Consumed, Produced, Trace, TraceMeta
from .memory import MemoryUse, memory_use

MODERATE, HIGH = 0.05, 0.20
#: The TensorFlow Profiler's words for an input-wait fraction (see :func:`verdict`).
Verdict = Literal["unknown", "not input-bound", "moderately input-bound", "highly input-bound"]
#: What identifies the items of a :class:`Coverage`.
ItemUnit = Literal["batch", "sample", "sample key"]
SERIES_POINTS = 500


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
class Coverage:
    """Which items one epoch consumed more than once or never.

    ``unit``: ``batch`` (batch indices), ``sample`` (sample indices) or
    ``sample key`` (a key of each sample's content, or the user's key, where
    batches carry no index). ``extra``: how many consumptions repeated an item
    (an item taken 3 times adds 2); ``repeats``: the first duplicated items,
    each with its count and the workers that built it; ``cause``: the likely
    cause in words, where the pattern tells; ``unkeyed``: consumed batches whose
    samples were not keyed (over the keys a run keeps, or fingerprints stopped
    in a worker for their cost), which the counts leave out: the epoch's
    coverage is partial (see :attr:`partial`).

    ``batches``: the batches the epoch consumed. ``cut_short``: the epoch ended
    before its loader was exhausted (the script broke out of its loop, closed
    the iterator, or an error ended it); its items not consumed are then
    ``not_reached`` (where the total is known), and ``never`` stays for the items
    an epoch that ran to its end never consumed. ``resumed_after``: the epoch
    resumed one another process began, after that many batches handed over
    there; its items not consumed here are ``not_reached`` too.
    """

    run: int
    epoch: int
    unit: ItemUnit
    consumed: int
    total: int | None
    duplicates: list[int] = field(default_factory=list)
    never_count: int | None = None
    never: list[int] = field(default_factory=list)
    extra: int = 0
    repeats: list[Repeat] = field(default_factory=list)
    cause: str | None = None
    unkeyed: int = 0
    batches: int = 0
    cut_short: bool = False
    not_reached: int | None = None
    resumed_after: int | None = None

    @property
    def partial(self) -> bool:
        """Some of the epoch's batches were not keyed: its counts cover the others only.

        >>> Coverage(0, 0, "sample key", 24, None, unkeyed=2).partial
        True
        """
        return self.unkeyed > 0


@dataclass
class Repeat:
    """An item consumed more than once in an epoch: how often, and by which workers built."""

    item: int
    count: int
    workers: list[str]


@dataclass
class Start:
    """How the runs began, kept apart from their steady state: ``first_batch_seconds``
    from the first run's beginning to its first batch (workers starting, the
    first builds), ``seconds`` from each run's beginning to the hand-over of its
    workers' first batches (:func:`starting_batches`), summed over every run
    (each epoch of a loader without persistent workers starts them anew), ``built_before_asked``
    the batches built before the consumer first asked for one, and ``runs``
    the runs that got a batch.

    >>> Start(runs=1, first_batch_seconds=2.5, seconds=2.5, built_before_asked=12).seconds
    2.5
    """

    runs: int
    first_batch_seconds: float
    seconds: float
    built_before_asked: int


@dataclass
class NodeHeld:
    """Batches built on one node (a worker named ``"node:pid"``) and what it held
    of them: built and not yet released by the consumer, at the peak and at the end."""

    produced_batches: int
    produced_bytes: int
    peak_held_batches: int
    peak_held_bytes: int
    read_ahead_batches: int
    read_ahead_bytes: int


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
        freed = _freed_at(produced, matches, releases, matching.hidden, runs)
    unmatched = [p for i, p in enumerate(produced) if i not in released]
    if trace.meta.match_scope == "run":
        floors = run_floors(runs, bool(trace.meta.pre_run_consumes))
        flows += [(t, 1, size) for t, size in _dropped_with_run(unmatched, runs, floors)]
    times, batches, held = _in_flight(produced, flows)
    # The step functions start at 0 before their first change; a consumed batch whose
    # production was not recorded (a trace cut short by a fault) must not take them below it.
    peak_batches = int(max([0, *batches]))
    peak_bytes = int(max([0, *held]))
    mean_batches = _time_mean(times, batches, trace.start, trace.end)

    waits = [c.consumed - c.requested for c in consumed]
    wall = sum(end - begin for begin, end in runs.values()) if runs else None
    wait_total = float(sum(waits)) if has_consumer else None
    starting = starting_batches(produced, consumed, matches)
    start, steady_wait, steady = (
        _start_and_steady(produced, consumed, runs, starting) if has_consumer else (None, None, None)
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
        peak_building_batches=_peak_overlap([(p.start, p.end) for p in produced]),
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
        series=_downsample(times, batches, held),
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


@dataclass
class WaitSplit:
    """The steady state's waits (each run's starting batches left to the start), split:
    ``starved`` seconds waiting for batches not yet built, ``handover`` seconds
    taking batches already built, ``per_batch`` the hand-over of each batch that
    was built before it was asked for (or, where none was, of each batch after
    its build ended), ``seen`` whether any build was seen apart from its request."""

    starved: float
    handover: float
    per_batch: list[float]
    seen: bool


def split_wait(
    produced: list[Produced], consumed: list[Consumed], matches: list[int | None], starting: set[int]
) -> WaitSplit:
    """Split each steady request's wait at the end of its batch's build: before
    it the consumer waited for a batch not yet built, after it for the hand-over
    of one already built (the pipe, unpickling, a copy, the framework's
    conversion). A batch built before it was asked for is all hand-over; a batch
    whose build was not seen apart from the request (built in it: a plain
    iterable, tf.data) is all waiting for its build.

    >>> built = [Produced(0.0, 1.0, 8), Produced(0.0, 1.0, 8), Produced(2.0, 3.5, 8)]
    >>> asked = [Consumed(0.0, 1.1), Consumed(2.0, 2.001), Consumed(3.0, 3.502)]
    >>> s = split_wait(built, asked, [0, 1, 2], starting={0})
    >>> round(s.starved, 3), round(s.handover, 3), [round(h, 3) for h in s.per_batch]
    (0.5, 0.003, [0.001])
    """
    starved = handover = 0.0
    ready: list[float] = []
    after: list[float] = []
    seen = False
    for i, (c, j) in enumerate(zip(consumed, matches)):
        wait = max(0.0, c.consumed - c.requested)
        built = produced[j].end if j is not None else c.consumed
        seen = seen or built != c.consumed
        if i in starting:
            continue
        waited = min(max(0.0, built - c.requested), wait)
        starved += waited
        handover += wait - waited
        (ready if built <= c.requested else after).append(wait - waited)
    return WaitSplit(starved, handover, ready or after if seen else [], seen)


def busy_share(produced: list[Produced]) -> float | None:
    """The busy seconds of the builds where they were measured (``Produced.busy``),
    as a share of their seconds from start to end (None without any, or when
    they took no time).

    >>> busy_share([Produced(0.0, 0.010, 8, busy=0.003), Produced(1.0, 1.010, 8, busy=0.001), Produced(2, 3, 8)])
    0.2
    """
    timed = [(p.busy, p.end - p.start) for p in produced if p.busy is not None]
    spent = sum(max(0.0, wall) for _, wall in timed)
    if not spent:
        return None
    return round(min(1.0, sum(busy for busy, _ in timed if busy is not None) / spent), 6)


def built_before_asked(produced: list[Produced], consumed: list[Consumed]) -> int:
    """Batches already built when the consumer first asked for one (Keras builds
    twice its depth while ``fit`` builds the model): part of the start, not of
    the steady state.

    >>> built_before_asked([Produced(0, t, 1) for t in (0.5, 0.8, 1.5)], [Consumed(1.0, 1.0)])
    2
    """
    if not consumed:
        return 0
    asked = min(c.requested for c in consumed)
    return sum(1 for p in produced if p.end <= asked)


def starting_batches(produced: list[Produced], consumed: list[Consumed], matches: list[int | None]) -> set[int]:
    """The consumed batches (their places in ``consumed``) that belong to their
    run's start: its first batch, and each next one while it is the first of a
    worker not seen before in the run (workers starting anew each epoch, as a
    DataLoader's do, deliver their first batches late).

    >>> built = [Produced(0, 1, 8, worker=w) for w in ("a", "b", "a", "b")]
    >>> sorted(starting_batches(built, [Consumed(i, i + 1) for i in range(4)], [0, 1, 2, 3]))
    [0, 1]
    """
    starting: set[int] = set()
    workers: dict[int, set[str] | None] = {}
    for i, (c, j) in enumerate(zip(consumed, matches)):
        seen = workers.get(c.run, set())
        if c.run not in workers:
            starting.add(i)
        elif seen is not None and j is not None and produced[j].worker not in seen:
            starting.add(i)
        else:
            workers[c.run] = None
            continue
        if seen is not None and j is not None:
            seen.add(produced[j].worker)
        workers[c.run] = seen
    return starting


def _start_and_steady(
    produced: list[Produced], consumed: list[Consumed], runs: dict[int, Span], starting: set[int]
) -> tuple[Start | None, float | None, float | None]:
    """The start of the runs, and the seconds waited in their steady state and
    its length: from the hand-over of each run's last starting batch (see
    :func:`starting_batches`) to its end, the starting batches' waits left to the start."""
    first: dict[int, Consumed] = {}
    began: dict[int, float] = {}
    steady_wait = 0.0
    for i, c in enumerate(consumed):
        first.setdefault(c.run, c)
        if i in starting:
            began[c.run] = max(began.get(c.run, c.consumed), c.consumed)
        else:
            steady_wait += c.consumed - c.requested
    if not first:
        return None, None, None
    earliest = min(first, key=lambda r: runs[r].begin)
    start = Start(
        runs=len(first),
        first_batch_seconds=max(0.0, first[earliest].consumed - runs[earliest].begin),
        seconds=sum(max(0.0, t - runs[r].begin) for r, t in began.items()),
        built_before_asked=built_before_asked(produced, consumed),
    )
    steady = sum(max(0.0, runs[r].end - t) for r, t in began.items())
    return start, steady_wait, steady


def _dropped_with_run(
    unmatched: list[Produced], runs: dict[int, Span], floors: dict[int, float]
) -> list[tuple[float, int]]:
    """Batches a run never handed over are let go when that run ends (its workers
    are replaced), or when they are finished if that is later. A batch belongs to
    the last run whose floor is at or before its start."""
    order = sorted(runs, key=lambda r: floors[r])
    released = []
    for p in unmatched:
        owner = order[0] if order else None
        for run in order:
            if floors[run] <= p.start:
                owner = run
        if owner is not None:
            released.append((max(p.end, runs[owner].end), p.nbytes))
    return released


def _in_flight(
    produced: list[Produced], flows: list[tuple[float, int, int]]
) -> tuple[list[float], list[int], list[int]]:
    """Step functions of batches and bytes built and not yet released by the consumer;
    ``flows`` are the releases, (time, batches, bytes). Changes at the same instant
    are applied together."""
    deltas: dict[float, list[int]] = defaultdict(lambda: [0, 0])
    for p in produced:
        deltas[p.end][0] += 1
        deltas[p.end][1] += p.nbytes
    for r, count, size in flows:
        deltas[r][0] -= count
        deltas[r][1] -= size
    times, batches, held = [], [], []
    count = total = 0
    for t in sorted(deltas):
        count += deltas[t][0]
        total += deltas[t][1]
        times.append(t)
        batches.append(count)
        held.append(total)
    return times, batches, held


def row_releases(trace: Trace, releases: list[float | None]) -> list[float | None]:
    """For each produced batch, when the consumer let go of its last row.

    For loaders whose consumed batches are cut from the produced ones (Ray
    Data's blocks): produced batches are taken whole, first in, first out by the
    end of their build, and each consumed batch takes ``rows`` of them; a
    produced batch is released with the consumed batch that takes its last row
    (``None`` if no consumed batch did). A produced or consumed batch without
    ``rows`` counts as one row.

    >>> from queuetune.record.trace import Produced, Consumed
    >>> t = Trace(produced=[Produced(0, 1, 8, rows=4), Produced(0, 2, 8, rows=4)],
    ...           consumed=[Consumed(2, 2, rows=2), Consumed(3, 3, rows=2), Consumed(4, 4, rows=2)])
    >>> row_releases(t, [3.0, 4.0, 5.0])
    [4.0, None]
    """
    freed: list[float | None] = [None] * len(trace.produced)
    for c, p, _, last in _rows_taken(trace):
        if last:
            freed[p] = releases[c]
    return freed


def consumed_by_block(trace: Trace) -> Trace:
    """The trace seen one produced batch at a time, for a loader whose consumed
    batches are cut from produced ones by rows (``meta.match == "rows"``: Ray
    Data's blocks): each produced batch gets one consumed event, that of the
    consumed batch that takes its first row, with its own rows and bytes. The
    queue model then times the trainer per block. Other traces come back as they are.

    >>> from queuetune.record.trace import Produced, Consumed
    >>> t = Trace(meta={"match": "rows"}, produced=[Produced(0, 1, 8, rows=4), Produced(0, 2, 8, rows=4)],
    ...           consumed=[Consumed(i, i, rows=2) for i in range(2, 6)])
    >>> [(c.requested, c.rows, c.nbytes) for c in consumed_by_block(t).consumed]
    [(2, 4, 8), (4, 4, 8)]
    """
    if trace.meta.match != "rows":
        return trace
    consumed = []
    for c, p, first, _ in _rows_taken(trace):
        if first:
            block = trace.produced[p]
            consumed.append(replace(trace.consumed[c], rows=block.rows, nbytes=block.nbytes))
    return replace(trace, consumed=consumed)


def _rows_taken(trace: Trace) -> Iterator[tuple[int, int, bool, bool]]:
    """``(consumed, produced, first, last)`` positions for each consumed batch
    taking rows of a produced batch, produced batches first in, first out by
    the end of their build; ``first``/``last``: it took the produced batch's
    first/last row."""
    order = sorted(range(len(trace.produced)), key=lambda i: trace.produced[i].end)
    left = [_rows(trace.produced[i].rows) for i in order]
    position = 0
    for c, batch in enumerate(trace.consumed):
        taken = _rows(batch.rows)
        while taken > 0 and position < len(order):
            p = order[position]
            first = left[position] == _rows(trace.produced[p].rows)
            use = min(left[position], taken)
            taken -= use
            left[position] -= use
            yield c, p, first, left[position] == 0
            if left[position] == 0:
                position += 1


def _rows(rows: int | None) -> int:
    return 1 if rows is None else rows


def _freed_at(
    produced: list[Produced],
    matches: list[int | None],
    releases: list[float | None],
    hidden: list[tuple[int, int]],
    runs: dict[int, Span],
) -> list[float | None]:
    freed: list[float | None] = [None] * len(produced)
    for j, r in zip(matches, releases):
        if j is not None:
            freed[j] = r
    for run, i in hidden:
        freed[i] = runs[run].begin
    return freed


def held_by_node(produced: list[Produced], freed: list[float | None]) -> dict[str, NodeHeld]:
    """Per node, for traces whose workers are named ``"node:pid"``: the batches built
    there, and the most and the last of them held (built, not yet released).
    Empty when no worker names a node.

    >>> from queuetune.record.trace import Produced
    >>> nodes = held_by_node([Produced(0, 1, 5, worker="a:1"), Produced(0, 2, 5, worker="a:2")], [3.0, None])
    >>> nodes["a"].peak_held_batches, nodes["a"].read_ahead_bytes
    (2, 5)
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(produced):
        if ":" in p.worker:
            groups[p.worker.split(":", 1)[0]].append(i)
    result: dict[str, NodeHeld] = {}
    for node, members in sorted(groups.items()):
        flows = [(t, 1, produced[i].nbytes) for i in members if (t := freed[i]) is not None]
        _, batches, held = _in_flight([produced[i] for i in members], flows)
        left = [i for i in members if freed[i] is None]
        result[node] = NodeHeld(
            produced_batches=len(members),
            produced_bytes=sum(produced[i].nbytes for i in members),
            peak_held_batches=max([0, *batches]),
            peak_held_bytes=max([0, *held]),
            read_ahead_batches=len(left),
            read_ahead_bytes=sum(produced[i].nbytes for i in left),
        )
    return result


def _time_mean(times: list[float], values: list[int], start: float, end: float) -> float:
    if not times or end <= start:
        return 0.0
    area = 0.0
    for i, t in enumerate(times):
        nxt = times[i + 1] if i + 1 < len(times) else end
        area += values[i] * max(0.0, min(nxt, end) - max(t, start))
    return area / (end - start)


def _peak_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = count = 0
    for _, d in events:
        count += d
        peak = max(peak, count)
    return peak


def _downsample(times: list[float], batches: list[int], held: list[int]) -> dict[str, list[float]]:
    if not times:
        return {"t": [], "batches": [], "bytes": []}
    t0 = times[0]
    step = max(1, len(times) // SERIES_POINTS)
    keep = sorted(set(range(0, len(times), step)) | {int(np.argmax(batches)), int(np.argmax(held)), len(times) - 1})
    return {
        "t": [round(times[i] - t0, 6) for i in keep],
        "batches": [batches[i] for i in keep],
        "bytes": [held[i] for i in keep],
    }


@dataclass
class EpochItems:
    """What each run and epoch consumed, item by item in order (see :func:`coverage`):
    ``unit`` (None where nothing identifies items), the items, the workers that
    built each keyed sample, and the batches that carried no keys."""

    unit: ItemUnit | None
    items: dict[tuple[int, int], list[int]]
    built_by: dict[tuple[int, int], dict[int, list[str]]]
    unkeyed: Counter[tuple[int, int]]


def epoch_items(trace: Trace, matches: list[int | None]) -> EpochItems:
    """The items of each run and epoch, in the order they were consumed.

    >>> from queuetune.record.trace import Trace, Produced, Consumed
    >>> t = Trace(produced=[Produced(0, 1, 8, samples=[5, 6])], consumed=[Consumed(0, 1)])
    >>> found = epoch_items(t, [0])
    >>> found.unit, found.items
    ('sample key', {(0, 0): [5, 6]})
    """
    by_epoch: dict[tuple[int, int], list[int]] = defaultdict(list)
    built_by: dict[tuple[int, int], dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    unkeyed: Counter[tuple[int, int]] = Counter()
    unit: ItemUnit | None = None

    def keyed(epoch: tuple[int, int], built: Produced, samples: list[int]) -> None:
        by_epoch[epoch].extend(samples)
        for key in samples:
            built_by[epoch][key].append(built.worker)

    if trace.meta.match == "rows":
        # Batches cut from blocks by rows: each block's rows count once, in the
        # epoch of the batch that takes its first row.
        for taker, p, first, _ in _rows_taken(trace):
            block = trace.produced[p]
            if first and block.samples is not None:
                unit = "sample key"
                keyed((trace.consumed[taker].run, trace.consumed[taker].epoch), block, block.samples)
        return EpochItems(unit, dict(by_epoch), {k: dict(v) for k, v in built_by.items()}, unkeyed)
    for c, j in zip(trace.consumed, matches):
        epoch = (c.run, c.epoch)
        built = trace.produced[j] if j is not None else None
        if c.samples is not None:
            unit = "sample"
            by_epoch[epoch].extend(c.samples)
        elif built is not None and built.samples is not None:
            unit = "sample key"
            keyed(epoch, built, built.samples)
        elif built is not None and built.index is not None:
            unit = unit or "batch"
            by_epoch[epoch].append(built.index)
        else:
            unkeyed[epoch] += 1
    return EpochItems(unit, dict(by_epoch), {k: dict(v) for k, v in built_by.items()}, unkeyed)


def _first_missing(counts: Counter[int], total: int, most: int) -> list[int]:
    """The first ``most`` items of ``range(total)`` not in ``counts``, in order.

    >>> _first_missing(Counter([0, 1, 3]), 10, 3)
    [2, 4, 5]
    """
    found: list[int] = []
    for i in range(total):  # stops within len(counts) + most steps
        if len(found) == most:
            break
        if i not in counts:
            found.append(i)
    return found


def coverage(trace: Trace, matches: list[int | None]) -> list[Coverage]:
    """Per run and epoch: items consumed more than once, and never (when the total
    is known and the epoch ran to its end; an epoch cut short, which a
    ``cut_short`` mark names, counts them as not reached instead).

    Items are batch indices for indexable loaders (Keras PyDataset), sample
    indices for torch map-style datasets, and the keys of each sample (content
    fingerprints or the user's key) where batches carry no index; an epoch
    whose batches all went without keys is listed with none.
    """
    found = epoch_items(trace, matches)
    unit, by_epoch, built_by, unkeyed = found.unit, found.items, found.built_by, found.unkeyed
    if unit is None:
        return []
    total = trace.meta.num_samples if unit == "sample" else trace.meta.num_batches if unit == "batch" else None
    batches = Counter((c.run, c.epoch) for c in trace.consumed)
    whole = trace.meta.num_batches
    cut = cut_short_epochs(trace)
    resumed = resumed_epochs(trace)
    epochs = set(by_epoch) | (set(unkeyed) if unit == "sample key" else set())
    result = []
    for run, epoch in sorted(epochs):
        items = by_epoch.get((run, epoch), [])
        counts = Counter(items)
        taken = batches[(run, epoch)]
        # An epoch that took every batch the loader has was not cut short, marked or not.
        short = epoch in cut and (whole is None or taken < whole)
        cov = Coverage(run, epoch, unit, len(items), total, batches=taken, cut_short=short)
        cov.resumed_after = resumed.get(epoch)
        cov.unkeyed = unkeyed[(run, epoch)] if unit == "sample key" else 0
        cov.duplicates = sorted(i for i, n in counts.items() if n > 1)
        cov.extra = sum(n - 1 for n in counts.values() if n > 1)
        origins = built_by.get((run, epoch), {})
        cov.repeats = [Repeat(i, counts[i], sorted(set(origins.get(i, [])))) for i in cov.duplicates[:20]]
        workers = {w for built in origins.values() for w in built if w}
        cov.cause = _repeat_cause(counts, origins, len(workers), _framework(trace.meta).shard_advice)
        if isinstance(total, int):
            # Counted, not listed: a dataset may hold billions of samples.
            missing = total - sum(1 for i in counts if 0 <= i < total)
            if cov.cut_short or cov.resumed_after is not None:
                cov.not_reached = missing
            else:
                cov.never_count = missing
                cov.never = _first_missing(counts, total, 20)
        result.append(cov)
    return result


def resumed_epochs(trace: Trace) -> dict[int, int]:
    """The epochs that resumed one another process began: epoch, the batches
    handed over there (from ``resumed`` marks).

    >>> from queuetune.record.trace import Mark
    >>> resumed_epochs(Trace(marks=[Mark(1.0, "resumed", {"epoch": 0, "batches": 7})]))
    {0: 7}
    """
    found = {}
    for m in trace.marks:
        if m.kind == "resumed" and isinstance(m.value, dict):
            epoch, batches = m.value.get("epoch"), m.value.get("batches")
            if isinstance(epoch, int) and isinstance(batches, int):
                found[epoch] = batches
    return found


def cut_short_epochs(trace: Trace) -> set[int]:
    """The epochs that ended before their loader was exhausted: those a
    ``cut_short`` mark names (a watcher that can tell marks them; torch's does).

    >>> from queuetune.record.trace import Mark
    >>> cut_short_epochs(Trace(marks=[Mark(1.0, "epoch_end", 0), Mark(2.0, "cut_short", 1)]))
    {1}
    """
    return {m.value for m in trace.marks if m.kind == "cut_short" and isinstance(m.value, int)}


def _repeat_cause(counts: Counter[int], origins: dict[int, list[str]], workers: int, advice: str | None) -> str | None:
    """Each sample once from each worker: a dataset that every worker reads whole
    (not sharded among them); ``advice``: the framework's way to shard it."""
    if workers < 2 or not origins or len(counts) < 2:
        return None
    every = all(n == workers and len(set(origins.get(i, []))) == workers for i, n in counts.items())
    if not every:
        return None
    cause = f"each sample came once from each of {workers} workers: the dataset is read whole by every worker"
    return cause if advice is None else f"{cause}; {advice}"


def _framework(meta: TraceMeta) -> Framework:
    """The framework a trace's meta names (a plain iterable's when it names none known)."""
    return FRAMEWORKS.get(meta.framework or "", PYTHON)
