"""queuetune.Prefetcher against Keras, PyTorch, tf.data, torchdata.nodes and SPDL on seven synthetic workloads.

Run: KERAS_BACKEND=torch .venv/bin/python benchmarks/prefetcher.py
         [--rounds 3] [--scale 1.0] [--workers 4] [--only NAME ...] [--json] [--out benchmarks/results]

What is measured, and how (all loaders in one process, run interleaved:
prefetcher, keras, torch, tf.data, torchdata.nodes, spdl, prefetcher, keras, ...
for ``--rounds`` rounds of each workload):

- The data: a map-style dataset ``Batches`` whose item ``i`` is a tuple
  ``(x, y)``: ``x`` a float32 array 512x1024 (2 MiB) made as ``template + i``
  (a numpy pass over 2 MiB, ~0.5 ms of CPU), ``y`` an int64 label a row, built
  after a ``time.sleep`` of the workload's load time (and, for the jittery
  workload, of a stall for the batch indices a seeded draw marks). The class
  is written here rather than reused from tune_workloads.py so that one class
  serves all four loaders with the same per-batch cost.
- The consumer: a step function that sleeps the workload's step time
  (``time.sleep``; it releases the GIL like a compiled training step). The
  pause workload sleeps 2 s more once, at the middle step.
- Workers: ``--workers N`` (default 4) is the worker count of every loader
  that has one, the same for all: the Prefetcher's ``workers=``, Keras's
  ``PyDataset(workers=)``, DataLoader's ``num_workers=``, torchdata.nodes'
  ``ParallelMapper(num_workers=)`` and SPDL's ``concurrency=`` (and its
  ``num_threads=``). tf.data has none: it stays at ``AUTOTUNE``, whatever N.
  The cpu-bound workload (process mode, a pure-Python load that holds a core)
  runs its loaders with ``min(N, 2)`` worker processes: 2 at the default, as
  before, and never more processes than the 2-core hosts these runs are made on.
  With N other than 4, ``--out`` writes ``prefetcher.workers-N.json`` and
  ``.txt`` (``prefetcher.json`` stays the 4-worker run); the JSON's
  ``settings`` and the table's header give N.
- The loaders (N: ``--workers``):
  * prefetcher: ``queuetune.Prefetcher(Batches, max_bytes=16 batches,
    workers=N, mode="thread")`` (adaptive depth), consumed by a ``for`` loop
    calling the step; measured by its own ``.report()``/``.trace()``.
  * keras: the same batches as a ``keras.utils.PyDataset(workers=N,
    max_queue_size=10)`` (threads), watched with ``queuetune.watch`` and read
    by ``model.fit(steps_per_epoch=N, epochs=1)`` on a tiny Keras model (one
    Dense layer, never run) whose ``train_step`` is overridden to sleep the
    step time and return no metrics; consumption recorded by
    ``probe_of(ds).keras_callback()``. So Keras's own enqueuer and its
    fit loop are in the path; the model costs the same sleep.
  * torch: ``DataLoader(Batches, batch_size=None, num_workers=N,
    prefetch_factor=2)`` (worker processes, forked), watched with
    ``queuetune.watch``, consumed by a ``for`` loop calling the step.
  * tf.data: ``Dataset.range(n).map(tf.numpy_function(load), num_parallel_calls
    =AUTOTUNE).prefetch(AUTOTUNE)`` (no worker count: AUTOTUNE at any N),
    consumed by a ``for`` loop calling the step and counted in the load
    function, like torchdata.nodes and SPDL (TensorFlow's own buffers are not
    visible to the probe; the count of batches started and not yet released is).
  * torchdata.nodes: ``ParallelMapper(num_workers=N, in_order=True)`` ->
    ``Prefetcher(prefetch_factor=2)`` -> ``Loader`` (threads; processes on
    the cpu-bound workload). It holds up to 2 x N batches in its mapper and 2
    in its prefetcher: 11 started with the one in the step at N = 4.
  * spdl: ``pipe(load, concurrency=N, output_order="input")`` ->
    ``add_sink(3)``, built with ``num_threads=N`` (a process pool of N on the
    cpu-bound workload).
- Per run: throughput after the first ``warmup`` consumed batches (batches
  per second the consumer took, including the pause for the pause workload),
  "peak started": the most batches (and bytes) started, being built or built,
  and not yet released by the consumer, from the trace (``Produced.start`` to
  the consumer's next request, batches matched with
  ``queuetune.analysis.report.match``); "peak built": the probe's peak of batches
  built and not yet released, and its time mean; peak resident
  memory of the process plus its worker processes, and its rise within the
  run (peak minus the first sample: the process carries the earlier runs'
  allocations; a rise far above the peak in-flight bytes means batches
  outlive their release).
  Per workload: the median throughput over rounds and the highest peaks
  (and highest mean in flight). "step ms": the mean time the consumer's step
  (a sleep) took after the warm-up, median over rounds, where the steps are
  all the same: a sleep takes longer than asked when a build's CPU work lands
  as it ends, which bounds the throughput (see ``ideal_in_order.py``).
- Targets (from the issue), per workload: the prefetcher's throughput >=
  0.99 x the best of the others; its peak started bytes <= the smallest
  such peak among the others that reach >= 0.98 x that best ("n/a" when no
  other loader with an observable peak reaches it), and its peak started batches at
  most one above the issue's physical minimum: the batches the needed workers
  are building plus the one being consumed, needed workers = ceil(mean load /
  step) capped at the N workers (the workload's; ``min(N, 2)`` for
  cpu-bound); for the pause workload, its peak started
  bytes within ``max_bytes`` plus the batch in the step, and its peak started
  batches within the deepest depth it reached plus that batch.
- The in-order ceiling, on the jittery workload (stalls): the batches/s an
  ideal in-order loader held to the prefetcher's budget (depth 16) reads at
  the best other loader's measured step, simulated as ``ideal_in_order.py``
  does, and its ratio to that loader: where it is below the target, no
  in-order loader within the budget meets it (the best other held more).
- Extra rows: on the jittery workload, the prefetcher with ``ordered=False``,
  with a budget of 40 batches, and "at nodes' bytes": a budget of 2 x N + 2
  batches, what torchdata.nodes holds besides the batch in the step (read at
  2, 4 and 8 workers: 6, 10 and 18), so the prefetcher's throughput at
  nodes' bytes; on the bursty workload, the budget at nodes' bytes; checked
  against the same targets, shown apart from the default.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "torch")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

import queuetune
from common import Counted, ceiling, machine, publish, stop_nodes
from queuetune.record.matching import match
from queuetune.tune import throughput

ROWS, COLS = 512, 1024
BUDGET_BATCHES = 16
LENGTH = 100_000
# The prefetcher's throughput target, and the share of the best that makes a loader count as keeping it.
TARGET = 0.99
TOLERANCE = 0.98
# What a build takes besides its sleep, as the in-order ceiling simulates it: the numpy
# pass over the 2 MiB batch and its allocation.
NUMPY_PASS_S = 0.0008
PAUSE = 2.0
# The default worker count of every loader (--workers), and the most worker processes
# of the cpu-bound workload, whose pure-Python load holds a core (the hosts have 2).
WORKERS = 4
CPU_BOUND_WORKERS = 2
NODES, SPDL = "torchdata.nodes", "spdl"
NODES_PROCESS, SPDL_PROCESS = "torchdata.nodes process", "spdl process"
LOADERS = ("prefetcher", "keras", "torch", "tf.data", NODES, SPDL)
PROCESS_LOADERS = ("prefetcher", "torch", NODES_PROCESS, SPDL_PROCESS)
# Variants of the prefetcher shown as extra rows on the workloads that list them.
UNORDERED = "prefetcher ordered=False"
DEEP_BUDGET_BATCHES = 40
DEEP = f"prefetcher max_bytes={DEEP_BUDGET_BATCHES} b"
# A budget of as many batches as torchdata.nodes holds built or being built (its peak
# started, less the batch in the step: 2 per worker and 2 more, as read at 2, 4 and 8
# workers): the prefetcher's throughput at nodes' bytes.
LEAN = "prefetcher at nodes' bytes"


def lean_budget_batches(workers: int) -> int:
    """The batches torchdata.nodes holds built or being built with ``workers`` workers.

    >>> [lean_budget_batches(n) for n in (2, 4, 8)]
    [6, 10, 18]
    """
    return 2 * workers + 2


MiB = 1024 * 1024


class Workload:
    def __init__(
        self,
        name: str,
        load: float,
        step: float,
        steps: int,
        warmup: int,
        stall: float = 0.0,
        p: float = 0.0,
        pause: float = 0.0,
        extras: tuple[str, ...] = (),
        rows: int = ROWS,
        burst: tuple[int, int, float] | None = None,
        cpu: int = 0,
        mode: str = "thread",
        workers: int = WORKERS,
    ) -> None:
        self.name, self.load, self.step, self.steps, self.warmup = name, load, step, steps, warmup
        self.stall, self.p, self.pause, self.extras = stall, p, pause, extras
        # rows of the batch's array; bursts: (fast steps, slow steps, slow step seconds);
        # cpu: iterations of a pure-Python loop instead of the sleep; mode and workers of the loaders.
        self.rows, self.burst, self.cpu, self.mode, self.workers = rows, burst, cpu, mode, workers
        self.loaders = PROCESS_LOADERS if mode == "process" else LOADERS

    @property
    def batch_bytes(self) -> int:
        return self.rows * (COLS * 4 + 8)  # float32 rows and an int64 label each

    @property
    def max_bytes(self) -> int:
        return BUDGET_BATCHES * self.batch_bytes

    def step_at(self, count: int) -> float:
        """The consumer's step time at its ``count``-th step (from 1)."""
        if self.burst is None:
            return self.step
        fast, slow, seconds = self.burst
        return self.step if (count - 1) % (fast + slow) < fast else seconds

    @property
    def mean_step(self) -> float:
        if self.burst is None:
            return self.step
        fast, slow, seconds = self.burst
        return (fast * self.step + slow * seconds) / (fast + slow)

    @property
    def note(self) -> str:
        if not self.p:
            return ""
        cover = math.ceil(self.stall / self.step)
        return (
            f"in order, a {self.stall * 1e3:.0f} ms stall is hidden only by {cover} batches ready behind it "
            f"({self.stall * 1e3:.0f} / {self.step * 1e3:.0f} ms), i.e. {cover + 2} started and not released "
            "with the stalled one and the one in the step; out of order, the other workers cover it"
        )

    @property
    def mean_load(self) -> float:
        """Mean sleep of a batch's load, stalls included (the pure-Python load: timed once here)."""
        if self.cpu:
            return cpu_seconds(self.cpu)
        return self.load * (1 - self.p) + self.stall * self.p if self.p else self.load

    @property
    def needed_workers(self) -> int:
        """Workers needed to keep up with the step: ceil(mean load / step), at most the workers."""
        return min(self.workers, math.ceil(self.mean_load / self.step - 1e-9))

    @property
    def minimum(self) -> int:
        """The issue's physical minimum: the batches the needed workers are building
        plus the one being consumed."""
        return self.needed_workers + 1

    @property
    def why(self) -> str:
        load = f"mean load {self.mean_load * 1e3:.2f} ms" if self.p else f"load {self.load * 1e3:.0f} ms"
        if self.cpu:
            load = f"pure-Python load {self.mean_load * 1e3:.1f} ms alone"
        return (
            f"{self.needed_workers} building (ceil({load} / step {self.step * 1e3:.1f} ms), "
            f"at most {self.workers} workers) + 1 being consumed"
        )

    def describe(self) -> str:
        size = f"{self.batch_bytes / MiB:.2f} MiB" if self.batch_bytes >= MiB else f"{self.batch_bytes // 1024} KiB"
        if self.cpu:
            load = f"pure-Python loop of {self.cpu} iterations + {size} numpy pass"
        else:
            load = f"load {self.load * 1e3:g} ms sleep + {size} numpy pass"
        text = f"{self.mode} mode, {self.workers} workers; {load}, step {self.step * 1e3:g} ms"
        if self.burst:
            fast, slow, seconds = self.burst
            text += f" x {fast} then {seconds * 1e3:g} ms x {slow}, in turn"
        if self.p:
            text += f", stall {self.stall * 1e3:.0f} ms with p={self.p}"
        if self.pause:
            text += f", one {self.pause:.0f} s consumer pause at step {self.steps // 2}"
        return text + f", {self.steps} steps (warm-up {self.warmup})"


