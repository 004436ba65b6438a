"""Traces as Chrome trace-event JSON, which ui.perfetto.dev and chrome://tracing
open: per loader a process with a track for the consumer (its steps and waits)
and one per worker (each build), counters for batches and bytes in flight and
for memory, and the consumer's marks (runs, epochs, depth and worker changes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..analysis.in_flight import InFlight
from ..analysis.report import section_of
from .text import worker_name

if TYPE_CHECKING:
    from ..analysis.report import Report
    from ..record.trace import Trace

#: The marks shown as instant events on the consumer's track.
MARKS = ("run_begin", "run_end", "epoch_begin", "epoch_end", "pause_begin", "pause_end", "error", "depth", "workers")


def chrome_trace(loaders: list[tuple[str, Trace, Report]]) -> dict[str, Any]:
    """The trace-event document of ``loaders`` (label, trace, report), times in
    microseconds from the earliest trace's start; loader ``n`` is process ``n``.

    >>> from queuetune.analysis.report import analyze
    >>> from queuetune.record.trace import Consumed, Produced, Trace
    >>> t = Trace(produced=[Produced(0.0, 0.5, 8, worker="thread-1")], consumed=[Consumed(0.0, 0.5)], end=1.0)
    >>> doc = chrome_trace([("loader 1", t, analyze(t))])
    >>> sorted({e["ph"] for e in doc["traceEvents"]})
    ['C', 'M', 'X']
    """
    origin = min((trace.start for _, trace, _ in loaders), default=0.0)
    events: list[dict[str, Any]] = []
    for pid, (label, trace, report) in enumerate(loaders, start=1):
        events += _loader_events(pid, label, trace, report, origin)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"source": "queuetune"}}


def _us(seconds: float, origin: float) -> float:
    return round((seconds - origin) * 1e6, 3)


def _loader_events(pid: int, label: str, trace: Trace, report: Report, origin: float) -> list[dict[str, Any]]:
    workers: dict[str, int] = {}
    for p in trace.produced:
        workers.setdefault(p.worker, len(workers) + 1)
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "consumer"}},
        {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": 0}},
    ]
    for worker, tid in workers.items():
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": _name(worker)}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    for p in trace.produced:
        args: dict[str, Any] = {"bytes": p.nbytes}
        if p.index is not None:
            args["index"] = p.index
        events.append(_span("build", "build", p.start, p.end, pid, workers[p.worker], origin, args))
    for c, after in zip(trace.consumed, [*trace.consumed[1:], None]):
        events.append(_span("wait", "consumer", c.requested, c.consumed, pid, 0, origin, {"run": c.run}))
        if after is not None and after.run == c.run:
            events.append(_span("step", "consumer", c.consumed, after.requested, pid, 0, origin, {"run": c.run}))
    in_flight = section_of(InFlight, report)
    offset = trace.start + (in_flight.series_start or 0.0)
    series = in_flight.series
    for t, batches, held in zip(series["t"], series["batches"], series["bytes"]):
        ts = _us(offset + t, origin)
        events.append({"name": "in flight (batches)", "ph": "C", "ts": ts, "pid": pid, "args": {"batches": batches}})
        events.append({"name": "in flight (bytes)", "ph": "C", "ts": ts, "pid": pid, "args": {"bytes": held}})
    for m in trace.memory:
        memory = {"process RSS": m.rss, "workers' unique memory": m.children}
        events.append({"name": "memory (bytes)", "ph": "C", "ts": _us(m.t, origin), "pid": pid, "args": memory})
    for mark in trace.marks:
        if mark.kind not in MARKS:
            continue
        ts = _us(mark.t, origin)
        events.append(
            {"name": mark.kind, "ph": "i", "s": "t", "ts": ts, "pid": pid, "tid": 0, "args": {"value": mark.value}}
        )
        if mark.kind in ("depth", "workers") and isinstance(mark.value, (int, float)):
            events.append({"name": mark.kind, "ph": "C", "ts": ts, "pid": pid, "args": {mark.kind: mark.value}})
    return events


def _span(
    name: str, cat: str, start: float, end: float, pid: int, tid: int, origin: float, args: dict[str, Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": _us(start, origin),
        "dur": round(max(0.0, end - start) * 1e6, 3),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _name(worker: str) -> str:
    return f"worker {worker_name(worker)}" if worker else worker_name(worker)
