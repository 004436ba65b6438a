"""Where the loader's memory went: the tree's real memory (see
:mod:`queuetune.record.real_memory`) at each reading split by cause, and the workers
whose unique memory grows with the samples they read (copy-on-read).

Pure functions of a :class:`~queuetune.record.trace.Trace` and its in-flight series;
:func:`queuetune.analysis.report.analyze` takes the report's :class:`Memory` from :func:`memory_of`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..record.trace import MemorySample, Trace

MiB = 2**20
#: A worker's unique memory must grow at least this much, and at least this share
#: of its baseline, along the samples it reads, to be named as copying what it reads.
GROWTH_BYTES = 8 * MiB
GROWTH_SHARE = 0.10
#: Growth where the dataset holds no Python objects to copy (a cache, a leak) is
#: named from this much, where the later half of the readings holds this share of it.
OTHER_GROWTH_BYTES = 64 * MiB
LATER_SHARE = 0.25
#: How closely its growth must follow the samples it read (Pearson's r).
GROWTH_FIT = 0.8
#: The bytes a read copies at least: the page its object lies on.
PAGE = 4096
#: What a torch worker writes of its own from its fork to its first batch built,
#: at most (some 10 MiB; a CI run read 12 MiB): growth counted from before that
#: batch is named only beyond it.
WARMING_UP_BYTES = 16 * MiB
#: The fewest readings that can show shared memory growing as a trend.
TREND_READINGS = 6
#: Said once where memory was sampled on a system with no PSS to read.
NO_PSS = (
    "real memory (PSS) needs Linux's /proc/PID/smaps_rollup, which this system does not give: "
    "the report has the process's RSS and its workers' unique memory only"
)
#: What a worker that copies what it reads is to do instead.
COPY_ON_READ_FIX = (
    "hold the samples in numpy arrays, Arrow tables or one bytes object with offsets: "
    "no per-object reference counts, so reading them copies nothing"
)


@dataclass
class Causes:
    """One reading of the tree's real memory (``total``, bytes), split by cause:
    ``in_flight`` (batches built and not yet released: the queue),
    ``worker_baseline`` (each worker's unique memory at its first reading: its
    imports, its own state), ``worker_growth`` (each worker's unique memory
    since: what it copied or allocated), ``shared_beyond`` (shared-memory
    files beyond the batches in flight: a pool, or a leak), and ``consumer``
    (the rest: the consumer process, and the pages the workers share with it).
    ``t``: seconds from the trace's start; ``workers``: the worker processes read."""

    t: float
    total: int
    in_flight: int
    worker_baseline: int
    worker_growth: int
    shared_beyond: int
    consumer: int
    workers: int = 0


@dataclass
class Growth:
    """A worker whose unique memory grew along the samples it read: by
    ``bytes`` to ``held``, at ``per_1000_samples`` bytes per 1,000 samples, over ``samples``
    read; ``heading``: what it would hold having read every sample (None where
    the dataset's length is unknown); ``copy_on_read``: whether the worker was
    forked from a process whose dataset holds many Python objects (so the
    growth is pages of those objects copied as they are read), rather than
    spawned, or reading a dataset without them (a cache, a leak)."""

    worker: str
    bytes: int
    held: int
    per_1000_samples: float
    samples: int
    heading: int | None
    copy_on_read: bool
    #: The clock times of the first and the last reading the growth is over.
    span: tuple[float, float] = (0.0, 0.0)
    #: What ``samples`` counts: samples, or batches where the loader's batch size is
    #: not known (a Keras ``PyDataset``), and so ``per_1000_samples`` too.
    unit: str = "samples"


