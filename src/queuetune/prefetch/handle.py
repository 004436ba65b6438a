"""queuetune's own prefetcher: a budget in bytes instead of a count of batches.

Batches are built by worker threads or processes. Before a batch is started,
room for it is reserved in the byte budget (the largest batch seen so far; the
first batch is built alone to learn the size); when it is built, the
reservation becomes its real size; when the consumer takes it, its bytes leave
the budget. So the bytes of batches built or being built and not yet taken
stay within ``max_bytes`` as long as no batch outgrows every batch before it;
one that does, and would break the budget, is a :class:`BudgetExceeded` error.

Faults end the epoch with a clear error and nothing left behind (workers
stopped, shared memory removed): a worker's exception reaches the consumer
unchanged; a worker process that dies is a :class:`WorkerDied`; a batch not
ready within ``timeout`` seconds is a ``TimeoutError``; :meth:`Prefetcher.close`
from another thread wakes a waiting consumer with :class:`PrefetcherClosed`.
The next ``for`` loop starts new workers.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import math
import multiprocessing
import multiprocessing.context
import os
import random
import statistics
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from ..kinds import is_pydataset
from ..recorder import Recorder, clock
from ..trace import Trace, TraceMeta
from ..units import format_bytes, parse_bytes, positive_int
from .adaptive import DepthController
from .collate import make_batch
from .workers import END, ProcessWorkers, Pull, ThreadWorkers, Workers, build

MODES = ("thread", "process")
# Steps of the consumer the typical step (their median) is taken over.
STEP_WINDOW = 16


class BudgetExceeded(ValueError):
    """A batch does not fit in the prefetcher's byte budget."""


class WorkerDied(BrokenProcessPool):
    """A worker process died mid-epoch (killed, out of memory, crashed).

    The epoch stops; the next ``for`` loop over the prefetcher starts new workers.
    """


class PrefetcherClosed(RuntimeError):
    """The epoch was stopped (``close()``, or a new epoch) while its consumer waited."""


@dataclass
class _Task:
    position: int
    indices: Any
    reserved: int
    future: cf.Future | None = None
    submitted_at: float = 0.0
    size: int | None = None
    taken: bool = False
    accounted: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Seen:
    """What a request found: the next batch not ready, the queue full, a worker
    idle for the lack of depth, the deepest depth the byte budget allows (as many
    of the largest batch so far as fit)."""

    waited: bool
    full: bool
    can_grow: bool
    limit: int | None


