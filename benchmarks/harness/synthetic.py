"""The synthetic workloads of prefetcher.py and its peers: batches of float32 rows after a
sleep or a pure-Python loop, a consumer's step, and the loaders each workload compares."""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import time

import numpy as np

ROWS, COLS = 512, 1024


BUDGET_BATCHES = 16


LENGTH = 100_000


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


def simulated_loads(w: Workload, extra: float) -> list[float]:
    """Seconds of each of ``w``'s builds as the in-order ceiling simulates them:
    its seeded sleeps (stalls included) plus ``extra`` for the numpy pass."""
    return [float(s) + extra for s in Batches(w).sleeps[: w.steps]]


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