def workloads(scale: float, workers: int = WORKERS) -> list[Workload]:
    """The seven workloads, their loaders at ``workers`` workers each (the cpu-bound
    workload's at ``min(workers, CPU_BOUND_WORKERS)`` processes)."""

    def n(k: int) -> int:
        return max(60, int(k * scale))

    cpu_workers = min(workers, CPU_BOUND_WORKERS)
    return [
        Workload("input-bound", 0.008, 0.002, n(600), 30, workers=workers),
        Workload("compute-bound", 0.002, 0.008, n(300), 20, workers=workers),
        Workload(
            "jittery", 0.003, 0.003, n(600), 30, stall=0.100, p=0.04, extras=(UNORDERED, DEEP, LEAN), workers=workers
        ),
        Workload("pause", 0.002, 0.008, n(300), 20, pause=PAUSE, workers=workers),
        Workload("overhead-bound", 0.001, 0.0005, n(1500), 100, rows=16, workers=workers),
        Workload("bursty", 0.008, 0.001, n(600), 40, burst=(16, 4, 0.020), extras=(LEAN,), workers=workers),
        Workload(
            "cpu-bound", 0.0, 0.003, n(400), 30, rows=256, cpu=CPU_ITERATIONS, mode="process", workers=cpu_workers
        ),
    ]


