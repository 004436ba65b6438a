"""soak.py's parts: indexed batches that stall now and then, the process's and its
children's memory, the bytes held read from a trace, and what the recorder keeps."""

from __future__ import annotations

import bisect
import time
import tracemalloc
from collections import defaultdict
from typing import Any

import numpy as np
import psutil

from queuetune.record.recorder import key_of
from queuetune.record.trace import Consumed, Trace

MiB = 1024 * 1024


class Indexed:
    """Batch ``i``: an int64 array of ``nbytes`` bytes filled with ``i``; every
    ``stall_every``-th index takes ``stall`` seconds more to build."""

    def __init__(self, length: int, nbytes: int, stall_every: int = 0, stall: float = 0.0) -> None:
        self.length, self.count = length, nbytes // 8
        self.stall_every, self.stall = stall_every, stall

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < self.length:
            raise IndexError(i)
        if self.stall_every and i % self.stall_every == 0:
            time.sleep(self.stall)
        return np.full(self.count, i, dtype=np.int64)


def memory() -> dict[str, int]:
    """This process's RSS, and its children's RSS and USS (summed)."""
    me = psutil.Process()
    rss_children = uss_children = 0
    children = me.children(recursive=True)
    for child in children:
        try:
            info = child.memory_full_info()
        except psutil.Error:
            continue
        rss_children += info.rss
        uss_children += info.uss
    return {
        "rss": me.memory_info().rss,
        "children_rss": rss_children,
        "children_uss": uss_children,
        "children": len(children),
    }


def peaks(trace: Any, max_bytes: int) -> dict[str, int]:
    """Peak bytes of batches built (and started) and not yet handed over."""
    taken: dict[Any, list[float]] = defaultdict(list)
    for c in trace.consumed:
        taken[c.key].append(c.consumed)
    for times in taken.values():
        times.sort()
    built, started = [], []
    unmatched = 0
    for p in trace.produced:
        times = taken.get(p.key, [])
        at = bisect.bisect_left(times, p.end)
        release = times[at] if at < len(times) else None
        if release is None:
            unmatched += 1
            release = float("inf")
        built += [(p.end, p.nbytes), (release, -p.nbytes)]
        started += [(p.start, p.nbytes), (release, -p.nbytes)]

    def peak(events: list[tuple[float, int]]) -> int:
        held = top = 0
        for _, change in sorted(events):
            held += change
            top = max(top, held)
        return top

    return {"built": peak(built), "started": peak(started), "unmatched": unmatched, "max_bytes": max_bytes}


def last_epoch(trace: Trace) -> Trace:
    """The trace's last epoch: its hand-overs, and the batches built since it began."""
    begin = max(m.t for m in trace.marks if m.kind == "run_begin")
    run = max(c.run for c in trace.consumed) if trace.consumed else None
    return Trace(
        meta=trace.meta,
        start=begin,
        end=trace.end,
        produced=[p for p in trace.produced if p.start >= begin],
        consumed=[c for c in trace.consumed if c.run == run],
        marks=[m for m in trace.marks if m.t >= begin],
    )


def record_bytes(batches: int) -> int:
    """Bytes the recorder keeps for ``batches`` batches (a produced tuple and a
    Consumed record each), measured with tracemalloc."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    produced = [(time.monotonic(), time.monotonic(), 8 * i, i, key_of(i), 12345, 67890) for i in range(batches)]
    consumed = [Consumed(time.monotonic(), time.monotonic(), 0, i // 250, MiB, key_of(i), None) for i in range(batches)]
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del produced, consumed
    return size