class Prefetcher:
    """Builds batches ahead of the consumer within a budget in bytes.

    ``source`` is indexable (a Keras ``PyDataset``, a torch map-style dataset,
    anything with ``__getitem__`` and ``__len__``; with ``batch_size`` its items
    are samples that ``collate_fn`` joins into batches) or a plain iterable (read
    by one worker thread). Each ``for`` loop over the prefetcher is one epoch:
    every batch exactly once, in order unless ``ordered=False``, nothing read
    past the end, nothing carried into the next epoch.

    With ``adaptive=True`` the depth (batches being built or ready) starts at 1,
    grows while the consumer waits and shrinks when the queue stays full; it
    never passes ``max_bytes``. With ``adaptive=False`` it is fixed at ``depth``.

    ``timeout``: seconds the consumer waits for one batch before a ``TimeoutError``
    naming the batch (the epoch then stops its workers; in thread mode a build
    that never returns keeps its thread until it does, so use ``mode="process"``
    for builds that can hang). ``close()`` from another thread wakes a waiting
    consumer with :class:`PrefetcherClosed`.

    ``multiprocessing_context`` (``mode="process"`` only), as for torch's
    ``DataLoader``: ``"fork"``, ``"forkserver"``, ``"spawn"`` or a context from
    ``multiprocessing.get_context``; ``None`` takes Python's default start
    method (``fork`` on Linux up to Python 3.13, ``forkserver`` from 3.14,
    ``spawn`` on macOS). With ``forkserver`` and ``spawn`` the source and
    ``collate_fn`` are pickled to each worker, so they must be defined at a
    module's top level; ``fork`` copies them. Python keeps one fork server and
    one resource tracker process per interpreter for these two, started on
    first use.

    ``trace_epochs``: how many of the latest epochs :meth:`trace` keeps (each
    batch's record costs a few hundred bytes, which over weeks of epochs would
    grow without end); ``None`` keeps them all.

    >>> import numpy as np
    >>> batches = [np.full(1000, i) for i in range(6)]
    >>> with Prefetcher(batches, max_bytes="1MiB") as p:
    ...     [int(b[0]) for b in p]
    [0, 1, 2, 3, 4, 5]

    A consumer that must not wait forever for a stuck source:

    >>> release = threading.Event()
    >>> class Stuck:
    ...     def __len__(self): return 3
    ...     def __getitem__(self, i): release.wait(10) if i == 1 else None; return np.zeros(10)
    >>> with Prefetcher(Stuck(), max_bytes="1MiB", workers=1, timeout=0.5) as p:
    ...     for batch in p: pass
    Traceback (most recent call last):
    TimeoutError: batch 1 of the epoch (index 1) was not ready within timeout=0.5 s; the epoch is stopped
    >>> release.set()
    """

    def __new__(cls, source: Any = None, *args: Any, **kwargs: Any) -> Prefetcher:
        if cls is Prefetcher and is_pydataset(source):
            from ..frameworks.keras import KerasPrefetcher

            cls = KerasPrefetcher
        return super().__new__(cls)

    def __init__(
        self,
        source: Any,
        *,
        max_bytes: int | str,
        workers: int = 2,
        mode: str = "thread",
        adaptive: bool = True,
        depth: int | None = None,
        max_depth: int = 64,
        ordered: bool = True,
        batch_size: int | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        shuffle: bool = False,
        seed: int | None = None,
        drop_last: bool = False,
        sample_memory: bool = True,
        timeout: float | None = None,
        trace_epochs: int | None = 16,
        multiprocessing_context: str | multiprocessing.context.BaseContext | None = None,
    ) -> None:
        self.max_bytes = parse_bytes(max_bytes)
        self.timeout = _check_timeout(timeout)
        if trace_epochs is not None:
            trace_epochs = positive_int(trace_epochs, "trace epochs")
        self.num_workers = positive_int(workers, "workers")
        if mode not in MODES:
            raise ValueError(f"mode must be 'thread' or 'process', got {mode!r}")
        self.mode = mode
        self.multiprocessing_context = _check_context(multiprocessing_context, mode)
        self.adaptive = bool(adaptive)
        self.max_depth = positive_int(max_depth, "max depth")
        if depth is None:
            depth = 1 if adaptive else self.num_workers
        self.start_depth = positive_int(depth, "depth")
        if self.start_depth > self.max_depth:
            raise ValueError(f"depth {depth} is above max_depth {self.max_depth}")
        self.ordered = bool(ordered)
        self.batch_size = None if batch_size is None else positive_int(batch_size, "batch size")
        self.collate_fn = collate_fn
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self._rng = random.Random(seed)
        self._source = source
        self._indexable = _indexable(source)
        if not self._indexable:
            if source is None or not hasattr(source, "__iter__") or isinstance(source, (str, bytes, dict)):
                raise TypeError(f"Prefetcher needs an indexable dataset or an iterable, got {type(source).__name__}")
            if mode == "process":
                raise ValueError("a plain iterable is read by one thread: use mode='thread'")
            if self.batch_size is not None:
                raise ValueError("batch_size needs an indexable source")
        if collate_fn is not None and self.batch_size is None:
            raise ValueError("collate_fn needs batch_size")
        self.recorder = Recorder(
            TraceMeta(
                loader="prefetcher",
                framework="queuetune",
                type=type(source).__qualname__,
                settings={
                    "max_bytes": self.max_bytes,
                    "workers": self.num_workers,
                    "mode": mode,
                    **({"start_method": self._start_method()} if mode == "process" else {}),
                    "adaptive": self.adaptive,
                    "ordered": self.ordered,
                },
                depth=self.start_depth,
                match_scope="run",
            ),
            processes=mode == "process",
            sample_memory=sample_memory,
            keep_runs=trace_epochs,
        )
        self.recorder.consumer = "prefetcher"
        if self._indexable:
            self.recorder.meta.num_batches = len(self)
            if self.batch_size is not None:
                self.recorder.meta.num_samples = _length(source)
        self._largest = 0
        # Whether a batch's size was learned (it may be 0: no arrays in it).
        self._sized = False
        self._epoch: _Epoch | None = None
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_all, self.recorder, os.getpid())

    # --- the epoch ---------------------------------------------------------------------

    def __len__(self) -> int:
        if not self._indexable:
            return len(self._source)
        count = _length(self._source)
        if self.batch_size is None:
            return count
        return count // self.batch_size if self.drop_last else -(-count // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        if self._closed:
            raise ValueError("this Prefetcher is closed")
        self._end_epoch()
        epoch = _Epoch(self)
        self._epoch = epoch
        return epoch.run()

    def _end_epoch(self, reason: str = "a new epoch began", wait: bool = True) -> None:
        if self._epoch is not None:
            self._epoch.stop(reason, wait=wait)
            self._epoch = None

    def _plan(self) -> list[Any]:
        """What each batch of the epoch is made of: a batch index, or sample indices."""
        count = _length(self._source)
        order = list(range(count))
        if self.shuffle:
            self._rng.shuffle(order)
        if self.batch_size is None:
            return order
        size = self.batch_size
        groups = [order[i : i + size] for i in range(0, count, size)]
        if self.drop_last and groups and len(groups[-1]) < size:
            groups.pop()
        return groups

    def _new_workers(self) -> Workers:
        """This epoch's workers, started now (see :func:`.workers._start_workers` for why)."""
        channel = self.recorder.channel
        if not self._indexable:
            return ThreadWorkers(1, Pull(iter(self._source), channel))
        if self.mode == "process":
            context = self.multiprocessing_context or multiprocessing.get_context()
            return ProcessWorkers(self.num_workers, self._source, self.batch_size, self.collate_fn, channel, context)
        return ThreadWorkers(
            self.num_workers, functools.partial(build, self._source, self.batch_size, self.collate_fn, channel)
        )

    def _start_method(self) -> str:
        """How worker processes start: the given context's method, or Python's default."""
        context = self.multiprocessing_context or multiprocessing.get_context()
        return context.get_start_method()

    def build_now(self, index: int) -> Any:
        """Build batch ``index`` (of the unshuffled order) in the calling thread."""
        if not self._indexable:
            raise TypeError("a plain iterable has no batch index")
        if self.batch_size is None:
            return self._source[index]
        start = index * self.batch_size
        stop = min(start + self.batch_size, _length(self._source))
        return make_batch(self._source, list(range(start, stop)), self.batch_size, self.collate_fn)

    # --- the handle ----------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """The current depth: batches allowed to be being built or ready."""
        epoch = self._epoch
        return epoch.controller.depth if epoch is not None else self.start_depth

    def trace(self) -> Trace:
        """What was recorded: batches built and taken, and every depth decision."""
        return self.recorder.trace()

    def report(self) -> Any:
        """The probe's report of everything recorded so far."""
        from ..analysis import analyze

        return analyze(self.trace())

    def close(self) -> None:
        """Stop the workers of the current epoch and the helper threads (idempotent).

        Called from another thread while the consumer waits for a batch, it wakes
        the consumer with :class:`PrefetcherClosed` at once; a build still running
        in a worker thread finishes in the background and is dropped.
        """
        self._closed = True
        epoch = self._epoch
        elsewhere = epoch is not None and epoch.consumer not in (None, threading.get_ident())
        self._end_epoch("close() was called", wait=not elsewhere)
        if not (elsewhere and epoch.running):  # type: ignore[union-attr]
            self._finalizer()
        # else the consumer, woken, closes the recorder as it leaves the epoch

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Epoch:
    """One pass: the plan, the workers, the byte account, the depth controller."""

    def __init__(self, owner: Prefetcher) -> None:
        self.owner = owner
        self.recorder = owner.recorder
        # Re-entrant: a future that is already done runs its callback at once,
        # in the thread that adds it, which holds the lock.
        self.lock = threading.RLock()
        self.controller = DepthController(
            depth=owner.start_depth,
            max_depth=owner.max_depth if owner.adaptive else owner.start_depth,
        )
        self.tasks: dict[int, _Task] = {}
        self.submitted = 0
        # Seconds from submitting a batch to its being built, of the latest batches.
        self.builds: deque[float] = deque(maxlen=STEP_WINDOW)
        self.delivered = 0
        self.ready = 0
        self.held = 0
        self.reserved = 0
        self.error: BaseException | None = None
        self.stopped = False
        self.exhausted = False
        self.reason = ""
        # Done when the epoch is stopped: wakes a consumer waiting for a batch.
        self.wakeup: cf.Future = cf.Future()
        self.consumer: int | None = None
        self.running = False
        self.plan: list[Any] | None = owner._plan() if owner._indexable else None
        self.total: int | None = None if self.plan is None else len(self.plan)
        self.workers = owner._new_workers()

    # --- scheduling (under self.lock) ---------------------------------------------------

    def _estimate(self) -> int:
        return self.owner._largest

    def _outstanding(self) -> int:
        return self.submitted - self.delivered

    def _can_start(self) -> bool:
        if self.stopped or self.error is not None or self.exhausted:
            return False
        if self.total is not None and self.submitted >= self.total:
            return False
        outstanding = self._outstanding()
        if outstanding >= self.controller.depth:
            return False
        estimate = self._estimate()
        if not self.owner._sized:  # nothing built yet: learn the size from one batch
            return outstanding == 0
        return self.held + self.reserved + estimate <= self.owner.max_bytes

    def _fill(self) -> None:
        while self._can_start():
            position = self.submitted
            indices = self.plan[position] if self.plan is not None else None
            task = _Task(position, indices, self._estimate(), submitted_at=clock())
            self.tasks[position] = task
            self.reserved += task.reserved
            self.submitted += 1
            self._submit(task)

    def _submit(self, task: _Task) -> None:
        task.future = self.workers.submit(task.indices)
        task.future.add_done_callback(functools.partial(self._built, task))

    def _built(self, task: _Task, future: cf.Future) -> None:
        try:
            self._account(task, future)
        finally:
            task.accounted.set()

    def _account(self, task: _Task, future: cf.Future) -> None:
        with self.lock:
            self.reserved -= task.reserved
            if future.cancelled():
                return
            if future.exception() is not None:
                return
            batch = future.result()
            if batch is END:
                self.exhausted = True
                task.size = 0
                return
            self.builds.append(clock() - task.submitted_at)
            if self.stopped:
                self.workers.discard(batch)
                return
            size = self.workers.size(batch)
            task.size = size
            self.held += size
            self.ready += 1
            owner = self.owner
            if self.error is None:  # the first fault is the one to report
                self.error = self._budget_fault(task, size)
            owner._largest = max(owner._largest, size)
            owner._sized = True
            self._fill()

    def _budget_fault(self, task: _Task, size: int) -> BudgetExceeded | None:
        """The error if the batch just built breaks the budget (before ``_largest`` takes it in)."""
        owner = self.owner
        if size > owner.max_bytes:
            return BudgetExceeded(
                f"a batch of {format_bytes(size)} ({size} bytes) does not fit in max_bytes="
                f"{format_bytes(owner.max_bytes)} ({owner.max_bytes} bytes)"
            )
        if self.held + self.reserved > owner.max_bytes:
            return BudgetExceeded(
                f"batch {task.position} is {format_bytes(size)}, larger than any before "
                f"({format_bytes(owner._largest)}): with it, {format_bytes(self.held + self.reserved)} "
                f"would be in flight, over max_bytes={format_bytes(owner.max_bytes)}"
            )
        return None

    # --- the consumer ------------------------------------------------------------------

    def run(self) -> Iterator[Any]:
        recorder = self.recorder
        self.consumer = threading.get_ident()
        self.running = True
        abandoned = False
        recorder.run_begin()
        recorder.mark("depth", self.controller.depth)
        try:
            with self.lock:
                self._fill()
            steps: deque[float] = deque(maxlen=STEP_WINDOW)
            got = None
            while True:
                asked = clock()
                if got is not None:
                    steps.append(asked - got)
                found = self._next_task()
                if found is None:
                    return
                task, seen = found
                batch = self._take(task)
                if batch is END:
                    return
                got = clock()
                step = statistics.median(steps) if steps else None
                with self.lock:
                    # A stall leaves the workers idle while it lasts, even when
                    # they were all busy when it was asked for.
                    stalled = self._stalled(step)
                    changed = self.controller.observe(
                        seen.waited,
                        seen.full,
                        can_grow=seen.can_grow or stalled,
                        limit=seen.limit,
                        wait=got - asked if stalled else None,
                        step=step,
                    )
                    if changed is not None:
                        recorder.mark("depth", changed)
                samples = task.indices if isinstance(task.indices, list) else None
                recorder.consumed(asked, got, nbytes=task.size, key=_key(task), samples=samples)
                with self.lock:
                    self._fill()
                yield batch
        except GeneratorExit:
            raise
        except BaseException as exc:
            recorder.error(exc)
            abandoned = True
            raise
        finally:
            # After a fault, do not wait for builds still running in worker threads.
            self.stop("the epoch ended", wait=not abandoned)
            recorder.run_end()
            self.running = False
            if self.owner._closed:
                self.owner._finalizer()

    def _stalled(self, step: float | None) -> bool:
        """Whether the batch just handed over was a stall that more depth can cover.

        It alone held up the ones behind it: in order, with every batch behind
        it (if any) already built (a stall, not a depth too small for the load). And the
        other workers outpace the consumer (typical build < (workers - 1) x
        step), so batches can pile up behind the next stall; otherwise the
        queue never fills and more depth is memory the workers cannot use. Out
        of order, the others are handed over meanwhile: a wait says nothing.
        """
        if not (self.owner.ordered and self.owner._indexable) or step is None or not self.builds:
            return False
        if statistics.median(self.builds) >= (self.workers.count - 1) * step:
            return False
        behind = [t for t in self.tasks.values() if not t.taken]
        return all(t.future.done() for t in behind)  # type: ignore[union-attr]

    def _next_task(self) -> tuple[_Task, _Seen] | None:
        """The task to hand over next, and what the request found before waiting."""
        with self.lock:
            if self.stopped:
                raise self._closed_error()
            if self.total is not None and self.delivered >= self.total:
                return None
            self._fill()
            if self.owner.ordered or not self.owner._indexable:
                task = self.tasks.get(self.delivered)
                pending = [] if task is None else [task]
            else:
                pending = [t for t in self.tasks.values() if not t.taken]
            if not pending:
                if self.error is not None:
                    raise self.error
                if self.exhausted:
                    return None
                raise RuntimeError("prefetcher has nothing to wait for before the end of the epoch")
            ready = [t for t in pending if t.future.done()]  # type: ignore[union-attr]
            # Depth helps only while a worker sits idle for the lack of it, not
            # for the lack of batches left to start (the epoch's end).
            building = len([t for t in self.tasks.values() if t.future is not None and not t.future.done()])
            left = not self.exhausted and (self.total is None or self.submitted < self.total)
            estimate = self._estimate()
            seen = _Seen(
                waited=not ready,
                full=self.ready >= self.controller.depth,
                can_grow=building < self.workers.count and left,
                # Before the first batch is built its size is unknown: no deeper yet.
                limit=self.owner.max_bytes // estimate if estimate else (None if self.owner._sized else 1),
            )
        if ready:
            return ready[0], seen
        timeout = self.owner.timeout
        futures = [t.future for t in pending]
        deadline = None if timeout is None else clock() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - clock())
            # In slices, to see a dead worker process even if the pool does not.
            poll = self.workers.poll
            piece = remaining if poll is None else min(poll if remaining is None else remaining, poll)
            done, _ = cf.wait([*futures, self.wakeup], timeout=piece, return_when=cf.FIRST_COMPLETED)  # type: ignore[list-item]
            if self.wakeup.done():
                raise self._closed_error()
            if done or (deadline is not None and clock() >= deadline):
                break
            if self.workers.dead():
                raise self._died(pending[0])
        if not done:
            if len(pending) == 1:
                what = f"{_describe(pending[0])} was"
            else:
                what = "none of batches " + ", ".join(str(t.position) for t in pending) + " was"
            raise TimeoutError(f"{what} not ready within timeout={timeout:g} s; the epoch is stopped")
        return next(t for t in pending if t.future in done), seen

    def _closed_error(self) -> PrefetcherClosed:
        return PrefetcherClosed(
            f"the epoch was stopped while its consumer was reading it ({self.reason}); "
            f"{self.delivered} batches had been delivered"
        )

    def _died(self, task: _Task) -> WorkerDied:
        dead = self.workers.deaths()
        who = "; ".join(dead) if dead else "its pid and exit code are unknown"
        return WorkerDied(
            f"a worker process of the prefetcher died ({who}) while {_describe(task)} was being "
            "built or queued; the epoch is stopped and its workers are gone (the next for loop "
            "starts new ones)"
        )

    def _failed(self, task: _Task, exc: BaseException) -> BaseException | None:
        """Our clearer error for a worker process's fault, or None to re-raise it."""
        if isinstance(exc, BrokenProcessPool):
            return self._died(task)
        if self.workers.unsendable(exc):
            return TypeError(
                f"{_describe(task)} could not be sent back from its worker process ({type(exc).__name__}: "
                f"{exc}): with mode='process' a batch must be picklable; use mode='thread'"
            )
        return None

    def _take(self, task: _Task) -> Any:
        future = task.future
        assert future is not None
        if self.stopped or future.cancelled():
            raise self._closed_error()
        try:
            batch = future.result()
        except Exception as exc:
            ours = self._failed(task, exc)
            if ours is None:
                raise
            raise ours from exc
        task.accounted.wait()
        # The future's callback holds the task: let go of the future, or the
        # batch lives on in that cycle until the garbage collector runs.
        task.future = None
        with self.lock:
            if self.error is not None:
                raise self.error
            if self.stopped:
                raise self._closed_error()
            task.taken = True
            del self.tasks[task.position]
            if batch is END:
                return END
            self.delivered += 1
            self.ready -= 1
            self.held -= task.size or 0
            # Under the lock: a stop() from another thread sweeps the files.
            return self.workers.adopt(batch)

    def stop(self, reason: str = "the epoch ended", wait: bool = True) -> None:
        """Cancel what is not started, drop what is built, stop the workers.

        ``wait=False``: do not wait for builds running in worker threads (they
        finish in the background and are dropped); worker processes are always
        stopped and waited for.
        """
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
            self.reason = reason
            tasks = list(self.tasks.values())
        self.wakeup.set_result(None)
        for task in tasks:
            if task.future is not None:
                task.future.cancel()
        self.workers.shutdown(wait, [task.future for task in tasks if task.future is not None])
        with self.lock:
            self.tasks.clear()
            self.held = self.reserved = self.ready = 0


