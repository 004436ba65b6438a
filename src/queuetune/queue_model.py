"""Predict throughput and in-flight memory of an input pipeline for each queue depth.

The pipeline is ``workers`` producers building batches into a bounded queue and
one consumer (the training step) taking them one at a time. A discrete-event
simulation replays measured (or synthetic) build and step times against a
depth bound and reports, per depth, the consumer's throughput, its input-wait
fraction and how many batches (and bytes) the pipeline holds.

The rules the simulation follows:

- Batches are numbered in the order they are submitted. A batch is submitted
  while fewer than ``depth`` batches are submitted and their places not freed
  (see ``release`` below). This is Keras's bound (``max_queue_size + 1`` futures started or
  finished and not taken), torch's (``prefetch_factor × num_workers`` indices
  sent to workers and not handed over) and a tf.data prefetch buffer's.
- ``assignment="shared"``: any free worker starts the next submitted batch (as
  Keras's executor does); ``"round_robin"``: batch ``i`` waits for worker
  ``i mod workers`` (as torch's DataLoader assigns indices).
- A batch starts ``dispatch`` seconds after it could (its place under the
  bound free and a worker idle): the worker's wake-up, a pool picking up the
  task, an index crossing a pipe. The worker is taken from that moment.
- A batch built at ``t`` can be taken at ``t + transit`` (a worker process's
  pipe; 0 for threads). The consumer asks for a batch, takes it as soon as it
  is there (with ``ordered=True`` the next in submission order, even when a
  later one is done, as Keras's OrderedEnqueuer and torch's DataLoader
  deliver; with ``ordered=False`` the earliest finished), holds it for one
  step time, then asks for the next. Asking for the next batch *releases* the
  one it held.
- ``release="take"``: taking a batch frees its place under the bound once the
  ``handover`` is over (torch sends the next index after receiving and
  unpickling a batch), so even depth 1 overlaps the
  build of the next batch with the consumer's step. ``release="request"``:
  the place frees when the consumer asks (Keras's feeder submits the next
  batch as soon as the consumer removes the head of its queue), so while the
  consumer waits one more batch can be submitted.

Counts, all over time:

- **in flight**: batches started (being built, built or in transit) and not
  yet released by the consumer. It never exceeds ``depth + 1`` (the bound plus
  the batch the consumer holds).
- **queued**: built and not yet taken, at most ``depth`` (``depth + 1`` with
  release at the request).
- **built**: built and not yet released (in transit, queued or held); this is what
  :func:`queuetune.analysis.analyze` measures as ``peak_in_flight_batches``
  from a trace, where a batch counts from the end of its build.

>>> model = PipelineModel(Distribution.constant(0.010), Distribution.constant(0.020), 1, 1e6)
>>> p = simulate(model, depth=2, batches=200)
>>> round(p.throughput, 6), p.input_wait_fraction, p.peak_in_flight_batches
(50.0, 0.0, 3)
"""

from __future__ import annotations

import heapq
import math
import numbers
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .frameworks import rules_of
from .frameworks.base import ASSIGNMENTS, RELEASES
from .trace import Trace
from .units import nonnegative_int, positive_int

__all__ = [
    "Distribution",
    "PipelineModel",
    "Prediction",
    "compare_with_closed_form",
    "dispatch_time",
    "predict_curve",
    "simulate",
    "tfdata_empty_probability",
    "tfdata_expected_wait",
    "transit_time",
]

#: Share of the simulated batches left out of the statistics while the queue fills.
WARMUP = 0.05
MIN_PRODUCED = 5
MIN_STEPS = 3
# Durations are drawn in blocks of this size, so that batch i gets the same time
# however many batches a run needs (simulations at different depths share them).
_BLOCK = 1024
_BUILT, _ARRIVED, _RELEASED = 0, 1, 2


def _duration(value: Any, what: str, unit: str = "seconds") -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number of {unit}, got {value!r}")
    number = float(value)
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise ValueError(f"{what} must be a finite number of {unit} of at least 0, got {number}")
    return number


