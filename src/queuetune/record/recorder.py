"""Recording: the events a probe collects, from worker threads, worker processes
and the consumer, turned into a :class:`~queuetune.record.trace.Trace` on demand."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psutil

from ..common import cores
from .channel import Built, Channel, Live, built_here, key_of
from .clock import busy_time, clock
from .sampler import OWN_HELPERS, MemorySampler, multiprocessing_helpers
from .snapshot import as_trace, live_of
from .trace import Consumed, Mark, MarkKind, MemorySample, Trace, TraceMeta

__all__ = [
    "OWN_HELPERS",
    "SAMPLE_KEYS_PER_RUN",
    "Built",
    "Channel",
    "Live",
    "MemorySampler",
    "Recorder",
    "built_here",
    "busy_time",
    "clock",
    "key_of",
    "multiprocessing_helpers",
    "recorded",
]


#: Sample keys kept a run (8 MiB as int64; about 44 MiB as Python ints):
#: beyond it, batches are recorded without them and a ``samples_capped`` mark
#: says from when, so coverage covers the run's first keys only.
SAMPLE_KEYS_PER_RUN = 2**20


class _Store:
    """Where built batches land (the channel's sink): keeps at most
    ``SAMPLE_KEYS_PER_RUN`` sample keys a run (``keys``: those kept since the
    run began). It holds the recorder's lists, not the recorder, so that a
    recorder nobody holds is collected and its finalizer stops its threads."""

    def __init__(self, produced: list[Built], marks: list[Mark]) -> None:
        self.produced, self.marks, self.keys = produced, marks, 0

    def __call__(self, record: Built) -> None:
        samples = record.samples
        if samples is not None:
            if self.keys + len(samples) > SAMPLE_KEYS_PER_RUN:
                if self.keys <= SAMPLE_KEYS_PER_RUN:
                    self.keys = SAMPLE_KEYS_PER_RUN + 1
                    self.marks.append(Mark(clock(), "samples_capped", SAMPLE_KEYS_PER_RUN))
                record = record._replace(samples=None)
            else:
                self.keys += len(samples)
        self.produced.append(record)


class Recorder:
    """Collects produced and consumed events and consumer marks for one loader.

    With ``keep_runs=N`` only the last N runs are kept: when a run begins, the
    records from before the oldest kept run are let go (``meta.forgotten_runs``
    counts the runs dropped), so a loader that runs for weeks does not grow its
    records without end. Runs must then follow one another, as a prefetcher's
    epochs do. ``processes``: the loader builds batches in worker processes, whose
    records come through a pipe and whose memory is sampled with this process's.

    >>> rec = Recorder(TraceMeta(loader="demo"), sample_memory=False)
    >>> rec.run_begin(); t = clock(); rec.produced(t, t, 8, index=0)
    >>> rec.consumed(t, t, nbytes=8); rec.run_end()
    >>> len(rec.trace().produced), len(rec.trace().consumed)
    (1, 1)
    >>> rec.close()
    """

    def __init__(
        self,
        meta: TraceMeta,
        *,
        processes: bool = False,
        sample_memory: bool = True,
        memory_interval: float = 0.05,
        keep_runs: int | None = None,
        sample_across_runs: bool = False,
    ) -> None:
        if keep_runs is not None and (not isinstance(keep_runs, int) or isinstance(keep_runs, bool) or keep_runs < 1):
            raise ValueError(f"keep_runs must be a positive integer or None, got {keep_runs!r}")
        self.keep_runs = keep_runs
        self.meta = meta
        if sample_memory:
            self.meta.extra.setdefault("host_memory", psutil.virtual_memory().total)
            self.meta.extra.setdefault("cores", cores.available())
        self.start = clock()
        self._produced: list[Built] = []
        self._consumed: list[Consumed] = []
        self._marks: list[Mark] = []
        self._memory: list[MemorySample] = []
        # Records let go with keep_runs, so far (read with the lists by another thread: a lock).
        self._consumed_gone = self._marks_gone = 0
        self._cutting = threading.Lock()
        self._store = _Store(self._produced, self._marks)
        self.channel = Channel(self._store, processes)
        self._sampler = MemorySampler(self._memory.append, memory_interval, processes) if sample_memory else None
        # Sampling goes on from the first run to close() (workers that outlive a run), else run by run.
        self._sample_across_runs = sample_across_runs
        self.run = -1
        self.epoch = -1
        self._active = 0
        self._epoch_open = False
        self.consumer = "iterator"
        #: Called where what was recorded is to be written now (``queuetune run``'s journal):
        #: as the loader's state is taken (see :meth:`checkpoint`), and before old runs are let go.
        self.on_flush: Callable[[], None] | None = None
        self._finalizer = weakref.finalize(self, _shutdown, self.channel, self._sampler)

    def produced(
        self,
        start: float,
        end: float,
        nbytes: int,
        index: int | None = None,
        key: Any = None,
        samples: tuple[int, ...] | None = None,
        busy: float | None = None,
    ) -> None:
        """Record a batch built between ``start`` and ``end`` (call it where it was
        built), with its samples' keys and its busy seconds where they are known."""
        self.channel.emit(built_here(start, end, nbytes, index, key, samples, busy))

    def consumed(
        self,
        requested: float,
        consumed: float,
        *,
        nbytes: int | None = None,
        key: Any = None,
        samples: list[int] | None = None,
        rows: int | None = None,
    ) -> None:
        """Record a batch handed to the consumer, asked for at ``requested``."""
        if self.run < 0:
            self.run_begin(requested)
        if not self._epoch_open:
            self.epoch_begin(requested)
        self._consumed.append(Consumed(requested, consumed, self.run, self.epoch, nbytes, key_of(key), samples, rows))

    def mark(self, kind: MarkKind, value: Any = None, t: float | None = None) -> None:
        self._marks.append(Mark(clock() if t is None else t, kind, value))

    def checkpoint(self) -> None:
        """Note that the loader's state was taken (a ``checkpoint`` mark), and tell
        :attr:`on_flush`, in this thread: what it hands over after is replayed
        where a run resumes from that state."""
        self.mark("checkpoint")
        if self.on_flush is not None:
            self.on_flush()

    def error(self, exc: BaseException) -> None:
        """Note an error that reached the consumer (the trace keeps what came before)."""
        self.mark("error", f"{type(exc).__name__}: {exc}")

    def run_begin(self, t: float | None = None) -> None:
        """A consuming loop starts (a ``fit``/``predict`` call, a ``for`` loop)."""
        self.run += 1
        self._active += 1
        self._store.keys = 0
        self.mark("run_begin", self.run, t)
        if self.keep_runs is not None and self._active == 1:
            self._forget(self.keep_runs)
        if self._sampler is not None:
            self._sampler.start()

    def run_end(self, t: float | None = None) -> None:
        if self._active == 0:
            return
        if self._epoch_open:
            self.epoch_end(t)
        self._active -= 1
        self.mark("run_end", self.run, t)
        if self._active == 0 and self._sampler is not None and not self._sample_across_runs:
            self._sampler.stop()

    def workers_ending(self) -> None:
        """Read the process tree now, while a run is on: the loader's worker
        processes are about to end, and this is their last reading, at their
        most grown (a worker that copies what it reads grows to its end, and
        the sampler's own readings, a fraction of a second apart, may all have
        come before that)."""
        if self._sampler is not None and self._active:
            self._sampler.read_now()

    def epoch_begin(self, t: float | None = None) -> None:
        if self._epoch_open:
            self.epoch_end(t)
        self.epoch += 1
        self._epoch_open = True
        self.mark("epoch_begin", self.epoch, t)

    def epoch_end(self, t: float | None = None) -> None:
        if self._epoch_open:
            self._epoch_open = False
            self.mark("epoch_end", self.epoch, t)

    def _forget(self, keep: int) -> None:
        """Let go of what was recorded before the last ``keep`` runs began."""
        begins = [m for m in self._marks if m.kind == "run_begin"]
        if len(begins) <= keep:
            return
        oldest = begins[-keep]
        cutoff = oldest.t
        self.channel.flush()
        if self.on_flush is not None:
            self.on_flush()
        # Each list is in the order it was recorded and earlier runs have ended:
        # what goes is a prefix, cut with `del` so a concurrent append is not lost.
        _cut_before(self._produced, lambda r: r.start, cutoff)
        _cut_before(self._memory, lambda m: m.t, cutoff)
        with self._cutting:
            self._consumed_gone += _cut_before(self._consumed, lambda c: c.requested, cutoff)
            marks = len(self._marks)
            self._marks[:] = [m for m in self._marks if m.t >= cutoff]
            self._marks_gone += marks - len(self._marks)
        self.meta.forgotten_runs = int(oldest.value)
        self.start = cutoff

    def produced_count(self) -> int:
        """Batches recorded as built so far (records still in the pipe included)."""
        self.channel.flush()
        return len(self._produced)

    @property
    def active(self) -> bool:
        return self._active > 0

    def consumed_from(self, start: int) -> list[Consumed]:
        """The batches handed over from the ``start``-th on (counted from the
        first, those let go with ``keep_runs`` too), as recorded so far."""
        with self._cutting:
            return self._consumed[max(0, start - self._consumed_gone) :]

    def marks_from(self, start: int) -> list[Mark]:
        """The marks from the ``start``-th on (counted as :meth:`consumed_from` does)."""
        with self._cutting:
            return self._marks[max(0, start - self._marks_gone) :]

    def live(self, window: float = 2.0, now: float | None = None) -> Live:
        """:class:`Live`: the last ``window`` seconds, read without a copy of the
        records (a batch built and not yet taken counts as in flight; records
        still in a worker's pipe count once they arrive).

        >>> rec = Recorder(TraceMeta(), sample_memory=False)
        >>> t = rec.start + 2; rec.produced(t, t, 8); rec.produced(t, t, 8); rec.consumed(t - 0.5, t)
        >>> live = rec.live(window=2.0, now=t + 1.0)
        >>> live.in_flight, live.in_flight_bytes, live.rate, live.waiting
        (1, 8, 0.5, 0.25)
        >>> rec.close()
        """
        now = clock() if now is None else now
        return live_of(self._produced, self._consumed, self._memory, self.start, window, now)

    def trace(self) -> Trace:
        """A snapshot of everything recorded so far, as plain data."""
        self.channel.flush()
        return as_trace(self.meta, self.start, self._produced, self._consumed, self._marks, self._memory)

    def close(self) -> None:
        """End any open run and stop the helper threads (idempotent)."""
        while self._active:
            self.run_end()
        self._finalizer()


_R = TypeVar("_R")


def _cut_before(records: list[_R], when: Callable[[_R], float], cutoff: float) -> int:
    """Drop the records before the first one ``when`` places at ``cutoff`` or later; how many."""
    cut = next((i for i, r in enumerate(records) if when(r) >= cutoff), len(records))
    del records[:cut]
    return cut


def _shutdown(channel: Channel, sampler: MemorySampler | None) -> None:
    if sampler is not None:
        sampler.stop()
    channel.close()


def recorded(
    source: Iterator[Any],
    recorder: Recorder,
    record: Callable[[float, float, Any], None],
    close_source: bool = False,
) -> Iterator[Any]:
    """A generator over ``source`` that times each ``next`` and passes (asked, got,
    batch) to ``record`` before handing the batch on. Unless a callback records
    consumption, the pass is one run. An error from ``source`` is noted on the
    recorder and raised; with ``close_source`` the source is closed when the
    generator ends.

    >>> rec = Recorder(TraceMeta(), sample_memory=False)
    >>> seen = []
    >>> list(recorded(iter("ab"), rec, lambda asked, got, batch: seen.append(batch)))
    ['a', 'b']
    >>> seen, [m.kind for m in rec.trace().marks]
    (['a', 'b'], ['run_begin', 'run_end'])
    >>> rec.close()
    """
    own_runs = recorder.consumer == "iterator"
    if own_runs:
        recorder.run_begin()
    try:
        while True:
            asked = clock()
            try:
                out = [next(source)]
            except StopIteration:
                return
            record(asked, clock(), out[0])
            # Yielded by a pop: while waiting at the yield the generator holds no
            # batch, so one the consumer lets go is freed then, as without it.
            yield out.pop()
    except GeneratorExit:
        raise
    except BaseException as exc:
        recorder.error(exc)
        raise
    finally:
        if close_source:
            close = getattr(source, "close", None)
            if close is not None:
                close()
        if own_runs:
            recorder.run_end()