def _describe(task: _Task) -> str:
    """A batch as its position in the epoch and what it is made of."""
    if isinstance(task.indices, int):
        return f"batch {task.position} of the epoch (index {task.indices})"
    if isinstance(task.indices, list) and task.indices:
        return f"batch {task.position} of the epoch (samples {task.indices[0]}, ...)"
    return f"batch {task.position} of the epoch"


def _check_context(value: Any, mode: str) -> multiprocessing.context.BaseContext | None:
    if value is None:
        return None
    if mode != "process":
        raise ValueError("multiprocessing_context needs mode='process': thread mode starts no process")
    if isinstance(value, str):
        methods = multiprocessing.get_all_start_methods()
        if value not in methods:
            raise ValueError(
                f"multiprocessing_context must be one of {', '.join(map(repr, methods))} "
                f"or a multiprocessing context, got {value!r}"
            )
        return multiprocessing.get_context(value)
    if isinstance(value, multiprocessing.context.BaseContext):
        return value
    raise TypeError(
        f"multiprocessing_context must be a start method name or a multiprocessing context, got {type(value).__name__}"
    )


def _check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")
    return float(timeout)


def _key(task: _Task) -> Any:
    if task.indices is None:
        return None
    return tuple(task.indices) if isinstance(task.indices, list) else task.indices


def _close_all(recorder: Recorder, pid: int) -> None:
    recorder.close()
    if os.getpid() == pid:
        from . import shm

        if shm.available():
            shm.sweep(pid)


def _indexable(source: Any) -> bool:
    if not hasattr(source, "__getitem__") or isinstance(source, (str, bytes, dict)):
        return False
    try:
        _length(source)
    except TypeError:
        return False
    return True


def _length(source: Any) -> int:
    count = getattr(source, "num_batches", None) if is_pydataset(source) else None
    if count is None:
        count = len(source)
    return int(count)
