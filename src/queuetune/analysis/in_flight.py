"""Batches in flight: built and not yet let go of, over time, in bytes and by node."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from ..record.matching import Matching, Span, run_floors
from ..record.trace import Produced, Trace

SERIES_POINTS = 500


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


@dataclass(frozen=True)
class Flows:
    """How batches left flight: ``flows``, the releases as (time, batches, bytes);
    ``freed``, when each produced batch was let go of (None: never); ``unmatched``,
    the produced batches no consumption took; ``read_ahead``, the batches built
    and never handed over, by count (at most ``len(unmatched)``; below 0 where
    consumption outran the recorded builds)."""

    flows: list[tuple[float, int, int]]
    freed: list[float | None]
    unmatched: list[Produced]
    read_ahead: int


def flows_of(trace: Trace, runs: dict[int, Span], releases: list[float | None], matching: Matching) -> Flows:
    """The releases of a trace's batches: by the rows taken from them (``meta.match == "rows"``)
    or by the consumed batches they were, and, where batches belong to their run
    (``meta.match_scope == "run"``), those never handed over let go with their run.

    >>> from queuetune.record.matching import match, releases_of, runs_of
    >>> from queuetune.record.trace import Consumed
    >>> t = Trace(produced=[Produced(0.0, 1.0, 10), Produced(0.0, 1.5, 10)], consumed=[Consumed(0.0, 1.0)])
    >>> runs = runs_of(t)
    >>> f = flows_of(t, runs, releases_of(t.consumed, runs, t.end), match(t, runs))
    >>> f.read_ahead, [p.nbytes for p in f.unmatched]
    (1, [10])
    """
    produced, consumed = trace.produced, trace.consumed
    if trace.meta.match == "rows":
        freed = row_releases(trace, releases)
        flows = [(r, 1, p.nbytes) for p, r in zip(produced, freed) if r is not None]
        released = {i for i, r in enumerate(freed) if r is not None}
        read_ahead = len(produced) - len(released)
    else:
        matches = matching.consumed
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
    return Flows(flows, freed, unmatched, read_ahead)


@dataclass(frozen=True)
class InFlight:
    """The report's section of batches in flight (built, not yet released): the
    peak and the time-weighted mean, the most built at once, the most shared
    memory a Prefetcher in process mode kept for its batches (``peak_pool_bytes``,
    from its ``pool`` marks; None without), per node (``nodes``), and over time
    (``series``, whose ``t`` = 0 is ``series_start`` seconds after the trace's start)."""

    peak_in_flight_batches: int
    peak_in_flight_bytes: int
    mean_in_flight_batches: float
    peak_building_batches: int
    peak_pool_bytes: int | None
    nodes: dict[str, NodeHeld]
    series: dict[str, list[float]]
    series_start: float | None


#: Batches and bytes in flight as step functions: the times of their changes, and their values.
Steps = tuple[list[float], list[int], list[int]]


def in_flight_of(trace: Trace, flows: Flows, steps: Steps) -> InFlight:
    """The in-flight section of a trace, from its releases (``flows``) and the step
    functions they make (``steps``, :func:`in_flight_steps`).

    >>> t = Trace(produced=[Produced(0.0, 1.0, 10)], end=2.0)
    >>> f = Flows([(1.5, 1, 10)], [1.5], [], 0)
    >>> s = in_flight_of(t, f, in_flight_steps(t.produced, f.flows))
    >>> s.peak_in_flight_bytes, s.mean_in_flight_batches, s.series_start
    (10, 0.25, 1.0)
    """
    produced = trace.produced
    times, batches, held = steps
    return InFlight(
        # The step functions start at 0 before their first change; a consumed batch whose production
        # was not recorded (a trace cut short by a fault) must not take them below it.
        peak_in_flight_batches=int(max([0, *batches])),
        peak_in_flight_bytes=int(max([0, *held])),
        mean_in_flight_batches=time_mean(times, batches, trace.start, trace.end),
        peak_building_batches=peak_overlap([(p.start, p.end) for p in produced]),
        peak_pool_bytes=max((int(m.value) for m in trace.marks if m.kind == "pool"), default=None),
        nodes=held_by_node(produced, flows.freed),
        series=downsample(times, batches, held),
        series_start=times[0] - trace.start if times else None,
    )


def dropped_with_run(
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


def in_flight_steps(produced: list[Produced], flows: list[tuple[float, int, int]]) -> Steps:
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
    for c, p, _, last in rows_taken(trace):
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
    for c, p, first, _ in rows_taken(trace):
        if first:
            block = trace.produced[p]
            consumed.append(replace(trace.consumed[c], rows=block.rows, nbytes=block.nbytes))
    return replace(trace, consumed=consumed)


def rows_taken(trace: Trace) -> Iterator[tuple[int, int, bool, bool]]:
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


def freed_at(
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
        _, batches, held = in_flight_steps([produced[i] for i in members], flows)
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


def time_mean(times: list[float], values: list[int], start: float, end: float) -> float:
    if not times or end <= start:
        return 0.0
    area = 0.0
    for i, t in enumerate(times):
        nxt = times[i + 1] if i + 1 < len(times) else end
        area += values[i] * max(0.0, min(nxt, end) - max(t, start))
    return area / (end - start)


def peak_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = count = 0
    for _, d in events:
        count += d
        peak = max(peak, count)
    return peak


def downsample(times: list[float], batches: list[int], held: list[int]) -> dict[str, list[float]]:
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
