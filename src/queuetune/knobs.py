"""The settings that bound a loader's queue, and how they map to a depth.

A depth is the bound a loader puts on batches being built or built and not yet
taken by the consumer (the queue model's depth); depth 0 means the consumer
builds each batch itself when it asks (no read-ahead at all). Plain iterables
use queuetune's own prefetch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .trace import TraceMeta


@dataclass(frozen=True)
class Knobs:
    """How one framework's settings bound its queue.

    >>> k = QUEUETUNE_PREFETCH
    >>> k.depth({"buffer": 3}), k.settings_for(4, None), k.depth({"buffer": 0})
    (4, {'buffer': 3}, 0)
    """

    framework: str
    depth_knob: str
    workers_knob: str | None = None

    def depth(self, settings: dict[str, Any]) -> int:
        """The depth these settings give."""
        raise NotImplementedError

    def settings_for(self, depth: int, workers: int | None) -> dict[str, Any] | None:
        """Settings that give ``depth`` with ``workers`` workers, or None if none do."""
        raise NotImplementedError

    def workers(self, settings: dict[str, Any]) -> int:
        """Workers building batches at once under these settings (at least 1)."""
        if self.workers_knob is None:
            return 1
        return max(1, int(settings.get(self.workers_knob) or 0))


class BufferKnobs(Knobs):
    """One producer and a buffer of ready batches: depth = buffer + 1 (the one
    being built, or waiting for room); buffer 0 means no read-ahead at all."""

    def depth(self, settings: dict[str, Any]) -> int:
        buffer = int(settings[self.depth_knob])
        return buffer + 1 if buffer > 0 else 0

    def settings_for(self, depth: int, workers: int | None) -> dict[str, Any] | None:
        if depth == 1 or depth < 0:
            return None
        return {self.depth_knob: max(depth - 1, 0)}


class KerasKnobs(Knobs):
    """PyDataset: an enqueuer exists when workers > 1 or use_multiprocessing; its
    feeder keeps up to max_queue_size + 1 batches submitted and not taken."""

    def depth(self, settings: dict[str, Any]) -> int:
        workers = int(settings.get("workers", 1))
        multiprocessing = bool(settings.get("use_multiprocessing", False))
        if workers > 1 or (workers > 0 and multiprocessing):
            return int(settings.get("max_queue_size", 10)) + 1
        return 0

    def settings_for(self, depth: int, workers: int | None) -> dict[str, Any] | None:
        workers = 1 if workers is None else workers
        if workers <= 1:
            return {"workers": 1, "max_queue_size": 10} if depth == 0 else None
        if depth < 2:  # max_queue_size=0 would make Keras's queue unbounded
            return None
        return {"workers": workers, "max_queue_size": depth - 1}


class TorchKnobs(Knobs):
    """DataLoader: prefetch_factor × num_workers batches requested from workers."""

    def depth(self, settings: dict[str, Any]) -> int:
        workers = int(settings.get("num_workers", 0))
        if workers == 0:
            return 0
        factor = settings.get("prefetch_factor")
        return (2 if factor is None else int(factor)) * workers

    def settings_for(self, depth: int, workers: int | None) -> dict[str, Any] | None:
        workers = 0 if workers is None else workers
        if workers == 0:
            return {"num_workers": 0, "prefetch_factor": None} if depth == 0 else None
        if depth < 1 or depth % workers:
            return None
        return {"num_workers": workers, "prefetch_factor": depth // workers}

    def workers(self, settings: dict[str, Any]) -> int:
        return max(1, int(settings.get("num_workers") or 0))


@dataclass(frozen=True)
class RayKnobs(Knobs):
    """Ray Data: ``concurrency`` tasks build blocks, the executor holds built blocks
    within its object-store budget (``object_store_memory``), and the trainer's
    iterator prefetches ``prefetch_batches``. A depth counts blocks being built or
    built and not yet taken: ``concurrency + held + prefetch_batches``.

    ``held`` is half the budget in blocks: Ray's downstream-capacity backpressure
    stops the last operator at a ratio of 2 between the budget and what waits
    for the consumer (measured: 10, 21 and 42 blocks of 12 MiB held at budgets of
    256 MiB, 512 MiB and 1 GiB). A budget of ``None`` is Ray's default,
    ``store_budget`` (half the cluster's object store); ``concurrency`` ``None``
    is every CPU of the cluster (``cpus``). The tuner binds ``block_bytes``,
    ``store_budget`` and ``cpus`` to the cluster and the dataset it measured.

    >>> k = RayKnobs("ray", "object_store_memory", "concurrency", block_bytes=100, cpus=2)
    >>> k.settings_for(6, 2)
    {'prefetch_batches': 1, 'object_store_memory': 600, 'concurrency': 2}
    >>> k.depth({'prefetch_batches': 1, 'object_store_memory': 600, 'concurrency': 2})
    6
    """

    block_bytes: int = 0
    store_budget: int = 0
    cpus: int = 1

    def held(self, budget: int | None) -> int:
        """Blocks the executor holds ahead under ``budget`` bytes (None: Ray's default)."""
        budget = self.store_budget if budget is None else min(int(budget), self.store_budget or int(budget))
        return budget // (2 * self.block_bytes) if self.block_bytes > 0 else 0

    def depth(self, settings: dict[str, Any]) -> int:
        prefetch = int(settings.get("prefetch_batches", 1))
        return self.workers(settings) + self.held(settings.get("object_store_memory")) + prefetch

    def settings_for(self, depth: int, workers: int | None) -> dict[str, Any] | None:
        workers = self.cpus if workers is None else workers
        held = depth - workers - 1
        if held < 1 or self.block_bytes <= 0 or workers < 1:
            return None
        if self.store_budget and 2 * held * self.block_bytes > self.store_budget:
            return None  # Ray cuts a budget to its default
        return {"prefetch_batches": 1, "object_store_memory": 2 * held * self.block_bytes, "concurrency": workers}

    def workers(self, settings: dict[str, Any]) -> int:
        return max(1, int(settings.get("concurrency") or self.cpus))


QUEUETUNE_PREFETCH = BufferKnobs("python", "buffer")
TFDATA_PREFETCH = BufferKnobs("tfdata", "buffer")
KERAS = KerasKnobs("keras", "max_queue_size", "workers")
TORCH = TorchKnobs("torch", "prefetch_factor", "num_workers")
RAY = RayKnobs("ray", "object_store_memory", "concurrency")
BY_FRAMEWORK = {k.framework: k for k in (QUEUETUNE_PREFETCH, TFDATA_PREFETCH, KERAS, TORCH, RAY)}


def reachable_depths(knobs: Knobs, workers: int | None, upto: int = 32) -> list[int]:
    """Depths from 0 to ``upto`` that some setting of ``knobs`` gives.

    >>> reachable_depths(TORCH, 4, 12)
    [4, 8, 12]
    """
    return [d for d in range(0, upto + 1) if knobs.settings_for(d, workers) is not None]


ASSIGNMENTS = ("shared", "round_robin")
RELEASES = ("take", "request")


@dataclass(frozen=True)
class LoaderRules:
    """How a loader gives batches to its workers and frees places under its bound.

    ``assignment``: ``"shared"`` (any free worker builds the next batch: Keras's
    executor, queuetune's prefetcher) or ``"round_robin"`` (batch ``i`` goes to
    worker ``i mod workers``, after that worker's previous batch: torch's
    DataLoader). ``release``: a place frees when the consumer ``"take"``s a
    batch (torch sends the next index after receiving one) or as soon as it
    ``"request"``s it (Keras's feeder submits the next batch when the consumer
    removes the head of its queue, before that batch is ready).
    ``processes``: batches cross from worker processes through a pipe.

    >>> rules_of(TraceMeta(framework="torch", settings={"num_workers": 4}))
    LoaderRules(assignment='round_robin', release='take', processes=True)
    >>> rules_of(TraceMeta(framework="keras", settings={"workers": 4})).release
    'request'
    """

    assignment: str = "shared"
    release: str = "take"
    processes: bool = False


def rules_of(meta: TraceMeta) -> LoaderRules:
    """The rules of the loader a trace's ``meta`` describes (shared, take, threads when unknown)."""
    framework = meta.framework
    settings = meta.settings or {}
    if framework == "torch":
        return LoaderRules("round_robin", "take", int(settings.get("num_workers") or 0) > 0)
    if framework == "keras":
        return LoaderRules("shared", "request", bool(settings.get("use_multiprocessing")))
    if framework == "queuetune":
        return LoaderRules("shared", "take", settings.get("mode") == "process")
    return LoaderRules()
