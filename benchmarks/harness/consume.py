"""A synthetic workload's steps run over a loader, and the row of what was measured: from
queuetune's trace, or counted in the load function of a loader queuetune cannot watch."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

import queuetune
from harness.memory import Counted
from harness.synthetic import Batches, Workload
from queuetune.record.matching import match
from queuetune.tune import throughput

# How long each of the latest run's steps took (a sleep takes longer than asked on a busy machine).
_TOOK: list[float] = []


def make_step(w: Workload):
    count = [0]
    _TOOK.clear()

    def step(batch: Any) -> None:
        count[0] += 1
        started = time.perf_counter()
        time.sleep(w.step_at(count[0]))
        _TOOK.append(time.perf_counter() - started)
        if w.pause and count[0] == w.steps // 2:
            time.sleep(w.pause)

    return step


def mean_step_ms(w: Workload) -> float | None:
    """The mean time the latest run's steps took after the warm-up, in ms
    (where the consumer's steps are all the same)."""
    took = _TOOK[w.warmup :]
    return 1000 * statistics.fmean(took) if took and w.burst is None else None


# What load_counted reads: set before a peer's workers start, so forked workers have them too.
_DATA: Batches | None = None


_COUNTED: Counted | None = None


def counting(w: Workload) -> Counted:
    """Set what :func:`load_counted` reads to ``w``'s batches and a new count, and return the count."""
    global _DATA, _COUNTED
    _DATA, _COUNTED = Batches(w), Counted()
    return _COUNTED


def load_counted(index: int) -> tuple[np.ndarray, np.ndarray]:
    assert _DATA is not None and _COUNTED is not None
    _COUNTED.start()
    return _DATA[index]


def consume(loader: Any, w: Workload, counted: Counted | None = None) -> list[float]:
    """Run ``w.steps`` steps over ``loader``; the times the batches arrived. With
    ``counted``, each request for the next batch releases the one before."""
    step = make_step(w)
    iterator = iter(loader)
    arrived = []
    try:
        for _ in range(w.steps):
            if counted is not None and arrived:
                counted.release()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            arrived.append(time.perf_counter())
            step(batch)
            del batch
        return arrived
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def memory(trace: Any) -> tuple[int | None, int | None]:
    totals = [m.rss + m.children for m in trace.memory]
    if not totals:
        return None, None
    return max(totals), max(totals) - totals[0]


def started_peak(trace: Any) -> tuple[int, int]:
    """Most batches (and their bytes) started (being built or built) and not yet
    released by the consumer, at any moment of the trace.

    A batch counts from its ``Produced.start``; the consumer releases it when it
    asks for the next batch of the same run, or at the end of its run. Batches
    the framework took outside the steps (Keras builds its model with one) are
    released when their run begins; batches never handed over, when they are
    built or their run ends, whichever is later.
    """
    ends: dict[int, float] = {m.value: m.t for m in trace.marks if m.kind == "run_end"}
    begins: dict[int, float] = {m.value: m.t for m in trace.marks if m.kind == "run_begin"}
    consumed = trace.consumed
    for c in consumed:
        ends[c.run] = max(ends.get(c.run, c.consumed), c.consumed)
    last_end = max(ends.values(), default=trace.end)
    matching = match(trace)
    events: list[tuple[float, int, int]] = []
    used: set[int] = set()

    def hold(j: int, release: float) -> None:
        p = trace.produced[j]
        used.add(j)
        events.append((p.start, 1, p.nbytes))
        events.append((max(release, p.start), -1, -p.nbytes))

    for i, (c, j) in enumerate(zip(consumed, matching.consumed)):
        if j is None:
            continue
        nxt = consumed[i + 1] if i + 1 < len(consumed) else None
        hold(j, nxt.requested if nxt is not None and nxt.run == c.run else ends.get(c.run, last_end))
    for run, j in matching.hidden:
        hold(j, begins.get(run, trace.produced[j].end))
    for j, p in enumerate(trace.produced):
        if j not in used:
            hold(j, max(p.end, last_end))
    peak_batches = peak_bytes = batches = held = 0
    for _, d, size in sorted(events):  # at one instant, releases (-1) before starts
        batches += d
        held += size
        peak_batches, peak_bytes = max(peak_batches, batches), max(peak_bytes, held)
    return peak_batches, peak_bytes


def counted_result(loader: str, w: Workload, arrived: list[float], counted: Counted) -> dict[str, Any]:
    """A row for a loader measured in its load function: no trace, no memory samples."""
    times = arrived[w.warmup :]
    return {
        "loader": loader,
        "throughput": (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0,
        "consumed": len(arrived),
        "peak_started_batches": counted.peak,
        "peak_started_bytes": counted.peak * w.batch_bytes,
        "peak_in_flight_batches": None,
        "peak_in_flight_bytes": None,
        "mean_in_flight_batches": None,
        "peak_rss_bytes": None,
        "peak_total_bytes": None,
        "rss_rise_bytes": None,
        "input_bound_fraction": None,
        "mean_step_ms": mean_step_ms(w),
    }


def result(loader: str, trace: Any, report: Any, w: Workload, observable: bool = True) -> dict[str, Any]:
    peak, rise = memory(trace)
    started = started_peak(trace) if observable else (None, None)
    row = {
        "loader": loader,
        "throughput": throughput(trace, w.warmup),
        "consumed": len(trace.consumed),
        "peak_started_batches": started[0],
        "peak_started_bytes": started[1],
        "peak_in_flight_batches": report.peak_in_flight_batches if observable else None,
        "peak_in_flight_bytes": report.peak_in_flight_bytes if observable else None,
        "mean_in_flight_batches": report.mean_in_flight_batches if observable else None,
        "peak_rss_bytes": report.peak_rss_bytes,
        "peak_total_bytes": peak,
        "rss_rise_bytes": rise,
        "input_bound_fraction": report.input_bound_fraction,
        "mean_step_ms": mean_step_ms(w),
    }
    depths = [m.value for m in trace.marks if m.kind == "depth"]
    if loader.startswith("prefetcher") and depths:
        row["depth_marks"] = depths
    return row


def measured(p: queuetune.Prefetcher, w: Workload) -> tuple[Any, Any]:
    """Run ``w``'s steps over the Prefetcher ``p``, then close it; its trace and report."""
    try:
        consume(p, w)
        time.sleep(0.05)
        return p.trace(), p.report()
    finally:
        p.close()