@dataclass
class MemoryUse:
    """The tree's real memory over the run (see :class:`Causes`): each reading's
    split (``series``), the reading of the highest total (``peak``), the
    workers that grew with what they read (``growing``), the likely cause in
    the dataset (``containers``: its attributes that hold many Python objects),
    where the growing workers are heading all together (``heading_bytes``,
    against ``host_bytes``, the machine's memory), and ``notes``."""

    readings: int
    peak: Causes | None
    series: list[Causes] = field(default_factory=list)
    growing: list[Growth] = field(default_factory=list)
    containers: dict[str, str] = field(default_factory=dict)
    heading_bytes: int | None = None
    host_bytes: int | None = None
    notes: list[str] = field(default_factory=list)
    #: Whether the workers were forked (None where unknown): only then can they copy by reading.
    forked: bool | None = None
    #: How much the shared memory beyond the batches in flight grew, from the first
    #: reading to its highest, where that is at least ``GROWTH_BYTES`` (a pool that
    #: grows, or a leak; workers that end take theirs with them).
    shared_growth: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryUse:
        """Read back what ``asdict`` wrote (a saved report)."""
        fields = dict(data)
        fields["peak"] = Causes(**data["peak"]) if data.get("peak") else None
        fields["series"] = [Causes(**c) for c in data.get("series", [])]
        fields["growing"] = [Growth(**{**g, "span": tuple(g.get("span", (0.0, 0.0)))}) for g in data.get("growing", [])]
        return cls(**fields)

    @property
    def copy_on_read(self) -> bool:
        """Whether workers were named copying what they read: forked workers of a
        dataset of Python objects whose own memory grew with the samples they read.

        >>> g = Growth("7", 50 * MiB, 60 * MiB, 2 * MiB, 25_000, None, True)
        >>> MemoryUse(5, None, growing=[g]).copy_on_read, MemoryUse(5, None).copy_on_read
        (True, False)
        """
        return bool(self.growing) and all(g.copy_on_read for g in self.growing)

    def short(self) -> str | None:
        """The finding in a few words, for a headline (None without one).

        >>> g = Growth("7", 50 * MiB, 60 * MiB, 2 * MiB, 25_000, 75 * MiB, True)
        >>> MemoryUse(5, None, growing=[g], heading_bytes=472 * MiB).short()
        'workers copy what they read (copy-on-read), +50 MiB so far, heading for 472 MiB in all'
        """
        if not self.growing:
            return self._shared() if self.shared_growth else None
        forked = all(g.copy_on_read for g in self.growing)
        text = "workers copy what they read (copy-on-read)" if forked else "workers grow with what they read"
        text += f", +{sum(g.bytes for g in self.growing) / MiB:,.0f} MiB so far"
        if self.heading_bytes is not None:
            text += f", heading for {self.heading_bytes / MiB:,.0f} MiB in all"
        return text

    def finding(self) -> str | None:
        """The copy-on-read finding in words, and shared memory that grows
        (None without either).

        >>> MemoryUse(1, None).finding() is None
        True
        >>> MemoryUse(1, None, shared_growth=64 * MiB).finding()
        'shared memory beyond the batches in flight grew by 64 MiB: a pool that grows, or files left behind'
        """
        if not self.growing:
            return self._shared() if self.shared_growth else None
        forked = all(g.copy_on_read for g in self.growing)
        what = "copy what they read (copy-on-read)" if forked else "grow with what they read"
        if self.forked is False:
            what += " (they were not forked, so it is not copy-on-read: a cache, or a leak)"
        each = []
        for g in self.growing:
            line = (
                f"worker {g.worker} +{g.bytes / MiB:,.0f} MiB over {g.samples:,} {g.unit} "
                f"({g.per_1000_samples / MiB:.2f} MiB per 1,000)"
            )
            if g.heading is not None:
                line += f", heading for {g.heading / MiB:,.0f} MiB"
            each.append(line)
        text = f"workers {what}: " + "; ".join(each)
        if self.heading_bytes is not None:
            text += f", heading for {self.heading_bytes / MiB:,.0f} MiB together"
            if self.host_bytes:
                fits = "which fits" if self.heading_bytes < self.host_bytes else "more than"
                text += f" ({fits} the machine's {self.host_bytes / MiB:,.0f} MiB)"
        if self.containers:
            held = "; ".join(f"{name}: {what}" for name, what in self.containers.items())
            text += f"; the dataset holds {held}"
        if forked:
            text += "; " + COPY_ON_READ_FIX
        return text + ("; " + self._shared() if self.shared_growth else "")

    def _shared(self) -> str:
        grew = f"{self.shared_growth / MiB:,.0f} MiB"
        return f"shared memory beyond the batches in flight grew by {grew}: a pool that grows, or files left behind"


@dataclass(frozen=True)
class Memory:
    """The report's section of memory: the peaks of the process's RSS, of its
    workers' unique memory and of both (None where memory was not sampled), and
    the tree's real memory by cause (``memory``; None where it was not read)."""

    peak_rss_bytes: int | None
    peak_children_bytes: int | None
    peak_total_bytes: int | None
    memory: MemoryUse | None


