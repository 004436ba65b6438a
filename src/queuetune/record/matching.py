"""Which produced batch each consumed batch was: the matching every analysis of a
trace starts from, with the runs of consumption and the consumer's releases."""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any, NamedTuple

from .trace import Consumed, Trace


class Span(NamedTuple):
    """When a run of consumption began and ended."""

    begin: float
    end: float


def runs_of(trace: Trace) -> dict[int, Span]:
    """Begin and end of each consuming run; an unfinished run ends at its last event."""
    begins: dict[int, float] = {}
    ends: dict[int, float] = {}
    for m in trace.marks:
        if m.kind == "run_begin":
            begins[m.value] = m.t
        elif m.kind == "run_end":
            ends[m.value] = m.t
    for c in trace.consumed:
        begins.setdefault(c.run, c.requested)
        ends[c.run] = max(ends.get(c.run, c.consumed), c.consumed)
    return {r: Span(b, ends.get(r, b)) for r, b in begins.items()}


def releases_of(consumed: list[Consumed], runs: dict[int, Span], end: float) -> list[float | None]:
    """When the consumer let go of each batch: when it asked for the next one in
    the same run, else at the end of the run."""
    releases: list[float | None] = []
    for i, c in enumerate(consumed):
        nxt = consumed[i + 1] if i + 1 < len(consumed) else None
        if nxt is not None and nxt.run == c.run:
            releases.append(nxt.requested)
        else:
            run_end = runs.get(c.run, Span(c.consumed, end)).end
            releases.append(max(run_end, c.consumed))
    return releases


def run_floors(runs: dict[int, Span], before_begin: bool) -> dict[int, float]:
    """For each run, the earliest start of a batch it can be handed: its own
    begin, or with ``before_begin`` the end of the run before it."""
    floors: dict[int, float] = {}
    previous_end = float("-inf")
    for run in sorted(runs):
        floors[run] = previous_end if before_begin else runs[run].begin
        previous_end = runs[run].end
    return floors


@dataclass
class Matching:
    """Which produced batch each consumed batch was, and the batches the framework
    took outside the training steps (``hidden``: (run, produced position))."""

    consumed: list[int | None]
    hidden: list[tuple[int, int]]


def match(trace: Trace, runs: dict[int, Span] | None = None) -> Matching:
    """For each consumed batch, the position of the produced batch it was.

    A consumed batch with a key takes the earliest unmatched produced batch of
    that key. Without a key, batches are taken first in, first out by the time
    their building started (the order Keras's enqueuer submits and serves them).
    When ``meta.match_scope == "run"`` (a loader whose workers are replaced
    with every pass, or every ``fit``/``predict`` call), batches started before
    the run began are never candidates. ``meta.pre_run_consumes = k`` says
    batches built between the previous run's end and this run's begin belong to
    this run, and the framework itself takes the first ``k`` of them (Keras
    builds the model with one).
    """
    if runs is None:
        runs = runs_of(trace)
    by_key: dict[Any, deque[int]] = defaultdict(deque)
    for i, p in enumerate(trace.produced):
        if p.key is not None:
            by_key[p.key].append(i)
    fifo = deque(range(len(trace.produced)))
    taken: set[int] = set()
    scoped = trace.meta.match_scope == "run"
    pre_run = trace.meta.pre_run_consumes or 0
    floors = run_floors(runs, pre_run > 0) if scoped else {}
    hidden: list[tuple[int, int]] = []
    result: list[int | None] = []
    current_run = None
    for c in trace.consumed:
        floor = floors.get(c.run, float("-inf"))
        if scoped and c.run != current_run:
            current_run = c.run
            begin = runs[c.run].begin if c.run in runs else float("-inf")
            early = [i for i in fifo if i not in taken and floor <= trace.produced[i].start < begin]
            for i in early[:pre_run]:
                taken.add(i)
                hidden.append((c.run, i))
        found = None
        if c.key is not None:
            queue = by_key.get(c.key, deque())
            while queue and (queue[0] in taken or trace.produced[queue[0]].start < floor):
                queue.popleft()
            found = queue.popleft() if queue else None
        else:
            while fifo:
                i = fifo.popleft()
                if i in taken or trace.produced[i].start < floor:
                    continue
                found = i
                break
        if found is not None:
            taken.add(found)
        result.append(found)
    return Matching(result, hidden)
