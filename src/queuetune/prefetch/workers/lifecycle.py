"""The worker processes of :class:`~.processes.ProcessWorkers`
(:class:`Processes`): started at once, watched for a death, and reaped
whatever state they are in."""

from __future__ import annotations

import concurrent.futures as cf
import os
import pickle
import signal
import time
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ...common.units import format_bytes
from ...record.recorder import Channel
from .. import heap, shm, warden
from .building import init_process
from .options import ProcessOptions


class Processes:
    """The processes of a pool started with ``options``, ``options.count`` of
    them at once (see :func:`_start_workers` for why), each told ``channel``
    (where it records its builds), the names and shelf of ``segments`` (the
    receiver's :class:`.shm.Pool`) and ``done`` (each worker's semaphore for
    the copies it makes behind its builds, :class:`.copies.Copies`). From then
    on the warden knows them (:mod:`..warden`). A source that cannot be sent to
    a spawned worker is a ``TypeError`` that says so, with no process left.
    """

    def __init__(self, options: ProcessOptions, channel: Channel, segments: shm.Pool, done: list[Any]) -> None:
        self.options = options
        self.prefix = segments.prefix
        #: The bytes the workers gave back to the system between epochs (see :meth:`rest`).
        self.handed_back = 0
        # Every process started, by pid, kept to name the one that died.
        self.known: dict[int, Any] = {}
        context = options.context
        self._pool = cf.ProcessPoolExecutor(
            options.capacity,
            mp_context=context,
            initializer=init_process,
            initargs=(
                options.source,
                options.batch_size,
                options.collate_fn,
                channel,
                os.getpid(),
                segments.prefix,
                segments.shelf,
                done,
                context.Value("i", 0),
            ),
        )
        try:
            with channel.reader_paused():
                _start_workers(self._pool, options.count)
        except (TypeError, AttributeError, pickle.PicklingError) as exc:
            _shutdown(self._pool)
            method = options.start_method
            raise TypeError(
                f"the source or collate_fn could not be sent to a worker process started with {method!r} "
                f"({type(exc).__name__}: {exc}): with 'spawn' or 'forkserver' they must be picklable "
                "(defined at a module's top level); use multiprocessing_context='fork' or mode='thread'"
            ) from exc
        except BaseException:
            _shutdown(self._pool)
            raise
        # From here on this process's death ends the workers and removes the files also where a
        # build holds a worker's GIL and its lifeline thread cannot run (see .warden).
        warden.guard(self.prefix, shm.files.ROOT)
        self.track()

    def submit(self, fn: Callable[..., Any], *args: Any) -> cf.Future[Any]:
        """Run ``fn(*args)`` in a worker process (BrokenProcessPool where one died)."""
        future = self._pool.submit(fn, *args)
        self.track()
        return future

    def track(self) -> None:
        """Keep the processes started since the last look (with ``spawn`` and
        ``forkserver`` a submit may start one), and tell the warden of them."""
        known = len(self.known)
        self.known.update(getattr(self._pool, "_processes", None) or {})
        if len(self.known) != known:
            warden.watch(self.prefix, list(self.known))

    def rest(self, count: int) -> None:
        """Have ``count`` idle workers give back what their allocators keep (see :mod:`..heap`)."""
        for _ in range(count):  # one each, as every one is idle and takes the next job
            try:
                future = self._pool.submit(heap.hand_back)
            except (BrokenProcessPool, RuntimeError):  # dead or shut down: the epoch's end says so
                return
            future.add_done_callback(self._handed_back)
        self.track()

    def _handed_back(self, future: cf.Future[int]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.handed_back += future.result()

    def dead(self) -> bool:
        """Whether a worker process has exited."""
        return any(process.exitcode is not None for process in list(self.known.values()))

    def broken(self) -> bool:
        """Whether the pool broke (a worker died): it takes no more work."""
        return bool(getattr(self._pool, "_broken", False))

    def deaths(self) -> list[str]:
        """The worker processes that died, each as its pid and how it ended."""
        dead = []
        for pid, process in list(self.known.items()):
            process.join(timeout=1)
            code = process.exitcode
            # The pool's thread may be reaping it at this moment: then the code comes a moment later.
            for _ in range(100):
                if code is not None:
                    break
                time.sleep(0.01)
                code = process.exitcode
            if code is None or code == 0 or code == -signal.SIGTERM:  # the pool's own shutdown
                continue
            if code == -signal.SIGBUS:
                how = f"killed by SIGBUS: {_out_of_room(self.options.budget)}"
            elif code < 0:
                try:
                    how = f"killed by {signal.Signals(-code).name}"
                except ValueError:
                    how = f"killed by signal {-code}"
            else:
                how = f"exit code {code}"
            dead.append(f"pid {pid}, {how}")
        return dead

    def shutdown(self) -> None:
        """End the processes, whatever they are doing, and wait for them."""
        _shutdown(self._pool)


def _out_of_room(budget: int | None) -> str:
    """Why a worker most likely died of SIGBUS: a page of shared memory it wrote had no room."""
    said = "" if budget is None else f"; the prefetcher's budget is max_bytes={format_bytes(budget)}"
    return (
        f"shared memory exhausted, most likely ({shm.describe_space()}{said}): give the container more "
        "(docker run --shm-size=...), point QUEUETUNE_SHM_DIR at a larger tmpfs, or lower max_bytes"
    )


def _start_workers(pool: cf.ProcessPoolExecutor, workers: int) -> None:
    """Start the pool's worker processes now, while no thread of queuetune's runs.

    A forked child gets a copy of every lock in the parent as it stood at the
    fork, and a lock that another thread held then stays held in the child for
    ever. So the workers are forked here, as the epoch is created, in the
    consumer's own thread: before the epoch's lock is first taken, before any
    build is submitted (so no callback of ours runs), before the recorder's
    memory sampler starts (it runs from the epoch's first batch), with the
    previous epoch's pool shut down and the recorder's pipe reader paused by
    the caller. No thread of queuetune's is alive at the fork, and the child
    writes its records with a bare ``os.write``, taking no lock. The pool forks
    every worker at its first submit (``fork``); with ``spawn`` and
    ``forkserver`` nothing is forked from this process, and each submit starts
    one more worker.
    """
    for _ in range(workers):
        pool.submit(os.getpid)


def _shutdown(pool: cf.ProcessPoolExecutor) -> None:
    processes = list((getattr(pool, "_processes", None) or {}).values())
    # shutdown(wait=False) forgets the pool's thread and its result pipe, so a later
    # shutdown(wait=True) neither joins the one nor closes the other.
    manager = getattr(pool, "_executor_manager_thread", None)
    results = getattr(pool, "_result_queue", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():  # SIGTERM blocked or handled by the source's own code
            process.kill()
            process.join(timeout=5)
    pool.shutdown(wait=True)
    if manager is not None:
        manager.join(timeout=5)
        if manager.is_alive():
            # A worker died in the middle of sending a result: the pool's thread
            # waits for the rest of the message for ever (and Python's exit joins
            # it), since this process holds the pipe's other end as well. With
            # the workers gone, closing that end ends the wait.
            writer = getattr(results, "_writer", None)
            if writer is not None:
                writer.close()
            manager.join(timeout=5)
