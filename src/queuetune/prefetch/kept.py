"""What a Prefetcher keeps from one epoch to the next (:class:`Kept`): its
workers, the shared-memory pools they made, the depth controller; each epoch
made of them; and what the Prefetcher's end lets go of (:func:`close_all`)."""

from __future__ import annotations

import functools
import multiprocessing
import os
import sys
import weakref
from collections.abc import Iterator
from typing import Any

from ..common import cores
from ..record.recorder import Recorder
from . import shm
from .adaptive import DepthController
from .collate import batch_bytes_guess
from .config import BatchSizes
from .crew import WorkerController
from .device.staging import Staging
from .epoch import Epoch, Handed
from .options import PrefetchOptions
from .schedule import depth_controller
from .workers import ProcessWorkers, Pull, ThreadWorkers, Workers, build


class Kept:
    """The workers of a Prefetcher of ``options`` over ``source`` (``workers``: none
    before the first epoch, else those of the last, kept for the next as torch's
    ``persistent_workers=True`` keeps its own), the names of their shared-memory
    pools (``pools``: what the Prefetcher's end removes, no other's) and the
    depth controller, each epoch starting at the depth the last ended with.

    >>> from queuetune.prefetch import Prefetcher
    >>> with Prefetcher(["a", "b", "c"], max_bytes=100, sample_memory=False) as p:
    ...     kept = Kept(p.options, p.source, p.recorder)
    ...     epoch = kept.epoch(2, [0, 1, 2], None, BatchSizes())
    ...     list(epoch.run())
    ...     kept.release()
    ['a', 'b', 'c']
    """

    def __init__(self, options: PrefetchOptions, source: Any, recorder: Recorder) -> None:
        self.options = options
        self.source = source
        self.recorder = recorder
        self.workers: list[Workers] = []
        self.pools: list[str] = []
        self.controller: DepthController | None = None
        # The device stage (device= or pin_memory=True), else None: batches go to the consumer as they are.
        self.staging = None if options.device is None else Staging(options.device)

    def epoch(self, count: int, plan: list[Any] | None, handed: Handed | None, sizes: BatchSizes) -> Epoch:
        """An epoch of ``plan`` (None: a plain iterable's), on the workers kept
        where they can build it, else on ``count`` new ones."""
        options = self.options
        workers = self._reused() or self._started(count)
        self.workers[:] = [workers]
        crew = None
        if options.auto:
            assert options.max_workers is not None
            crew = WorkerController(workers=workers.count, max_workers=options.max_workers, cores=cores.available())
        config = options.epoch_config()
        return Epoch(config, plan, workers, self.recorder, sizes, crew, self._depth_controller(), handed)

    def read(self, epoch: Epoch, owner: object) -> Iterator[Any]:
        """The consumer's iterator over ``epoch`` (kept alive with ``owner``): its own
        loop, or the device stage's over it."""
        if self.staging is not None:
            return self.staging.run(epoch, owner)
        return with_step_copies(epoch.run(owner), self.recorder)

    def depth(self) -> int:
        """The depth the last epoch ended with (before the first, the depth to start at)."""
        return self.options.depth if self.controller is None else self.controller.depth

    def finalizer(self, owner: object) -> weakref.finalize[..., object]:
        """What lets go of these workers, their pools and the recorder once ``owner`` is gone, or when called."""
        return weakref.finalize(owner, close_all, self.recorder, os.getpid(), self.pools, self.workers, self.staging)

    def release(self) -> None:
        """Stop the workers kept from one epoch to the next."""
        for workers in self.workers:
            workers.shutdown(wait=True, unclaimed=[])
        self.workers.clear()

    def _reused(self) -> Workers | None:
        """The workers of the epochs before, if they can build this one's batches
        (a plain iterable's thread reads the iterator of its own epoch: never)."""
        if not self.workers:
            return None
        workers = self.workers[0]
        if workers.usable() and self.options.indexable:
            return workers
        self.release()
        return None

    def _depth_controller(self) -> DepthController:
        """The depth controller, kept from one epoch to the next: each starts at the depth the last ended with."""
        if self.controller is None:
            self.controller = depth_controller(self.options.epoch_config())
        else:
            self.controller.new_epoch()
        return self.controller

    def _started(self, count: int) -> Workers:
        """``count`` workers, started now (see :func:`.workers.lifecycle._start_workers` for why)."""
        options, source, channel = self.options, self.source, self.recorder.channel
        if not options.indexable:
            return ThreadWorkers(1, Pull(iter(source), channel))
        size, collate_fn = options.batch_size, options.collate_fn
        if options.mode == "process":
            context = options.multiprocessing_context or multiprocessing.get_context()
            started = ProcessWorkers(
                count, source, size, collate_fn, channel, context, options.max_workers, budget=options.max_bytes
            )
            self.pools.append(started.segments.prefix)
            return started
        guess = None if size is None else functools.partial(batch_bytes_guess, source, size)
        return ThreadWorkers(
            count, functools.partial(build, source, size, collate_fn, channel), options.max_workers, measure=guess
        )


def with_step_copies(batches: Iterator[Any], recorder: Recorder) -> Iterator[Any]:
    """``batches``, each step's copies of them to a device recorded where the
    program uses torch and an accelerator is available (see
    :mod:`queuetune.frameworks.torch.copies`); else ``batches`` themselves.

    >>> from queuetune.record.trace import TraceMeta
    >>> recorder = Recorder(TraceMeta())
    >>> list(with_step_copies(iter([1, 2]), recorder))
    [1, 2]
    >>> recorder.close()
    """
    torch = sys.modules.get("torch")
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None or not accelerator.is_available():
        return batches
    from ..frameworks.torch.copies import watched_steps

    return watched_steps(batches, recorder)


def close_all(
    recorder: Recorder, pid: int, pools: list[str], kept: list[Workers], staging: Staging | None = None
) -> None:
    """What a Prefetcher's end lets go of: its workers (``kept``), its recorder and,
    in the process that made them, its shared-memory ``pools`` and its device stage's buffers."""
    if os.getpid() == pid:
        if staging is not None:
            staging.release()
        for workers in kept:
            workers.shutdown(wait=False, unclaimed=[])
    kept.clear()
    recorder.close()
    if os.getpid() == pid and shm.available():
        for prefix in pools:
            shm.sweep_pool(prefix)