class Distribution:
    """Durations in seconds, sampled with a numpy ``Generator``.

    ``Distribution(values)`` resamples measured values (with replacement). The
    class methods build synthetic ones for tests and benchmarks.

    >>> rng = np.random.default_rng(0)
    >>> d = Distribution([0.01, 0.02, 0.03])
    >>> d.mean, d.minimum, sorted(set(d.sample(rng, 50).tolist()))
    (0.02, 0.01, [0.01, 0.02, 0.03])
    >>> Distribution.constant(0.5).sample(rng, 3).tolist()
    [0.5, 0.5, 0.5]
    """

    kind: str
    params: dict[str, float]
    mean: float
    minimum: float
    _values: np.ndarray | None

    def __init__(self, values: Iterable[float]) -> None:
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise TypeError(f"durations must be an iterable of numbers, got {values!r}")
        items = [_duration(v, "a duration") for v in values]
        if not items:
            raise ValueError("durations are empty: a distribution needs at least one value")
        arr = np.asarray(items, dtype=float)
        self._set("empirical", {"n": float(len(arr))}, float(arr.mean()), float(arr.min()), arr)

    def _set(self, kind: str, params: dict[str, float], mean: float, minimum: float, values: np.ndarray | None) -> None:
        if not mean > 0:
            raise ValueError(f"a {kind} distribution of durations must have a positive mean, got {mean}")
        self.kind, self.params, self.mean, self.minimum, self._values = kind, params, mean, minimum, values

    @classmethod
    def _synthetic(cls, kind: str, params: dict[str, float], mean: float, minimum: float) -> Distribution:
        dist = cls.__new__(cls)
        dist._set(kind, params, mean, minimum, None)
        return dist

    @classmethod
    def constant(cls, seconds: float) -> Distribution:
        """Always ``seconds``.

        >>> Distribution.constant(0.02).mean
        0.02
        """
        x = _duration(seconds, "seconds")
        return cls._synthetic("constant", {"seconds": x}, x, x)

    @classmethod
    def exponential(cls, mean: float) -> Distribution:
        """Exponentially distributed with the given mean (memoryless, as tf.data's model assumes).

        >>> Distribution.exponential(0.01).minimum
        0.0
        """
        m = _duration(mean, "mean")
        return cls._synthetic("exponential", {"mean": m}, m, 0.0)

    @classmethod
    def lognormal(cls, mean: float, sigma: float) -> Distribution:
        """Log-normal with the given mean and shape ``sigma`` (the standard
        deviation of the log); a larger ``sigma`` gives a heavier right tail.

        >>> draws = Distribution.lognormal(0.01, 1.0).sample(np.random.default_rng(0), 200_000)
        >>> round(float(draws.mean()), 3)
        0.01
        """
        m = _duration(mean, "mean")
        s = _duration(sigma, "sigma")
        return cls._synthetic("lognormal", {"mean": m, "sigma": s}, m, 0.0)

    @classmethod
    def stalls(cls, base: float, stall: float, probability: float) -> Distribution:
        """``base`` seconds, plus ``stall`` seconds with the given probability
        (a slow disk read, a cache miss, a garbage collection).

        >>> d = Distribution.stalls(0.01, 0.5, 0.05)
        >>> round(d.mean, 6), d.minimum
        (0.035, 0.01)
        """
        b = _duration(base, "base")
        s = _duration(stall, "stall")
        p = _duration(probability, "probability")
        if p > 1:
            raise ValueError(f"probability must be between 0 and 1, got {p}")
        return cls._synthetic("stalls", {"base": b, "stall": s, "probability": p}, b + p * s, b if p < 1 else b + s)

    @property
    def values(self) -> np.ndarray | None:
        """The measured values of an empirical distribution (a copy); ``None`` for a synthetic one."""
        return None if self._values is None else self._values.copy()

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` independent durations.

        >>> Distribution.exponential(1.0).sample(np.random.default_rng(1), 4).shape
        (4,)
        """
        size = nonnegative_int(size, "size")
        p = self.params
        if self.kind == "empirical":
            assert self._values is not None
            return self._values[rng.integers(0, len(self._values), size)]
        if self.kind == "constant":
            return np.full(size, p["seconds"])
        if self.kind == "exponential":
            return rng.exponential(p["mean"], size)
        if self.kind == "lognormal":
            mu = math.log(p["mean"]) - p["sigma"] ** 2 / 2
            return rng.lognormal(mu, p["sigma"], size)
        return p["base"] + p["stall"] * (rng.random(size) < p["probability"])

    def __repr__(self) -> str:
        if self.kind == "empirical":
            count = 0 if self._values is None else len(self._values)
            return f"Distribution(<{count} values, mean {self.mean:.6g} s>)"
        args = ", ".join(f"{k}={v:.6g}" for k, v in self.params.items())
        return f"Distribution.{self.kind}({args})"


@dataclass(frozen=True)
class PipelineModel:
    """What the simulation needs to know about a pipeline.

    ``producer``: time to build one batch (one worker); ``consumer``: the
    training step's time per batch, from receiving a batch to asking for the
    next; ``workers``: batches built concurrently; ``batch_bytes``: bytes of one
    batch; ``ordered``: whether batches are delivered in submission order.

    The loader's rules (see :class:`queuetune.frameworks.LoaderRules`):
    ``assignment`` (``"shared"`` or ``"round_robin"``), ``release`` (a place
    under the bound frees at the ``"take"`` or at the ``"request"``) and
    ``transit``: seconds from a batch's end in its worker until a consumer can
    take it, beyond the hand-over already in the step (a worker process's pipe).
    ``handover``: the first part of each step, taking the batch from the loader
    (already in ``consumer``); with release at the take, the place frees when
    it is over (torch sends the next index after unpickling the batch).
    ``dispatch``: seconds from the moment a batch could start (a free place
    and an idle worker) until its build starts.

    >>> build, step = Distribution.constant(0.02), Distribution.constant(0.002)
    >>> m = PipelineModel(build, step, workers=4, batch_bytes=2**20)
    >>> m.workers, m.ordered, m.assignment, m.release, m.transit, m.handover, m.dispatch
    (4, True, 'shared', 'take', 0.0, 0.0, 0.0)
    """

    producer: Distribution
    consumer: Distribution
    workers: int
    batch_bytes: float
    ordered: bool = True
    assignment: str = "shared"
    release: str = "take"
    transit: float = 0.0
    handover: float = 0.0
    dispatch: float = 0.0

    def __post_init__(self) -> None:
        for name in ("producer", "consumer"):
            if not isinstance(getattr(self, name), Distribution):
                raise TypeError(f"{name} must be a Distribution, got {getattr(self, name)!r}")
        object.__setattr__(self, "workers", positive_int(self.workers, "workers"))
        object.__setattr__(self, "batch_bytes", _duration(self.batch_bytes, "batch_bytes", "bytes"))
        if not isinstance(self.ordered, (bool, np.bool_)):
            raise TypeError(f"ordered must be True or False, got {self.ordered!r}")
        if self.assignment not in ASSIGNMENTS:
            raise ValueError(f"assignment must be one of {', '.join(ASSIGNMENTS)}, got {self.assignment!r}")
        if self.release not in RELEASES:
            raise ValueError(f"release must be one of {', '.join(RELEASES)}, got {self.release!r}")
        object.__setattr__(self, "transit", _duration(self.transit, "transit"))
        object.__setattr__(self, "handover", _duration(self.handover, "handover"))
        object.__setattr__(self, "dispatch", _duration(self.dispatch, "dispatch"))
        if self.handover > self.consumer.minimum:
            raise ValueError(
                f"handover ({self.handover} s) is part of every step, so it cannot exceed the shortest "
                f"step ({self.consumer.minimum} s)"
            )

    @classmethod
    def from_trace(cls, trace: Trace, ordered: bool = True) -> PipelineModel:
        """The model of a recorded run.

        Producer times are ``end - start`` of the produced batches; consumer
        steps are the times from one batch's ``consumed`` to the next batch's
        ``requested`` in the same run, plus :func:`handover_time`; ``workers`` is
        ``meta.settings["workers"]`` (Keras) or ``["num_workers"]`` (torch)
        when recorded, else the number of distinct ``worker`` values, at least 1;
        ``batch_bytes`` is the median ``nbytes`` of the produced batches; the
        assignment and release rules are the recorded loader's
        (:func:`queuetune.frameworks.rules_of`), the transit :func:`transit_time`,
        the hand-over :func:`handover_time`, the dispatch :func:`dispatch_time`.

        >>> from queuetune.trace import Consumed, Produced
        >>> t = Trace(produced=[Produced(i, i + 0.5, 100, worker="w") for i in range(6)],
        ...           consumed=[Consumed(i + 0.5, i + 0.5) for i in range(6)])
        >>> m = PipelineModel.from_trace(t)
        >>> m.producer.mean, m.consumer.mean, m.workers, m.batch_bytes, m.transit
        (0.5, 1.0, 1, 100.0, 0.0)
        """
        produced = trace.produced
        if len(produced) < MIN_PRODUCED:
            raise ValueError(f"the trace has {len(produced)} produced batches; the model needs at least {MIN_PRODUCED}")
        rules = rules_of(trace.meta)
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
        return cls(
            producer=producer,
            consumer=consumer,
            workers=_trace_workers(trace),
            batch_bytes=float(np.median([p.nbytes for p in produced])),
            ordered=ordered,
            assignment=rules.assignment,
            release=rules.release,
            transit=_transit(overhead, delivered, rules.processes),
            handover=overhead,
            dispatch=dispatch_time(trace),
        )


def _handover_waits(trace: Trace) -> tuple[list[float], list[float]]:
    """For the consumed batches matched to a produced one: the waits of those
    already built when the consumer asked (``consumed - requested``), and for the
    others the time from their end in the worker to their hand-over."""
    from .analysis import match

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

    >>> from queuetune.trace import Consumed, Produced
    >>> t = Trace(produced=[Produced(0, 0.1, 1) for _ in range(4)],
    ...           consumed=[Consumed(r, r + 0.01) for r in (1.0, 2.0, 3.0, 4.0)])
    >>> round(handover_time(t), 6)
    0.01
    """
    return _mean_or_zero(_handover_waits(trace)[0])


def transit_time(trace: Trace) -> float:
    """Seconds from a batch's end in its worker until a waiting consumer can take
    it, beyond :func:`handover_time`: the mean over the batches the consumer
    waited for (at least 3), else, when batches come from worker processes, the
    hand-over time again (sending costs about what receiving does), else 0.

    >>> from queuetune.trace import Consumed, Produced
    >>> t = Trace(produced=[Produced(r - 0.5, r + 0.1, 1) for r in (1.0, 2.0, 3.0)],
    ...           consumed=[Consumed(r, r + 0.13) for r in (1.0, 2.0, 3.0)])
    >>> round(transit_time(t), 6)
    0.03
    """
    ready, delivered = _handover_waits(trace)
    return _transit(_mean_or_zero(ready), delivered, rules_of(trace.meta).processes)


def dispatch_time(trace: Trace) -> float:
    """Seconds from the moment a batch could start until its build started: the
    median, over the produced batches after the first of each worker, of the
    time from the latest event that can start a batch (a build's end, or the
    consumer freeing a place: its request or its hand-over, by the loader's
    rules) to the batch's start; 0 with fewer than 3
    such batches. The latest such event is at or after the one that really
    started the batch, so this errs low, never high.

    >>> from queuetune.trace import Consumed, Produced
    >>> t = Trace(produced=[Produced(i + 0.001, i + 0.5, 1, worker="w") for i in range(6)],
    ...           consumed=[Consumed(i + 0.6, i + 1.0) for i in range(6)])
    >>> round(dispatch_time(t), 6)
    0.001
    """
    produced = sorted(trace.produced, key=lambda p: p.start)
    at_request = rules_of(trace.meta).release == "request"
    frees = [c.requested if at_request else c.consumed for c in trace.consumed]
    triggers = np.sort(np.array([p.end for p in produced] + frees, dtype=float))
    skip = _trace_workers(trace)
    gaps = []
    for p in produced[skip:]:
        i = int(np.searchsorted(triggers, p.start, side="right"))
        if i:
            gaps.append(p.start - triggers[i - 1])
    return float(np.median(gaps)) if len(gaps) >= 3 else 0.0


def _trace_workers(trace: Trace) -> int:
    settings = trace.meta.settings
    if isinstance(settings, dict):
        for key in ("workers", "num_workers"):
            value = settings.get(key)
            if isinstance(value, numbers.Integral) and not isinstance(value, bool):
                return max(1, int(value))
    return max(1, len({p.worker for p in trace.produced}))


@dataclass
class Prediction:
    """What the simulation predicts for one depth and number of workers.

    Rates are per second of the consumer's wall time after the warm-up; means
    are over that same time; peaks are over the whole simulated run. See the
    module's docstring for *in flight*, *queued* and *built*.

    ``empty_fraction`` is the share of the consumer's requests that found no
    batch ready; ``mean_wait_seconds`` its mean wait per batch.

    >>> m = PipelineModel(Distribution.constant(0.01), Distribution.constant(0.02), 1, 10.0)
    >>> simulate(m, depth=1, batches=100).to_dict()["peak_in_flight_bytes"]
    20.0
    """

    depth: int
    workers: int
    throughput: float
    input_wait_fraction: float
    mean_in_flight_batches: float
    peak_in_flight_batches: int
    mean_in_flight_bytes: float
    peak_in_flight_bytes: float
    mean_queued_batches: float
    peak_queued_batches: int
    mean_built_batches: float
    peak_built_batches: int
    empty_fraction: float
    mean_wait_seconds: float
    batches: int
    ordered: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


@dataclass
class _Run:
    wall: float
    counted: int
    waits: list[float]
    empty: list[bool]
    area_in_flight: float
    area_queued: float
    area_built: float
    peak_in_flight: int
    peak_queued: int
    peak_built: int


def _draw(dist: Distribution, rng: np.random.Generator, count: int) -> list[float]:
    blocks = -(-count // _BLOCK)
    return np.concatenate([dist.sample(rng, _BLOCK) for _ in range(blocks)])[:count].tolist()


def _run(
    producer: list[float],
    consumer: list[float],
    depth: int,
    workers: int,
    warmup: int,
    model: PipelineModel,
) -> _Run:
    """The event loop. Finishing builds and arriving batches are processed before
    a consumer request at the same instant, so a batch there exactly when asked
    for is taken without waiting."""
    n = len(consumer)
    round_robin = model.assignment == "round_robin"
    at_request = model.release == "request"
    transit = model.transit
    dispatch = model.dispatch
    delay = 0.0 if at_request else model.handover
    ordered = bool(model.ordered)
    heap: list[tuple[float, int, int]] = []  # (time, event, batch): _BUILT, _ARRIVED or _RELEASED
    done = bytearray(len(producer))
    ready: deque[int] = deque()
    # Submitted batches not yet started: one line per worker (round-robin) or one shared line.
    lines: list[deque[int]] = [deque() for _ in range(workers if round_robin else 1)]
    idle = [True] * workers
    submitted, building, moving, queued, held = 0, 0, 0, 0, 0
    taken = freed = 0
    asked_at = 0.0
    request = 0.0
    waiting = False
    measuring = warmup == 0
    start = last = 0.0
    areas = [0.0, 0.0, 0.0]
    peaks = [0, 0, 0]
    waits: list[float] = []
    empty: list[bool] = []

    def advance(t: float) -> None:
        nonlocal last
        if measuring:
            span = t - last
            areas[0] += (building + moving + queued + held) * span
            areas[1] += queued * span
            areas[2] += (moving + queued + held) * span
        last = t

    def begin(t: float, batch: int, worker: int) -> None:
        nonlocal building
        idle[worker] = False
        heapq.heappush(heap, (t + dispatch + producer[batch], _BUILT, batch * workers + worker))
        building += 1

    def fill(t: float) -> None:
        nonlocal submitted
        # Places under the bound: batches submitted and not freed (taken, or with a
        # hand-over, taken and unpacked); with release at the request, the one the
        # consumer waits for has already left the queue.
        limit = min(len(producer), freed + depth + (1 if waiting and at_request else 0))
        while submitted < limit:
            lines[submitted % len(lines)].append(submitted)
            submitted += 1
        if round_robin:
            for worker, line in enumerate(lines):
                if idle[worker] and line:
                    begin(t, line.popleft(), worker)
        else:
            line = lines[0]
            for worker in range(workers):
                if not line:
                    break
                if idle[worker]:
                    begin(t, line.popleft(), worker)
        peaks[0] = max(peaks[0], building + moving + queued + held)

    def take(t: float) -> None:
        nonlocal queued, held, taken, freed, request
        queued -= 1
        held = 1
        if taken >= warmup:
            waits.append(t - asked_at)
        taken += 1
        request = t + consumer[taken - 1]
        if delay > 0:
            heapq.heappush(heap, (t + delay, _RELEASED, 0))
        else:
            freed += 1
            fill(t)

    fill(0.0)
    while True:
        if waiting or (heap and heap[0][0] <= request):
            t, event, code = heapq.heappop(heap)
            advance(t)
            if event == _RELEASED:
                freed += 1
                fill(t)
                continue
            if event == _BUILT:
                index, worker = divmod(code, workers)
                building -= 1
                idle[worker] = True
                if transit > 0:
                    moving += 1
                    heapq.heappush(heap, (t + transit, _ARRIVED, index))
                    fill(t)
                    continue
            else:
                index = code
                moving -= 1
            queued += 1
            peaks[1] = max(peaks[1], queued)
            peaks[2] = max(peaks[2], moving + queued + held)
            if ordered:
                done[index] = 1
                if waiting and index == taken:
                    waiting = False
                    take(t)
            elif waiting:
                waiting = False
                take(t)
            else:
                ready.append(index)
            fill(t)
            continue
        t = request
        if taken == warmup and not measuring:
            measuring = True
            start = last = t
        advance(t)
        held = 0
        if taken == n:
            break
        asked_at = t
        available = done[taken] if ordered else bool(ready)
        if taken >= warmup:
            empty.append(not available)
        if available:
            if not ordered:
                ready.popleft()
            take(t)
        else:
            waiting = True
            if at_request:
                fill(t)
    return _Run(
        wall=last - start,
        counted=n - warmup,
        waits=waits,
        empty=empty,
        area_in_flight=areas[0],
        area_queued=areas[1],
        area_built=areas[2],
        peak_in_flight=peaks[0],
        peak_queued=peaks[1],
        peak_built=peaks[2],
    )


def _simulate(
    model: PipelineModel, depth: int, workers: int | None, batches: int, seed: int | None
) -> tuple[Prediction, _Run]:
    depth = nonnegative_int(depth, "depth")
    workers = model.workers if workers is None else positive_int(workers, "workers")
    batches = positive_int(batches, "batches")
    if batches < 10:
        raise ValueError(f"batches must be at least 10, got {batches}")
    if seed is not None:
        seed = nonnegative_int(seed, "seed")
    producer_seq, consumer_seq = np.random.SeedSequence(seed).spawn(2)
    if depth == 0:
        return _synchronous(model, batches, producer_seq, consumer_seq)
    # At most depth batches are submitted and not taken (one more while the consumer
    # waits, with release at request), so the run never starts more than this.
    producer = _draw(model.producer, np.random.default_rng(producer_seq), batches + depth + 2)
    consumer = _draw(model.consumer, np.random.default_rng(consumer_seq), batches)
    run = _run(producer, consumer, depth, workers, int(batches * WARMUP), model)
    wall, counted = run.wall, run.counted
    wait = float(sum(run.waits))
    per_second = (lambda area: area / wall) if wall > 0 else (lambda area: 0.0)
    prediction = Prediction(
        depth=depth,
        workers=workers,
        throughput=counted / wall if wall > 0 else math.inf,
        input_wait_fraction=min(1.0, wait / wall) if wall > 0 else 0.0,
        mean_in_flight_batches=per_second(run.area_in_flight),
        peak_in_flight_batches=run.peak_in_flight,
        mean_in_flight_bytes=per_second(run.area_in_flight) * model.batch_bytes,
        peak_in_flight_bytes=run.peak_in_flight * model.batch_bytes,
        mean_queued_batches=per_second(run.area_queued),
        peak_queued_batches=run.peak_queued,
        mean_built_batches=per_second(run.area_built),
        peak_built_batches=run.peak_built,
        empty_fraction=sum(run.empty) / counted,
        mean_wait_seconds=wait / counted,
        batches=batches,
        ordered=bool(model.ordered),
    )
    return prediction, run


def _synchronous(
    model: PipelineModel,
    batches: int,
    producer_seq: np.random.SeedSequence,
    consumer_seq: np.random.SeedSequence,
) -> tuple[Prediction, _Run]:
    """Depth 0: no read-ahead; the consumer builds each batch when it asks for it,
    so every step waits a whole build and one batch is held at a time."""
    producer = _draw(model.producer, np.random.default_rng(producer_seq), batches)
    consumer = _draw(model.consumer, np.random.default_rng(consumer_seq), batches)
    start = int(batches * WARMUP)
    wait = float(sum(producer[start:]))
    wall = wait + float(sum(consumer[start:]))
    counted = batches - start
    prediction = Prediction(
        depth=0,
        workers=1,
        throughput=counted / wall if wall > 0 else math.inf,
        input_wait_fraction=wait / wall if wall > 0 else 0.0,
        mean_in_flight_batches=1.0,
        peak_in_flight_batches=1,
        mean_in_flight_bytes=model.batch_bytes,
        peak_in_flight_bytes=model.batch_bytes,
        mean_queued_batches=0.0,
        peak_queued_batches=0,
        mean_built_batches=1.0,
        peak_built_batches=1,
        empty_fraction=1.0,
        mean_wait_seconds=wait / counted,
        batches=batches,
        ordered=bool(model.ordered),
    )
    run = _Run(wall, counted, [], [], wall, 0.0, wall, 1, 0, 1)
    return prediction, run


def simulate(
    model: PipelineModel,
    depth: int,
    workers: int | None = None,
    batches: int = 2000,
    seed: int | None = 0,
) -> Prediction:
    """Simulate ``batches`` consumer steps at one depth (``workers`` defaults to the model's).

    Depth 0 is a loader with no read-ahead (Keras ``workers=1``, torch
    ``num_workers=0``): the consumer builds each batch itself.

    The first 5 % of the batches are a warm-up left out of the rates and means.
    The same seed gives every batch the same build and step times at any depth
    and number of workers, so curves are compared on the same draws.

    >>> m = PipelineModel(Distribution.constant(0.02), Distribution.constant(0.002), 4, 1.0)
    >>> [round(simulate(m, d).throughput, 3) for d in (1, 2, 4, 8)]
    [50.0, 100.0, 200.0, 200.0]
    """
    return _simulate(model, depth, workers, batches, seed)[0]


def predict_curve(
    model: PipelineModel,
    depths: Iterable[int] = range(1, 33),
    workers: int | Sequence[int] | None = None,
    batches: int = 2000,
    seed: int | None = 0,
) -> list[Prediction]:
    """:func:`simulate` for every depth (and every number of workers, when a list
    is given), ordered by workers then depth.

    >>> m = PipelineModel(Distribution.constant(0.02), Distribution.constant(0.002), 4, 1.0)
    >>> [(p.workers, p.depth) for p in predict_curve(m, depths=[1, 2], workers=[1, 2])]
    [(1, 1), (1, 2), (2, 1), (2, 2)]
    """
    if isinstance(depths, (str, bytes)) or not isinstance(depths, Iterable):
        raise TypeError(f"depths must be an iterable of positive integers, got {depths!r}")
    depth_list = [nonnegative_int(d, "depth") for d in depths]
    if workers is None:
        worker_list = [model.workers]
    elif isinstance(workers, Iterable) and not isinstance(workers, (str, bytes)):
        worker_list = [positive_int(w, "workers") for w in workers]
    else:
        worker_list = [positive_int(workers, "workers")]
    return [simulate(model, d, w, batches, seed) for w in worker_list for d in depth_list]


def tfdata_empty_probability(x: float, y: float, n: int) -> float:
    """tf.data's chance that the consumer finds its buffer empty:
    ``p = (1 - x/y) / (1 - (x/y)**(n + 1))``, ``1/(n + 1)`` when ``x == y``.

    ``x`` is the consumer's mean time per element, ``y`` the producer's, ``n``
    the buffer size. It applies to one producer and one consumer, independent
    and exponentially distributed (memoryless) times, a buffer that bounds the
    elements being built plus built and not yet taken to ``n`` (this module's
    ``depth``, with ``workers=1``), in steady state. There, ``p`` is exactly the
    share of the consumer's requests that find no element ready
    (:attr:`Prediction.empty_fraction`); the expected wait per request is
    ``p * y`` (:func:`tfdata_expected_wait`), because the build in progress still
    has an exponential time left. It is not the input-wait fraction of time,
    and it does not hold for several workers, constant or heavy-tailed times.

    >>> tfdata_empty_probability(1.0, 1.0, 3)
    0.25
    >>> round(tfdata_empty_probability(0.5, 1.0, 1), 4)
    0.6667
    """
    x = _duration(x, "x (consumer time)")
    y = _duration(y, "y (producer time)")
    n = nonnegative_int(n, "n (buffer size)")
    if y == 0:
        raise ValueError("y (producer time) must be positive")
    if x == 0:
        return 1.0
    ratio = x / y
    if ratio == 1:
        return 1.0 / (n + 1)
    if ratio > 1:
        # The same value written in 1/ratio, which cannot overflow.
        s = 1.0 / ratio
        return s**n * (1 - s) / -math.expm1((n + 1) * math.log(s))
    return (1 - ratio) / -math.expm1((n + 1) * math.log(ratio))


def tfdata_expected_wait(x: float, y: float, n: int) -> float:
    """tf.data's expected consumer wait per element, ``p * y`` (see
    :func:`tfdata_empty_probability` for when it applies).

    >>> tfdata_expected_wait(1.0, 1.0, 3)
    0.25
    """
    return tfdata_empty_probability(x, y, n) * _duration(y, "y (producer time)")


def compare_with_closed_form(
    x: float, y: float, n: int, batches: int = 20_000, seed: int | None = 0, groups: int = 20
) -> dict[str, float]:
    """Simulate one producer and one consumer with exponential times (means
    ``y`` and ``x``) at depth ``n`` and set the result beside tf.data's formulas.

    ``*_stderr`` are batch-means standard errors of the simulated values: the
    counted requests are cut into ``groups`` consecutive groups, whose means are
    close to independent when each group is much longer than the queue's memory.

    >>> c = compare_with_closed_form(1.0, 1.0, 2, batches=4000)
    >>> abs(c["simulated_empty"] - c["closed_form_empty"]) < 4 * c["empty_stderr"]
    True
    """
    model = PipelineModel(Distribution.exponential(y), Distribution.exponential(x), 1, 0.0)
    depth = positive_int(n, "n (buffer size)")
    groups = positive_int(groups, "groups")
    prediction, run = _simulate(model, depth, 1, batches, seed)
    if groups < 2 or len(run.empty) < 2 * groups:
        raise ValueError(f"{len(run.empty)} counted requests cannot be cut into {groups} groups")
    empty = np.array_split(np.asarray(run.empty, dtype=float), groups)
    waits = np.array_split(np.asarray(run.waits, dtype=float), groups)

    def stderr(parts: list[np.ndarray]) -> float:
        return float(np.std([part.mean() for part in parts], ddof=1) / math.sqrt(groups))

    return {
        "closed_form_empty": tfdata_empty_probability(x, y, depth),
        "simulated_empty": prediction.empty_fraction,
        "empty_stderr": stderr(empty),
        "closed_form_wait": tfdata_expected_wait(x, y, depth),
        "simulated_wait": prediction.mean_wait_seconds,
        "wait_stderr": stderr(waits),
        "requests": float(len(run.empty)),
    }