def memory_of(trace: Trace, flight_times: list[float], flight_bytes: list[int]) -> Memory:
    """The memory section of ``trace``, with the bytes in flight as in :func:`memory_use`.

    >>> m = memory_of(Trace(memory=[MemorySample(1.0, 50, 7, 0)]), [], [])
    >>> m.peak_rss_bytes, m.peak_children_bytes, m.peak_total_bytes, m.memory
    (50, 7, 57, None)
    """
    return Memory(
        peak_rss_bytes=max((m.rss for m in trace.memory), default=None),
        peak_children_bytes=max((m.children for m in trace.memory), default=None),
        peak_total_bytes=max((m.rss + m.children for m in trace.memory), default=None),
        memory=memory_use(trace, flight_times, flight_bytes),
    )


def memory_use(trace: Trace, flight_times: list[float], flight_bytes: list[int]) -> MemoryUse | None:
    """The tree's memory of ``trace`` by cause, with the bytes in flight as the
    step function ``flight_times``/``flight_bytes``; None where the trace has no
    reading of the tree (version 1, memory sampling off, not Linux).

    >>> from queuetune.record.trace import Produced
    >>> t = Trace(memory=[MemorySample(1.0, 50, 0, 0, pss=40, uss=30, shm=0, shared=0, workers=[[7, 20, 10, 0]])])
    >>> use = memory_use(t, [0.5], [5])
    >>> (use.peak.total, use.peak.in_flight, use.peak.worker_baseline, use.peak.consumer)
    (60, 5, 10, 45)
    """
    readings = [m for m in trace.memory if m.pss is not None and m.workers is not None]
    if not readings:
        if trace.memory and "host_memory" in (trace.meta.extra or {}):
            return MemoryUse(0, None, notes=[NO_PSS])
        return None
    baseline: dict[int, int] = {}
    series = []
    for m in readings:
        assert m.workers is not None and m.pss is not None
        own = {pid: _own(uss, shm) for pid, _, uss, shm in m.workers}
        for pid, uss in own.items():
            baseline.setdefault(pid, uss)
        total = m.total or 0
        # Below 0 where a consumed batch's production was not recorded (a trace cut short).
        flying = max(0, _at(flight_times, flight_bytes, m.t))
        base = sum(min(baseline[pid], uss) for pid, uss in own.items())
        growth = sum(max(0, uss - baseline[pid]) for pid, uss in own.items())
        shared_beyond = max(0, (m.shared or 0) - flying)
        in_flight = min(flying, total)
        rest = max(0, total - in_flight - base - growth - shared_beyond)
        series.append(Causes(m.t - trace.start, total, in_flight, base, growth, shared_beyond, rest, len(own)))
    peak = max(series, key=lambda c: c.total)
    extra: dict[str, Any] = trace.meta.extra or {}
    use = MemoryUse(len(series), peak, series, containers=dict(extra.get("containers") or {}))
    use.host_bytes = extra.get("host_memory")
    # Copy-on-read where forked workers read a dataset of many Python objects;
    # other growth (a cache, a leak in the worker's heap) is growth alone.
    use.forked = extra.get("forked")
    copying = bool(extra.get("forked", True)) and bool(use.containers)
    use.growing = _growing(trace, readings, copying, extra.get("objects_bytes") or None)
    use.shared_growth = _shared_growth(trace, series)
    if use.growing and all(g.heading is not None for g in use.growing):
        use.heading_bytes = peak.total + sum(max(0, (g.heading or 0) - g.held) for g in use.growing)
    return use


