"""The discrete-event simulation of a bounded queue between workers and one consumer, and its predictions per depth."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..common.units import nonnegative_int, positive_int
from .distribution import Distribution
from .pipeline import PipelineModel

__all__ = ["Prediction", "predict_curve", "simulate"]

#: Share of the simulated batches left out of the statistics while the queue fills.
WARMUP = 0.05
# Durations are drawn in blocks of this size, so that batch i gets the same time
# however many batches a run needs (simulations at different depths share them).
_BLOCK = 1024
_BUILT, _ARRIVED, _RELEASED = 0, 1, 2


@dataclass
class Prediction:
    """What the simulation predicts for one depth and number of workers.

    Rates are per second of the consumer's wall time after the warm-up; means
    are over that same time; peaks are over the whole simulated run. See
    :func:`simulate` for *in flight*, *queued* and *built*.

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
    draws: list[float]
    if dist.kind in ("empirical", "replay"):  # passes over the values in turn: the same first ones for any count
        draws = dist.sample(rng, count).tolist()
        return draws
    blocks = -(-count // _BLOCK)
    draws = np.concatenate([dist.sample(rng, _BLOCK) for _ in range(blocks)])[:count].tolist()
    return draws


class _Simulation:
    """One run: ``workers`` build the batches (``producer[i]`` seconds for batch
    ``i``) and one consumer takes them, steps ``consumer[i]`` seconds on batch
    ``i``, then asks for the next.

    The rules:

    - Batches are numbered in the order they are submitted. A batch is
      submitted while fewer than ``depth`` batches are submitted and their
      places not freed (see release below). This is Keras's bound
      (``max_queue_size + 1`` futures started or finished and not taken),
      torch's (``prefetch_factor × num_workers`` indices sent to workers and
      not handed over) and a tf.data prefetch buffer's.
    - Assignment ``"shared"``: any free worker starts the next submitted batch
      (as Keras's executor does); ``"round_robin"``: batch ``i`` waits for
      worker ``i mod workers`` (as torch's DataLoader assigns indices).
    - Dispatch: a batch starts ``dispatch`` seconds after it could (its place
      under the bound free and a worker idle): the worker's wake-up, a pool
      picking up the task, an index crossing a pipe. The worker is taken from
      that moment.
    - Transit: a batch built at ``t`` can be taken at ``t + transit`` (a worker
      process's pipe; 0 for threads).
    - Delivery: the consumer asks for a batch, takes it as soon as it is there
      (with ``ordered`` the next in submission order, even when a later one is
      done, as Keras's OrderedEnqueuer and torch's DataLoader deliver; without,
      the earliest finished), holds it for one step, then asks for the next.
      Asking for the next batch *releases* the one it held.
    - Release ``"take"``: taking a batch frees its place under the bound once
      the ``handover`` is over (torch sends the next index after receiving and
      unpickling a batch), so even depth 1 overlaps the build of the next batch
      with the consumer's step. ``"request"``: the place frees when the
      consumer asks (Keras's feeder submits the next batch as soon as the
      consumer removes the head of its queue), so while the consumer waits one
      more batch can be submitted.

    Finishing builds and arriving batches are processed before a consumer
    request at the same instant, so a batch there exactly when asked for is
    taken without waiting. The first ``warmup`` batches are left out of the
    waits, the empty requests and the areas (batch-seconds in flight, queued
    and built); the peaks are over the whole run.
    """

    def __init__(
        self,
        producer: list[float],
        consumer: list[float],
        depth: int,
        workers: int,
        warmup: int,
        model: PipelineModel,
    ) -> None:
        self.producer = producer
        self.consumer = consumer
        self.depth = depth
        self.workers = workers
        self.warmup = warmup
        self.round_robin = model.assignment == "round_robin"
        self.at_request = model.release == "request"
        self.transit = model.transit
        self.dispatch = model.dispatch
        self.delay = 0.0 if self.at_request else model.handover
        self.ordered = bool(model.ordered)
        # (time, event, code): _BUILT with batch * workers + worker, _ARRIVED with the batch, _RELEASED with 0.
        self.events: list[tuple[float, int, int]] = []
        self.done = bytearray(len(producer))  # ordered: 1 for each batch that has reached the queue
        self.ready: deque[int] = deque()  # not ordered: the batches queued, in arrival order
        # Submitted batches not yet started: one line per worker (round-robin) or one shared line.
        self.lines: list[deque[int]] = [deque() for _ in range(workers if self.round_robin else 1)]
        self.idle = [True] * workers
        self.submitted = self.building = self.moving = self.queued = self.held = 0
        self.taken = self.freed = 0
        self.asked_at = 0.0
        self.request = 0.0  # when the consumer next asks
        self.waiting = False
        self.measuring = warmup == 0
        self.start = self.last = 0.0
        self.area_in_flight = self.area_queued = self.area_built = 0.0
        self.peak_in_flight = self.peak_queued = self.peak_built = 0
        self.waits: list[float] = []
        self.empty: list[bool] = []

    def run(self) -> _Run:
        self.fill(0.0)
        while True:
            if self.waiting or (self.events and self.events[0][0] <= self.request):
                t, event, code = heapq.heappop(self.events)
                self.advance(t)
                if event == _RELEASED:
                    self.freed += 1
                    self.fill(t)
                elif event == _BUILT:
                    self.built(t, code)
                else:
                    self.moving -= 1
                    self.arrive(t, code)
            elif not self.ask(self.request):
                break
        return _Run(
            wall=self.last - self.start,
            counted=len(self.consumer) - self.warmup,
            waits=self.waits,
            empty=self.empty,
            area_in_flight=self.area_in_flight,
            area_queued=self.area_queued,
            area_built=self.area_built,
            peak_in_flight=self.peak_in_flight,
            peak_queued=self.peak_queued,
            peak_built=self.peak_built,
        )

    def advance(self, t: float) -> None:
        """Add the time since the last event to the areas, once the warm-up is over."""
        if self.measuring:
            span = t - self.last
            self.area_in_flight += (self.building + self.moving + self.queued + self.held) * span
            self.area_queued += self.queued * span
            self.area_built += (self.moving + self.queued + self.held) * span
        self.last = t

    def begin(self, t: float, batch: int, worker: int) -> None:
        """``worker`` starts building ``batch`` (after the dispatch)."""
        self.idle[worker] = False
        heapq.heappush(self.events, (t + self.dispatch + self.producer[batch], _BUILT, batch * self.workers + worker))
        self.building += 1

    def fill(self, t: float) -> None:
        """Submit batches up to the bound and start those an idle worker can take."""
        # Places under the bound: batches submitted and not freed (taken, or with a
        # hand-over, taken and unpacked); with release at the request, the one the
        # consumer waits for has already left the queue.
        extra = 1 if self.waiting and self.at_request else 0
        limit = min(len(self.producer), self.freed + self.depth + extra)
        lines = self.lines
        while self.submitted < limit:
            lines[self.submitted % len(lines)].append(self.submitted)
            self.submitted += 1
        if self.round_robin:
            for worker, line in enumerate(lines):
                if self.idle[worker] and line:
                    self.begin(t, line.popleft(), worker)
        else:
            line = lines[0]
            for worker in range(self.workers):
                if not line:
                    break
                if self.idle[worker]:
                    self.begin(t, line.popleft(), worker)
        self.peak_in_flight = max(self.peak_in_flight, self.building + self.moving + self.queued + self.held)

    def built(self, t: float, code: int) -> None:
        """A build ends: its worker is free and the batch sets off (through the pipe, or straight to the queue)."""
        index, worker = divmod(code, self.workers)
        self.building -= 1
        self.idle[worker] = True
        if self.transit > 0:
            self.moving += 1
            heapq.heappush(self.events, (t + self.transit, _ARRIVED, index))
            self.fill(t)
        else:
            self.arrive(t, index)

    def arrive(self, t: float, index: int) -> None:
        """Batch ``index`` joins the queue; a consumer waiting for it takes it."""
        self.queued += 1
        self.peak_queued = max(self.peak_queued, self.queued)
        self.peak_built = max(self.peak_built, self.moving + self.queued + self.held)
        if self.ordered:
            self.done[index] = 1
            if self.waiting and index == self.taken:
                self.waiting = False
                self.take(t)
        elif self.waiting:
            self.waiting = False
            self.take(t)
        else:
            self.ready.append(index)
        self.fill(t)

    def ask(self, t: float) -> bool:
        """The consumer releases the batch it held and asks for the next: False when it has had them all."""
        if self.taken == self.warmup and not self.measuring:
            self.measuring = True
            self.start = self.last = t
        self.advance(t)
        self.held = 0
        if self.taken == len(self.consumer):
            return False
        self.asked_at = t
        available = self.done[self.taken] if self.ordered else bool(self.ready)
        if self.taken >= self.warmup:
            self.empty.append(not available)
        if available:
            if not self.ordered:
                self.ready.popleft()
            self.take(t)
        else:
            self.waiting = True
            if self.at_request:
                self.fill(t)
        return True

    def take(self, t: float) -> None:
        """The consumer takes the batch it asked for and steps on it; its place frees now or after the hand-over."""
        self.queued -= 1
        self.held = 1
        if self.taken >= self.warmup:
            self.waits.append(t - self.asked_at)
        self.taken += 1
        self.request = t + self.consumer[self.taken - 1]
        if self.delay > 0:
            heapq.heappush(self.events, (t + self.delay, _RELEASED, 0))
        else:
            self.freed += 1
            self.fill(t)


def _simulate(
    model: PipelineModel,
    depth: int,
    workers: int | None,
    batches: int,
    seed: int | None,
    warmup: int | None = None,
) -> tuple[Prediction, _Run]:
    depth = nonnegative_int(depth, "depth")
    workers = model.workers if workers is None else positive_int(workers, "workers")
    batches = positive_int(batches, "batches")
    if batches < 10:
        raise ValueError(f"batches must be at least 10, got {batches}")
    if seed is not None:
        seed = nonnegative_int(seed, "seed")
    if warmup is None:
        warmup = int(batches * WARMUP)
    else:
        warmup = nonnegative_int(warmup, "warmup")
        if warmup > batches // 2:
            raise ValueError(f"warmup must leave at least half of the {batches} batches, got {warmup}")
    producer_seq, consumer_seq = np.random.SeedSequence(seed).spawn(2)
    if depth == 0:
        return _synchronous(model, batches, producer_seq, consumer_seq, warmup)
    # At most depth batches are submitted and not taken (one more while the consumer
    # waits, with release at request), so the run never starts more than this.
    producer = _draw(model.producer, np.random.default_rng(producer_seq), batches + depth + 2)
    consumer = _draw(model.consumer, np.random.default_rng(consumer_seq), batches)
    run = _Simulation(producer, consumer, depth, workers, warmup, model).run()
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
    start: int,
) -> tuple[Prediction, _Run]:
    """Depth 0: no read-ahead; the consumer builds each batch when it asks for it,
    so every step waits a whole build and one batch is held at a time."""
    producer = _draw(model.producer, np.random.default_rng(producer_seq), batches)
    consumer = _draw(model.consumer, np.random.default_rng(consumer_seq), batches)
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
    warmup: int | None = None,
) -> Prediction:
    """Simulate ``batches`` consumer steps at one depth (``workers`` defaults to the model's).

    The pipeline is ``workers`` producers building batches into a queue bounded
    by ``depth`` and one consumer (the training step) taking them one at a
    time, by the model's rules (see :class:`PipelineModel`). The prediction
    counts, all over time:

    - **in flight**: batches started (being built, built or in transit) and
      not yet released by the consumer (it releases one when it asks for the
      next). It never exceeds ``depth + 1`` (the bound plus the batch the
      consumer holds).
    - **queued**: built and not yet taken, at most ``depth`` (``depth + 1``
      with release at the request).
    - **built**: built and not yet released (in transit, queued or held); this
      is what :func:`queuetune.analysis.report.analyze` measures as
      ``peak_in_flight_batches`` from a trace, where a batch counts from the
      end of its build.

    Depth 0 is a loader with no read-ahead (Keras ``workers=1``, torch
    ``num_workers=0``): the consumer builds each batch itself.

    The first ``warmup`` batches (by default 5 % of them; at most half) are
    left out of the rates and means. The same seed gives every batch the same
    build and step times at any depth and number of workers, so curves are
    compared on the same draws. To model one measured run as it was, give its
    build times in their order (:meth:`Distribution.replay`), its length and
    its warm-up: with round-robin assignment, batch ``i`` then goes to the
    same worker as in the run.

    >>> model = PipelineModel(Distribution.constant(0.010), Distribution.constant(0.020), 1, 1e6)
    >>> p = simulate(model, depth=2, batches=200)
    >>> round(p.throughput, 6), p.input_wait_fraction, p.peak_in_flight_batches
    (50.0, 0.0, 3)
    >>> m = PipelineModel(Distribution.constant(0.02), Distribution.constant(0.002), 4, 1.0)
    >>> [round(simulate(m, d).throughput, 3) for d in (1, 2, 4, 8)]
    [50.0, 100.0, 200.0, 200.0]
    >>> run = PipelineModel(Distribution.replay([0.1] * 5 + [0.01] * 15), Distribution.constant(0.02), 1, 1.0)
    >>> [round(simulate(run, 1, batches=20, warmup=w).throughput, 3) for w in (10, None)]
    [50.0, 27.143]
    """
    return _simulate(model, depth, workers, batches, seed, warmup)[0]


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
