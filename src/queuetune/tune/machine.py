"""What a run took of the machine: its cores, and how many workers it could hold.

The queue model (:mod:`queuetune.model`) scales the builds with the workers as
if each had a core of its own. A machine has so many: the builds, the training
step, the framework's own threads (torch's pin-memory thread, its intra-op
pool) and any other program share them. The tree's CPU seconds and the cores'
idle seconds, read with its memory (:class:`~queuetune.record.trace.MemorySample`),
tell over the steady state what a batch costs the machine, how many cores the
run used and how many other programs took: a setting gets what the kernel's
share of the cores gives it (:meth:`Machine.bound`), and no setting takes more
batches a second than all the cores give at that cost (:attr:`Machine.ceiling`).

How many workers a setting may have is bounded by the machine too
(:func:`most_workers`): their baselines must fit in its memory and their pipes
in the process's open files.
"""

from __future__ import annotations

import math
import resource
from dataclasses import asdict, dataclass
from typing import Any

from ..analysis.report import Report
from ..common import cores as machine_cores
from ..record.trace import Trace

#: The share of the cores a loader and its consumer keep busy between them at
#: most: a step waits for its batch and a worker for its place now and then,
#: and more processes than cores switch and thrash the caches. Measured on 2
#: cores with real work (JPEG decode by Pillow, 1 to 2 workers beside a CNN's
#: step: 1.20x where every core predicted 1.36x; file reads that wait, 2 to 24
#: workers: 8.98x where every core predicted 10.0x).
EFFICIENCY = 0.9
#: The fewest seconds between the first and the last reading a measure is made over.
MIN_SECONDS = 0.5
#: The share of the machine's memory that the workers' baselines and the rest of
#: the tree at its peak may take, for a worker count to be considered.
MEMORY_SHARE = 0.8
#: Descriptors the consumer holds a worker process (its pipes, its sentinel, a
#: shared-memory file in transit), for the open-files bound.
FILES_PER_WORKER = 8
#: The most workers considered on any machine, past which a gain is not looked for.
MOST_WORKERS = 1024


@dataclass(frozen=True)
class Machine:
    """The cores over a run's steady state: ``cores`` this process may run on,
    ``used`` (the cores the loader's tree kept busy, on average), ``idle`` (the
    cores no program used meanwhile), ``rate`` (batches a second taken
    meanwhile), over ``seconds``.

    >>> m = Machine(cores=16, used=4.0, idle=10.0, rate=10.0, seconds=5.0)
    >>> m.per_batch, m.others, m.ceiling
    (0.4, 2.0, 36.0)
    """

    cores: int
    used: float
    idle: float
    rate: float
    seconds: float

    @property
    def per_batch(self) -> float:
        """The CPU seconds one batch costs the tree: its build, its hand-over and its step."""
        return self.used / self.rate

    @property
    def others(self) -> float:
        """The cores other programs kept busy meanwhile."""
        return max(0.0, self.cores - self.used - self.idle)

    @property
    def attainable(self) -> float:
        """The cores a loader and its consumer can keep busy between them:
        :data:`EFFICIENCY` of them, or what the run kept busy with the other
        programs where that was more."""
        return min(float(self.cores), max(EFFICIENCY * self.cores, self.cores - self.idle))

    @property
    def ceiling(self) -> float:
        """The most batches a second the cores give at this cost (infinite where
        the tree used no CPU that could be measured)."""
        if self.used <= 0:
            return math.inf
        return self.attainable / self.per_batch

    def bound(self, rate: float) -> float:
        """What the cores give a setting the queue model predicts ``rate`` batches
        a second for. It asks ``rate * per_batch`` cores; with what other programs
        take (:attr:`others`), where that passes the cores, the kernel shares them
        among all who ask, so it gets its part: ``rate * min(1, attainable /
        (asked + others))``. Never more than :attr:`ceiling`; the run as
        measured, whose asks fitted, is left as it was.

        >>> m = Machine(cores=16, used=4.0, idle=12.0, rate=10.0, seconds=5.0)
        >>> m.bound(10.0), m.bound(36.0), round(m.bound(400.0), 1)
        (10.0, 36.0, 36.0)
        >>> busy = Machine(cores=2, used=0.5, idle=0.0, rate=5.0, seconds=5.0)
        >>> busy.others, round(busy.bound(5.0), 2), round(busy.bound(20.0), 2)
        (1.5, 5.0, 11.43)
        """
        if self.used <= 0 or rate <= 0:
            return rate
        asked = rate * self.per_batch
        return rate * min(1.0, self.attainable / (asked + self.others))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "per_batch": self.per_batch, "others": self.others, "ceiling": self.ceiling}