CPU_ITERATIONS = 40_000


@functools.cache
def cpu_seconds(iterations: int) -> float:
    """Seconds of ``python_work(iterations)`` on this machine, alone: the median of 9."""
    spans = []
    for seed in range(9):
        start = time.perf_counter()
        python_work(iterations, seed)
        spans.append(time.perf_counter() - start)
    return statistics.median(spans)


def python_work(iterations: int, seed: int) -> int:
    """A pure-Python loop (holds the GIL): what a tokenizer or a record parser does."""
    total = seed
    for i in range(iterations):
        total = (total * 31 + i) % 1_000_003
    return total


class Batches:
    """Map-style: item ``i`` is ``(x, y)``, ``rows`` x 1024 float32 and 512 labels, after
    a sleep or a pure-Python loop."""

    def __init__(self, w: Workload, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.sleeps = np.full(LENGTH, w.load)
        if w.p:
            self.sleeps = np.where(rng.random(LENGTH) < w.p, w.stall, w.load)
        self.cpu = w.cpu
        self.template = rng.random((w.rows, COLS), dtype=np.float32)
        self.labels = rng.integers(0, 10, w.rows)

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        index = int(index)
        if self.cpu:
            python_work(self.cpu, index)
        else:
            time.sleep(float(self.sleeps[index]))
        return self.template + np.float32(index % 7), self.labels.copy()


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


def run_prefetcher(
    w: Workload, ordered: bool = True, max_bytes: int | None = None, name: str = "prefetcher"
) -> dict[str, Any]:
    p = queuetune.Prefetcher(
        Batches(w), max_bytes=max_bytes or w.max_bytes, workers=w.workers, mode=w.mode, ordered=ordered
    )
    return result(name, *measured(p, w), w)


def run_keras(w: Workload) -> dict[str, Any]:
    import keras

    inner = Batches(w)

    class Data(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__(workers=w.workers, use_multiprocessing=False, max_queue_size=10)

        def __len__(self) -> int:
            return LENGTH

        def __getitem__(self, index: int) -> Any:
            return inner[index]

    step = make_step(w)

    class Sleeper(keras.Model):
        def train_step(self, data: Any) -> dict[str, Any]:
            step(data)
            return {}

    inputs = keras.Input((COLS,))
    model = Sleeper(inputs, keras.layers.Dense(1)(inputs))
    model.compile("sgd", "mse")
    watched = queuetune.watch(Data())
    probe = queuetune.probe_of(watched)
    try:
        model.fit(
            watched,
            epochs=1,
            steps_per_epoch=w.steps,
            shuffle=False,
            verbose=0,
            callbacks=[probe.keras_callback(print_report=False)],
        )
        probe.settle(quiet=0.05, timeout=2.0)
        trace = probe.trace()
        report = probe.report()
    finally:
        probe.close()
    return result("keras", trace, report, w)


def run_torch(w: Workload) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    loader = DataLoader(Batches(w), batch_size=None, num_workers=w.workers, prefetch_factor=2)
    watched = queuetune.watch(loader)
    probe = queuetune.probe_of(watched)
    try:
        consume(watched, w)
        probe.settle(quiet=0.05, timeout=2.0)
        trace = probe.trace()
        report = probe.report()
    finally:
        probe.close()
    return result("torch", trace, report, w)


def run_tf(w: Workload) -> dict[str, Any]:
    """tf.data as its guide builds an input pipeline: map(AUTOTUNE) -> prefetch(AUTOTUNE),
    counted in the load function like the other loaders queuetune does not build."""
    import tensorflow as tf

    global _DATA, _COUNTED
    _DATA, _COUNTED = Batches(w), Counted()

    def load(i: Any) -> tuple[np.ndarray, np.ndarray]:
        return load_counted(int(i))

    ds = (
        tf.data.Dataset.range(LENGTH)
        .map(
            lambda i: tuple(tf.numpy_function(load, [i], [tf.float32, tf.int64])),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .prefetch(tf.data.AUTOTUNE)
    )
    arrived = consume(ds, w, _COUNTED)
    return counted_result("tf.data", w, arrived, _COUNTED)


def run_nodes(w: Workload, method: str = "thread", name: str = NODES) -> dict[str, Any]:
    """torchdata.nodes as its docs build a loader: ParallelMapper(in_order) -> Prefetcher(2) -> Loader."""
    from torchdata.nodes import IterableWrapper, Loader, ParallelMapper
    from torchdata.nodes import Prefetcher as NodesPrefetcher

    global _DATA, _COUNTED
    _DATA, _COUNTED = Batches(w), Counted()
    mapper = ParallelMapper(
        IterableWrapper(range(LENGTH)),
        map_fn=load_counted,
        num_workers=w.workers,
        in_order=True,
        method=method,  # type: ignore[arg-type]
        multiprocessing_context="fork" if method == "process" else None,
    )
    prefetcher = NodesPrefetcher(mapper, prefetch_factor=2)
    try:
        arrived = consume(Loader(prefetcher), w, _COUNTED)
    finally:
        stop_nodes(prefetcher, mapper)
    return counted_result(name, w, arrived, _COUNTED)


def run_spdl(w: Workload, process: bool = False, name: str = SPDL) -> dict[str, Any]:
    """SPDL's pipeline: pipe(load, concurrency=workers, output_order="input") -> add_sink(3)."""
    import concurrent.futures as cf
    import multiprocessing

    from spdl.pipeline import PipelineBuilder

    global _DATA, _COUNTED
    _DATA, _COUNTED = Batches(w), Counted()
    executor = cf.ProcessPoolExecutor(w.workers, mp_context=multiprocessing.get_context("fork")) if process else None
    pipeline = (
        PipelineBuilder()
        .add_source(range(LENGTH))
        .pipe(load_counted, concurrency=w.workers, executor=executor, output_order="input")
        .add_sink(3)
        .build(num_threads=w.workers)
    )
    try:
        with pipeline.auto_stop():
            arrived = consume(pipeline.get_iterator(timeout=60), w, _COUNTED)
    finally:
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
    return counted_result(name, w, arrived, _COUNTED)


RUNNERS = {
    "prefetcher": run_prefetcher,
    "keras": run_keras,
    "torch": run_torch,
    "tf.data": run_tf,
    NODES: run_nodes,
    SPDL: run_spdl,
    NODES_PROCESS: lambda w: run_nodes(w, "process", NODES_PROCESS),
    SPDL_PROCESS: lambda w: run_spdl(w, True, SPDL_PROCESS),
    UNORDERED: lambda w: run_prefetcher(w, ordered=False, name=UNORDERED),
    DEEP: lambda w: run_prefetcher(w, max_bytes=DEEP_BUDGET_BATCHES * w.batch_bytes, name=DEEP),
    LEAN: lambda w: run_prefetcher(w, max_bytes=lean_budget_batches(w.workers) * w.batch_bytes, name=LEAN),
}


def summarize(w: Workload, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    rows = {}
    for name, rs in runs.items():
        if not rs:
            continue

        def peak(key: str, rs: list[dict[str, Any]] = rs) -> int | None:
            values = [r[key] for r in rs if r[key] is not None]
            return max(values) if values else None

        rows[name] = {
            "throughput": statistics.median(r["throughput"] for r in rs),
            "throughputs": [round(r["throughput"], 2) for r in rs],
            "peak_started_batches": peak("peak_started_batches"),
            "peak_started_bytes": peak("peak_started_bytes"),
            "peak_in_flight_batches": peak("peak_in_flight_batches"),
            "peak_in_flight_bytes": peak("peak_in_flight_bytes"),
            "mean_in_flight_batches": peak("mean_in_flight_batches"),
            "peak_total_bytes": peak("peak_total_bytes"),
            "rss_rise_bytes": peak("rss_rise_bytes"),
            "input_bound_fraction": statistics.median(
                r["input_bound_fraction"] for r in rs if r["input_bound_fraction"] is not None
            )
            if any(r["input_bound_fraction"] is not None for r in rs)
            else None,
            "mean_step_ms": statistics.median(r["mean_step_ms"] for r in rs)
            if all(r.get("mean_step_ms") is not None for r in rs)
            else None,
        }
        if name.startswith("prefetcher"):
            rows[name]["depth_marks"] = [r.get("depth_marks", []) for r in rs]
    others = {k: v for k, v in rows.items() if not k.startswith("prefetcher")}
    best_other = max(others, key=lambda k: others[k]["throughput"])
    best = others[best_other]["throughput"]  # the reference: the best of the other loaders
    checks = {name: check(w, rows[name], others, best_other) for name in rows if name.startswith("prefetcher")}
    summary = {
        "workload": w.name,
        "description": w.describe(),
        "physical_minimum_batches": w.minimum,
        "physical_minimum": w.why,
        "note": w.note,
        "loaders": rows,
        "best_other": best_other,
        "ratio": rows["prefetcher"]["throughput"] / best,
        "checks": checks["prefetcher"],
        "extra_checks": {k: v for k, v in checks.items() if k != "prefetcher"},
    }
    if w.p and others[best_other]["mean_step_ms"]:
        summary["in_order_ceiling"] = in_order_ceiling(w, others[best_other]["mean_step_ms"], best)
    return summary


def simulated_loads(w: Workload, extra: float) -> list[float]:
    """Seconds of each of ``w``'s builds as the in-order ceiling simulates them:
    its seeded sleeps (stalls included) plus ``extra`` for the numpy pass."""
    return [float(s) + extra for s in Batches(w).sleeps[: w.steps]]


def in_order_ceiling(w: Workload, step_ms: float, best: float) -> dict[str, Any]:
    """What an ideal in-order loader held to the prefetcher's budget (depth
    ``BUDGET_BATCHES``) reads at the best other loader's step of ``step_ms``:
    whether the throughput target can be reached in order at all."""
    reads = ceiling(simulated_loads(w, NUMPY_PASS_S), [step_ms / 1000] * w.steps, BUDGET_BATCHES, w.workers, w.warmup)
    return {"depth": BUDGET_BATCHES, "step_ms": round(step_ms, 3), "throughput": reads, "ratio": reads / best}


def check(w: Workload, pf: dict[str, Any], others: dict[str, Any], best_other: str) -> dict[str, Any]:
    """The issue's targets for one prefetcher row. Peaks are of batches started and
    not yet released (the issue's physical minimum counts batches being built)."""
    best = others[best_other]["throughput"]
    ratio = pf["throughput"] / best
    reaching = {
        k: v for k, v in others.items() if v["throughput"] >= TOLERANCE * best and v["peak_started_bytes"] is not None
    }
    smallest = min(reaching, key=lambda k: reaching[k]["peak_started_bytes"]) if reaching else None
    checks = {
        "throughput": {
            "met": ratio >= TARGET,
            "detail": f"{pf['throughput']:.1f}/s vs best other {best_other} {best:.1f}/s: "
            f"ratio {ratio:.3f} (target >= {TARGET})",
        },
    }
    allowed = w.max_bytes + w.batch_bytes
    best_peak = others[best_other]["peak_started_bytes"]
    if best_peak is not None and best_peak > allowed:
        # The best loader held more than the prefetcher may: its throughput, again, among
        # the loaders that kept within the prefetcher's budget.
        within = {
            k: v
            for k, v in others.items()
            if v["peak_started_bytes"] is not None and v["peak_started_bytes"] <= allowed
        }
        if within:
            name = max(within, key=lambda k: within[k]["throughput"])
            fair = pf["throughput"] / within[name]["throughput"]
            checks["throughput_within_budget"] = {
                "met": fair >= TARGET,
                "detail": f"{best_other} held {best_peak / MiB:.1f} MiB, more than max_bytes {w.max_bytes / MiB:.1f} "
                f"MiB + the batch in the step; the best loader within that: {name} "
                f"{within[name]['throughput']:.1f}/s, ratio {fair:.3f} (target >= {TARGET})",
            }
    if smallest is None:
        checks["bytes_vs_others"] = {
            "met": None,
            "detail": "no other loader with an observable peak reaches 0.98 x the best other's throughput",
        }
    else:
        other_peak = reaching[smallest]["peak_started_bytes"]
        checks["bytes_vs_others"] = {
            "met": pf["peak_started_bytes"] <= other_peak,
            "detail": f"{pf['peak_started_bytes'] / MiB:.1f} MiB vs {smallest} {other_peak / MiB:.1f} MiB "
            "(peak started and not released; smallest among the others at >= 0.98 x the best other's throughput)",
        }
    checks["bytes_vs_minimum"] = {
        "met": pf["peak_started_batches"] <= w.minimum + 1,
        "detail": f"{pf['peak_started_batches']} batches started and not released vs physical minimum "
        f"{w.minimum} ({w.why}) + 1",
    }
    if w.pause:
        deepest = max((max(m) for m in pf["depth_marks"] if m), default=0)
        checks["pause_within_budget"] = {
            "met": pf["peak_started_bytes"] <= w.max_bytes + w.batch_bytes
            and pf["peak_started_batches"] <= deepest + 1,
            "detail": f"peak {pf['peak_started_batches']} batches / {pf['peak_started_bytes'] / MiB:.1f} MiB started "
            f"and not released vs max_bytes {w.max_bytes / MiB:.1f} MiB + the batch in the step, and vs the deepest "
            f"depth reached {deepest} + the batch in the step",
        }
    return checks


def versions() -> dict[str, str]:
    from importlib.metadata import version

    import keras
    import tensorflow as tf
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "keras": keras.__version__,
        "tensorflow": tf.__version__,
        "torchdata": version("torchdata"),
        "spdl": version("spdl"),
        "numpy": np.__version__,
        "queuetune": queuetune.__version__,
    }


def fmt_bytes(value: int | None) -> str:
    return "not observable" if value is None else f"{value / MiB:.1f} MiB"


def table(data: dict[str, Any]) -> str:
    workers = data["settings"]["workers"]
    lines = [
        "queuetune.Prefetcher vs Keras / PyTorch / tf.data / torchdata.nodes / SPDL",
        f"date: {data['date']}   machine: {data['machine']}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in data["versions"].items()),
        f"workers: {workers} for every loader that has a count (tf.data: AUTOTUNE; cpu-bound: "
        f"{data['settings']['cpu_bound_workers']} processes, at most {CPU_BOUND_WORKERS})",
        f"prefetcher max_bytes = {BUDGET_BATCHES} batches; peers measured in the load function; "
        f"rounds: {data['rounds']} (interleaved); wall {data['seconds']:.0f} s",
        "",
    ]
    for s in data["workloads"]:
        lines.append(f"== {s['workload']}: {s['description']}")
        lines.append(f"   physical minimum: {s['physical_minimum_batches']} batches = {s['physical_minimum']}")
        if s.get("note"):
            lines.append(f"   note: {s['note']}")
        width = max(len(name) for name in s["loaders"])
        lines.append(
            f"{'loader':<{width}} {'batches/s (median; per round)':<36} {'peak started':>20} {'peak built':>19} "
            f"{'mean':>5} {'peak RSS+children':>18} {'RSS rise':>10} {'input-bound':>11} {'step ms':>8}"
        )
        order = [*LOADERS, *PROCESS_LOADERS]
        for name in [*dict.fromkeys(order), *(k for k in s["loaders"] if k not in order)]:
            r = s["loaders"].get(name)
            if r is None:
                continue
            tp = f"{r['throughput']:.1f} ({', '.join(f'{t:.1f}' for t in r['throughputs'])})"
            started = (
                "not observable"
                if r["peak_started_bytes"] is None
                else f"{r['peak_started_batches']} b / {fmt_bytes(r['peak_started_bytes'])}"
            )
            built = (
                "not observable"
                if r["peak_in_flight_bytes"] is None
                else f"{r['peak_in_flight_batches']} b / {fmt_bytes(r['peak_in_flight_bytes'])}"
            )
            mean = "" if r["mean_in_flight_batches"] is None else f"{r['mean_in_flight_batches']:.1f}"
            ib = "" if r["input_bound_fraction"] is None else f"{r['input_bound_fraction']:.2f}"
            took = "" if r.get("mean_step_ms") is None else f"{r['mean_step_ms']:.2f}"
            lines.append(
                f"{name:<{width}} {tp:<36} {started:>20} {built:>19} {mean:>5} "
                f"{fmt_bytes(r['peak_total_bytes']):>18} {fmt_bytes(r['rss_rise_bytes']):>10} {ib:>11} {took:>8}"
            )
        for name, r in s["loaders"].items():
            marks = r.get("depth_marks")
            if marks:
                lines.append(f"{name} depth marks per round: " + " | ".join(",".join(map(str, m)) for m in marks))
        top = s.get("in_order_ceiling")
        if top:
            lines.append(
                f"  in order within max_bytes (depth {top['depth']}), an ideal loader at the best other's step "
                f"({top['step_ms']:.2f} ms) reads {top['throughput']:.1f}/s: {top['ratio']:.3f} x the best other "
                "(a simulation: ideal_in_order.py)"
            )
        for title, checks in [("prefetcher", s["checks"]), *s.get("extra_checks", {}).items()]:
            if title != "prefetcher":
                lines.append(f"  {title} (extra row, not the default):")
            for key, c in checks.items():
                verdict = {True: "MET", False: "MISSED", None: "n/a"}[c["met"]]
                lines.append(f"  [{verdict:>6}] {key}: {c['detail']}")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument(
        "--workers",
        type=positive,
        default=WORKERS,
        help=f"workers of every loader that has a count (default {WORKERS}; tf.data stays AUTOTUNE; "
        f"cpu-bound: at most {CPU_BOUND_WORKERS} processes)",
    )
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument(
        "--out",
        type=Path,
        help=f"write prefetcher.json and prefetcher.txt here (prefetcher.workers-N.* with --workers N other than "
        f"{WORKERS})",
    )
    args = parser.parse_args()

    started = time.monotonic()
    selected = [w for w in workloads(args.scale, args.workers) if not args.only or w.name in args.only]
    import keras  # noqa: F401
    import tensorflow  # noqa: F401  (imported up front, not inside the first timed tf run)
    import torch  # noqa: F401

    summaries = []
    for w in selected:
        names = [*w.loaders, *w.extras]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names:
                row = RUNNERS[name](w)
                runs[name].append(row)
                print(
                    f"{w.name} round {r + 1} {name}: {row['throughput']:.1f}/s, "
                    f"peak started {row['peak_started_batches']} b, built {row['peak_in_flight_batches']} b",
                    file=sys.stderr,
                    flush=True,
                )
        summaries.append(summarize(w, runs))
    data = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "rounds": args.rounds,
        "budget_batches": BUDGET_BATCHES,
        "settings": {
            "workers": args.workers,
            "cpu_bound_workers": min(args.workers, CPU_BOUND_WORKERS),
            "tf_data_parallelism": "AUTOTUNE",
            "scale": args.scale,
            "only": args.only,
        },
        "seconds": time.monotonic() - started,
        "workloads": summaries,
    }
    publish(data, table(data), result_stem("prefetcher", args.workers), args.json, args.out)
    return 0


def result_stem(name: str, workers: int) -> str:
    """The results' file name for a run at ``workers`` workers: ``name`` at the
    default count, else ``name.workers-N``.

    >>> result_stem("prefetcher", WORKERS), result_stem("prefetcher", 8)
    ('prefetcher', 'prefetcher.workers-8')
    """
    return name if workers == WORKERS else f"{name}.workers-{workers}"


def positive(text: str) -> int:
    """``--workers``: a whole number, 1 or more."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"workers must be 1 or more, not {value}")
    return value


if __name__ == "__main__":
    sys.exit(main())