def _shared_growth(trace: Trace, series: list[Causes]) -> int:
    """How much the shared memory beyond the batches in flight grew along the
    batches built, where a trend over the readings shows it (0 otherwise).

    The readings taken while workers live, from when an eighth of the batches
    were built (the start's first segments are not growth), must be at least
    ``TREND_READINGS``, follow the batches built (Pearson's r at least
    ``GROWTH_FIT``), and their lowest in the last third must stand above their
    highest in the first third (a reading caught at a spike is no trend) by at
    least ``GROWTH_BYTES`` and four batches, beyond what the loader's own queue
    can hold in transit (``meta.depth`` batches: a DataLoader's tensors in
    shared memory on their way to the consumer, which are not yet built or
    already taken as the trace counts them).

    >>> from queuetune.record.trace import Produced, TraceMeta
    >>> t = Trace(meta=TraceMeta(depth=2), produced=[Produced(i, i + 0.5, MiB) for i in range(12)])
    >>> grow = [Causes(i + 1.0, 0, 0, 0, 0, i * 16 * MiB, 0, workers=2) for i in range(9)]
    >>> _shared_growth(t, grow) // MiB
    112
    >>> spike = [Causes(i + 1.0, 0, 0, 0, 0, (64 * MiB if i == 8 else 0), 0, workers=2) for i in range(9)]
    >>> _shared_growth(t, spike)
    0
    """
    ends = sorted(p.end - trace.start for p in trace.produced)
    if len(ends) < 4:
        return 0
    settled = ends[len(ends) // 8]
    # While workers live: workers that end take their shared memory with them.
    points = [(bisect.bisect_right(ends, c.t), c.shared_beyond) for c in series if c.t >= settled and c.workers]
    if len(points) < TREND_READINGS:
        return 0
    built = np.array([b for b, _ in points], dtype=float)
    shared = np.array([s for _, s in points], dtype=float)
    third = len(points) // 3
    rise = float(shared[-third:].min() - shared[:third].max())
    batch = float(np.median([p.nbytes for p in trace.produced]))
    transit = (trace.meta.depth or 0) * batch
    if rise < max(GROWTH_BYTES, 4 * batch) + transit or np.std(built) == 0 or np.std(shared) == 0:
        return 0
    return int(shared.max() - shared[0]) if np.corrcoef(built, shared)[0, 1] >= GROWTH_FIT else 0


def _own(uss: int, shm: int) -> int:
    """A worker's unique bytes but the shared-memory files it maps (in its USS
    where it alone maps them, though they are shared memory, counted apart)."""
    return max(0, uss - shm)


def _at(times: list[float], values: list[int], t: float) -> int:
    i = bisect.bisect_right(times, t)
    return int(values[i - 1]) if i else 0


def _growing(trace: Trace, readings: list[MemorySample], copying: bool, objects: int | None) -> list[Growth]:
    """Workers whose unique memory follows the samples they had read, heading
    for their baseline and a copy of every sample (of the dataset's Python
    ``objects`` where their size is known, else at the rate measured)."""
    per_batch = samples_per_batch(trace)
    unit = "samples" if per_batch else "batches"
    built: dict[str, list[float]] = {}
    for p in trace.produced:
        built.setdefault(p.worker.rsplit(":", 1)[-1], []).append(p.end)
    for ends in built.values():
        ends.sort()
    dataset = trace.meta.num_samples if unit == "samples" else trace.meta.num_batches
    found = []
    by_pid: dict[int, list[tuple[float, int]]] = {}
    for m in readings:
        for pid, _, uss, shm in m.workers or []:
            by_pid.setdefault(pid, []).append((m.t, _own(uss, shm)))
    for pid, points in by_pid.items():
        ends = built.get(str(pid), [])
        if not ends:
            continue
        # Readings before the worker built its first batch catch it warming up
        # from the fork (the first pages it writes, some 10 MiB in a torch
        # worker): its growth is counted from its first reading after that batch,
        # where two remain.
        settled = [point for point in points if point[0] >= ends[0]]
        growth = _growth(str(pid), settled if len(settled) >= 2 else points, ends, per_batch, dataset, copying, objects)
        if growth is None and copying and 2 <= len(settled) < len(points):
            # A worker reading a shuffled dataset copies most of it over its first
            # batches, then holds: where its readings after its first batch came too
            # late to see that, its growth is counted from its first reading, as where
            # one reading follows that batch, and named beyond what warming up takes.
            growth = _growth(str(pid), points, ends, per_batch, dataset, copying, objects, WARMING_UP_BYTES)
        if growth is not None:
            found.append(growth)
    return found


def _growth(
    worker: str,
    points: list[tuple[float, int]],
    ends: list[float],
    per_batch: int | None,
    dataset: int | None,
    copying: bool,
    objects: int | None,
    beyond: int = 0,
) -> Growth | None:
    """The growth of ``worker``'s unique memory over its readings ``points``
    (clock time, bytes), where it follows the samples it read (its batches
    ``ends``, of ``per_batch`` samples, None where not known: batches) by at
    least ``GROWTH_BYTES`` and ``beyond``; None where it does not."""
    # Two readings do where the dataset holds Python objects to copy (a big
    # consumer's reading takes tens of milliseconds, so they come seldom).
    if len(points) < (2 if copying else 3):
        return None
    unit = "samples" if per_batch else "batches"
    read = np.array([bisect.bisect_right(ends, t) * (per_batch or 1) for t, _ in points], dtype=float)
    held = np.array([uss for _, uss in points], dtype=float)
    grew = held[-1] - held[0]
    samples = read[-1] - read[0]
    if samples <= 0 or grew < max(GROWTH_BYTES, GROWTH_SHARE * held[0]) + beyond:
        return None
    # Without a dataset of Python objects to copy, only a large growth that goes on
    # in the later half is named: a worker's allocator warming up (its first
    # batches' buffers) grows by tens of MiB at its start, then holds.
    later = held[-1] - held[len(held) // 2]
    if not copying and (grew < OTHER_GROWTH_BYTES or later < LATER_SHARE * grew):
        return None
    if np.std(read) == 0 or np.std(held) == 0:
        return None
    if len(points) > 2 and _fit(read, held, dataset if per_batch else None, objects) < GROWTH_FIT:
        return None
    slope = float(np.polyfit(read, held, 1)[0])
    if objects:
        heading: int | None = int(held[0] + objects)
    else:
        heading = int(held[0] + slope * dataset) if dataset else None
    if heading is not None:
        # A read copies the whole page an object lies on, so a worker can pass
        # its baseline plus the objects' bytes; it heads for no less than it holds.
        heading = max(heading, int(held[-1]))
    span = (points[0][0], points[-1][0])
    return Growth(worker, int(grew), int(held[-1]), slope * 1000, int(samples), heading, copying, span, unit)


def _fit(read: np.ndarray, held: np.ndarray, dataset: int | None, objects: int | None) -> float:
    """How closely a worker's unique memory ``held`` follows what it had
    ``read`` (Pearson's r): the samples read, as a dataset read in order copies
    page after page; or, where the ``dataset``'s samples and its Python
    ``objects``' bytes are known, the share of their pages it has touched, the
    better of the two. Read shuffled, each sample read copies the page its
    object lies on, with the ``PAGE * dataset / objects`` samples' objects on
    it: after ``k`` samples, ``1 - (1 - k / dataset) ** per_page`` of the pages
    are copied, so its growth rises over its first batches, then holds (a
    million strings of 80 bytes, 51 a page: 95 % of them copied after reading
    6 % of them), which follows the samples read poorly.

    >>> read = np.array([8_000, 16_000, 26_000, 36_000, 84_000, 138_000])
    >>> held = np.array([37.2, 44.5, 47.2, 48.1, 48.5, 48.5]) * MiB
    >>> round(_fit(read, held, None, None), 2), round(_fit(read, held, 400_000, 400_000 * 80), 2)
    (0.61, 1.0)
    """
    r = float(np.corrcoef(read, held)[0, 1])
    if not dataset or not objects:
        return r
    touched = copied_share(read, dataset, objects)
    if np.std(touched) == 0:
        return r
    return max(r, float(np.corrcoef(touched, held)[0, 1]))


def copied_share(read: Any, dataset: int, objects: int) -> Any:
    """The share of the pages of a dataset's Python ``objects`` (bytes) that a
    forked worker has copied once it has read ``read`` of its ``dataset``
    samples at random (a number, or a numpy array of them): each read writes
    the reference count of one object, and so copies the page it lies on with
    the ``PAGE * dataset / objects`` objects on it.

    >>> [round(float(copied_share(read, 1_000_000, 108 * 2**20)), 2) for read in (25_600, 102_400)]
    [0.61, 0.98]
    """
    per_page = max(1.0, PAGE * dataset / objects)
    with np.errstate(divide="ignore"):  # all read: log1p(-1) is -inf, and the share 1
        return -np.expm1(per_page * np.log1p(-np.minimum(np.divide(read, dataset), 1.0)))


def samples_per_batch(trace: Trace) -> int | None:
    """The samples a batch of ``trace``'s loader holds (its ``batch_size``), None
    where not known.

    >>> from queuetune.record.trace import TraceMeta
    >>> samples_per_batch(Trace(meta=TraceMeta(settings={"batch_size": 32}))), samples_per_batch(Trace())
    (32, None)
    """
    settings = trace.meta.settings or {}
    size = settings.get("batch_size", (trace.meta.extra or {}).get("batch_size"))
    return size if isinstance(size, int) and size > 0 else None