def machine_of(trace: Trace) -> Machine | None:
    """The :class:`Machine` over ``trace``'s consumed batches, from its first
    reading of the tree's CPU among them to its last; None where fewer than two
    such readings lie :data:`MIN_SECONDS` apart with batches taken between. The
    CPU of the probe's own readings (``MemorySample.probe``) is left out.

    >>> from queuetune.record.trace import Consumed, MemorySample
    >>> samples = [MemorySample(t, 1, cpu=2.0 * t, idle=6.0 * t) for t in (1.0, 3.0)]
    >>> trace = Trace(consumed=[Consumed(t / 10, t / 10) for t in range(5, 40)], memory=samples)
    >>> trace.meta.extra["cores"] = 8
    >>> m = machine_of(trace)
    >>> m.used, m.idle, m.rate, m.ceiling
    (2.0, 6.0, 10.0, 36.0)
    """
    if not trace.consumed:
        return None
    begin = min(c.requested for c in trace.consumed)
    end = max(c.consumed for c in trace.consumed)
    inside = [m for m in trace.memory if m.cpu is not None and m.idle is not None and begin <= m.t <= end]
    if len(inside) < 2:
        return _from_builds(trace, begin, end)
    first, last = inside[0], inside[-1]
    seconds = last.t - first.t
    taken = sum(1 for c in trace.consumed if first.t < c.consumed <= last.t)
    if seconds < MIN_SECONDS or taken < 2:
        return None
    assert first.cpu is not None and last.cpu is not None and first.idle is not None and last.idle is not None
    # The probe's own readings are not the loader's: a run without queuetune has none.
    probe = (last.probe - first.probe) if last.probe is not None and first.probe is not None else 0.0
    return Machine(
        cores=_cores(trace),
        used=max(0.0, (last.cpu - first.cpu - probe) / seconds),
        idle=max(0.0, (last.idle - first.idle) / seconds),
        rate=taken / seconds,
        seconds=seconds,
    )


def _from_builds(trace: Trace, begin: float, end: float) -> Machine | None:
    """Where the tree's CPU was not read: the builds' own busy seconds (on a CPU
    or waiting for one) a batch, against every core, as if nothing else ran."""
    busy = [p.busy for p in trace.produced if p.busy is not None]
    seconds = end - begin
    if len(busy) < 2 or seconds < MIN_SECONDS:
        return None
    rate = len(trace.consumed) / seconds
    cores = _cores(trace)
    used = rate * sum(busy) / len(busy)
    return Machine(cores=cores, used=used, idle=max(0.0, cores - used), rate=rate, seconds=seconds)


def _cores(trace: Trace) -> int:
    count = trace.meta.extra.get("cores")
    return count if isinstance(count, int) and count > 0 else machine_cores.available()


def most_workers(worker_bytes: float | None, rest_bytes: float | None, host_bytes: float | None) -> tuple[int, str]:
    """The most workers the machine can hold, and what bounds it: their
    baselines (``worker_bytes`` each) and the rest of the tree at its peak
    (``rest_bytes``) within :data:`MEMORY_SHARE` of ``host_bytes``, their pipes
    within the open files this process may have, and :data:`MOST_WORKERS`.

    >>> most_workers(30 * 2**20, 2 * 2**30, 24 * 2**30)[0] < most_workers(None, None, None)[0]
    True
    >>> most_workers(2**30, 0, 4 * 2**30)
    (3, "the machine's memory (1.0 GiB a worker, 4.0 GiB in all)")
    """
    from ..common.units import format_bytes

    bounds = [(MOST_WORKERS, f"the most queuetune considers ({MOST_WORKERS})")]
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        bounds.append((max(1, soft // FILES_PER_WORKER), f"the open files this process may have ({soft})"))
    if worker_bytes and host_bytes:
        room = MEMORY_SHARE * host_bytes - (rest_bytes or 0.0)
        each, total = format_bytes(int(worker_bytes)), format_bytes(int(host_bytes))
        bounds.append((max(1, int(room // worker_bytes)), f"the machine's memory ({each} a worker, {total} in all)"))
    return min(bounds)


@dataclass(frozen=True)
class Limits:
    """What the machine allows a run's settings: ``ceiling`` (batches a second
    its cores give; None where not measured), ``most`` workers and what bounds
    that (``bound``), ``machine`` as measured and ``worker_bytes`` (each worker's
    baseline; None where not read)."""

    ceiling: float | None
    most: int
    bound: str
    machine: Machine | None
    worker_bytes: float | None


def machine_limits(trace: Trace, report: Report) -> Limits:
    """The :class:`Limits` of the run ``trace`` (its steady state) of which
    ``report`` is the analysis.

    >>> from queuetune.analysis.report import analyze
    >>> limits = machine_limits(Trace(), analyze(Trace()))
    >>> limits.ceiling is None, limits.most == MOST_WORKERS or "open files" in limits.bound
    (True, True)
    """
    machine = machine_of(trace)
    per_worker = worker_baseline(report)
    peak = report.memory.peak if report.memory is not None else None
    rest = None if peak is None or per_worker is None else peak.total - peak.workers * per_worker
    host = trace.meta.extra.get("host_memory")
    most, bound = most_workers(per_worker, rest, host if isinstance(host, int) else None)
    ceiling = None if machine is None or math.isinf(machine.ceiling) else machine.ceiling
    return Limits(ceiling, most, bound, machine, per_worker)


def worker_baseline(report: Report) -> float | None:
    """Each worker process's own memory at the report's memory peak, the mean
    over the workers read there: its baseline (its imports, its state: about
    30 MiB for a torch worker) and what it grew by since, which one worker fewer
    saves; None where the tree's memory was not read or no worker was. (Where
    the baseline ends and the growth begins depends on when a worker was first
    read; workers that copy what they read hold more each as they are fewer:
    see :mod:`.worker_memory`.)

    >>> from queuetune.analysis.report import analyze
    >>> worker_baseline(analyze(Trace())) is None
    True
    """
    use = report.memory
    if use is None or use.peak is None or not use.peak.workers:
        return None
    return (use.peak.worker_baseline + use.peak.worker_growth) / use.peak.workers
