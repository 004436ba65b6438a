"""The consumer's waits: the start and the steady state, waits for batches not
yet built against the hand-over of batches built, and how busy the builds were."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..record.matching import Span
from ..record.trace import Consumed, Produced, Trace
from .timing import Timing

MODERATE, HIGH = 0.05, 0.20
#: The TensorFlow Profiler's words for an input-wait fraction (see :func:`verdict`).
Verdict = Literal["unknown", "not input-bound", "moderately input-bound", "highly input-bound"]


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


def start_and_steady(
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


@dataclass(frozen=True)
class Waits:
    """The report's section of the consumer's waits: over whole runs
    (``input_wait_seconds`` of ``wall_seconds``), at the start (``start``) and in
    the steady state (``steady_wait_seconds`` of ``steady_seconds``), that split
    into waits for builds (``steady_starved_seconds``, what
    ``input_bound_fraction`` and ``verdict`` are about) and the hand-over
    (``steady_handover_seconds``, ``handover`` per batch, where
    ``handover_seen``); and how busy the builds were (``build_busy_share``, see
    :func:`busy_share`)."""

    input_wait_seconds: float | None
    wall_seconds: float | None
    start: Start | None
    steady_wait_seconds: float | None
    steady_seconds: float | None
    input_bound_fraction: float | None
    verdict: Verdict
    steady_starved_seconds: float | None
    steady_handover_seconds: float | None
    handover: Timing
    handover_seen: bool
    build_busy_share: float | None


def waits_of(trace: Trace, runs: dict[int, Span], matches: list[int | None], asked: bool) -> Waits:
    """The waits of a trace whose runs are ``runs`` and whose consumed batches are
    ``matches`` of its produced ones; ``asked``: whether any consumption was recorded.

    >>> built, taken = [Produced(0.0, 1.0, 10)], [Consumed(0.0, 1.0)]
    >>> w = waits_of(Trace(produced=built, consumed=taken), {0: Span(0.0, 2.0)}, [0], True)
    >>> w.input_wait_seconds, w.wall_seconds, w.steady_seconds, w.verdict
    (1.0, 2.0, 1.0, 'not input-bound')
    """
    produced, consumed = trace.produced, trace.consumed
    starting = starting_batches(produced, consumed, matches)
    start, steady_wait, steady = start_and_steady(produced, consumed, runs, starting) if asked else (None, None, None)
    split = split_wait(produced, consumed, matches, starting)
    starved, handed = (split.starved, split.handover) if steady_wait is not None else (None, None)
    fraction = min(max(starved / steady, 0.0), 1.0) if (steady and starved is not None) else None
    return Waits(
        input_wait_seconds=float(sum(c.consumed - c.requested for c in consumed)) if asked else None,
        wall_seconds=sum(end - begin for begin, end in runs.values()) if runs else None,
        start=start,
        steady_wait_seconds=steady_wait,
        steady_seconds=steady,
        input_bound_fraction=fraction,
        verdict=verdict(fraction),
        steady_starved_seconds=starved,
        steady_handover_seconds=handed,
        handover=Timing.of(split.per_batch),
        handover_seen=split.seen,
        build_busy_share=busy_share(produced),
    )
