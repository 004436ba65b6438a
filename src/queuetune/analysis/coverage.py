"""Coverage: which items each epoch handed over, how often, and why some were seen twice or never."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Literal

from ..frameworks import FRAMEWORKS, PYTHON, Framework
from ..record.trace import Produced, Trace, TraceMeta
from .in_flight import rows_taken

#: What identifies the items of a :class:`Coverage`.
ItemUnit = Literal["batch", "sample", "sample key"]


@dataclass
class Coverage:
    """Which items one epoch consumed more than once or never.

    ``unit``: ``batch`` (batch indices), ``sample`` (sample indices) or
    ``sample key`` (a key of each sample's content, or the user's key, where
    batches carry no index). ``extra``: how many consumptions repeated an item
    (an item taken 3 times adds 2); ``repeats``: the first duplicated items,
    each with its count and the workers that built it; ``cause``: the likely
    cause in words, where the pattern tells; ``unkeyed``: consumed batches whose
    samples were not keyed (over the keys a run keeps, or fingerprints stopped
    in a worker for their cost), which the counts leave out: the epoch's
    coverage is partial (see :attr:`partial`).

    ``batches``: the batches the epoch consumed. ``cut_short``: the epoch ended
    before its loader was exhausted (the script broke out of its loop, closed
    the iterator, or an error ended it); its items not consumed are then
    ``not_reached`` (where the total is known), and ``never`` stays for the items
    an epoch that ran to its end never consumed. ``resumed_after``: the epoch
    resumed one another process began, after that many batches handed over
    there; its items not consumed here are ``not_reached`` too.
    """

    run: int
    epoch: int
    unit: ItemUnit
    consumed: int
    total: int | None
    duplicates: list[int] = field(default_factory=list)
    never_count: int | None = None
    never: list[int] = field(default_factory=list)
    extra: int = 0
    repeats: list[Repeat] = field(default_factory=list)
    cause: str | None = None
    unkeyed: int = 0
    batches: int = 0
    cut_short: bool = False
    not_reached: int | None = None
    resumed_after: int | None = None

    @property
    def partial(self) -> bool:
        """Some of the epoch's batches were not keyed: its counts cover the others only.

        >>> Coverage(0, 0, "sample key", 24, None, unkeyed=2).partial
        True
        """
        return self.unkeyed > 0


@dataclass
class Repeat:
    """An item consumed more than once in an epoch: how often, and by which workers built."""

    item: int
    count: int
    workers: list[str]


@dataclass
class EpochItems:
    """What each run and epoch consumed, item by item in order (see :func:`coverage`):
    ``unit`` (None where nothing identifies items), the items, the workers that
    built each keyed sample, and the batches that carried no keys."""

    unit: ItemUnit | None
    items: dict[tuple[int, int], list[int]]
    built_by: dict[tuple[int, int], dict[int, list[str]]]
    unkeyed: Counter[tuple[int, int]]


def epoch_items(trace: Trace, matches: list[int | None]) -> EpochItems:
    """The items of each run and epoch, in the order they were consumed.

    >>> from queuetune.record.trace import Trace, Produced, Consumed
    >>> t = Trace(produced=[Produced(0, 1, 8, samples=[5, 6])], consumed=[Consumed(0, 1)])
    >>> found = epoch_items(t, [0])
    >>> found.unit, found.items
    ('sample key', {(0, 0): [5, 6]})
    """
    by_epoch: dict[tuple[int, int], list[int]] = defaultdict(list)
    built_by: dict[tuple[int, int], dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    unkeyed: Counter[tuple[int, int]] = Counter()
    unit: ItemUnit | None = None

    def keyed(epoch: tuple[int, int], built: Produced, samples: list[int]) -> None:
        by_epoch[epoch].extend(samples)
        for key in samples:
            built_by[epoch][key].append(built.worker)

    if trace.meta.match == "rows":
        # Batches cut from blocks by rows: each block's rows count once, in the
        # epoch of the batch that takes its first row.
        for taker, p, first, _ in rows_taken(trace):
            block = trace.produced[p]
            if first and block.samples is not None:
                unit = "sample key"
                keyed((trace.consumed[taker].run, trace.consumed[taker].epoch), block, block.samples)
        return EpochItems(unit, dict(by_epoch), {k: dict(v) for k, v in built_by.items()}, unkeyed)
    for c, j in zip(trace.consumed, matches):
        epoch = (c.run, c.epoch)
        built = trace.produced[j] if j is not None else None
        if c.samples is not None:
            unit = "sample"
            by_epoch[epoch].extend(c.samples)
        elif built is not None and built.samples is not None:
            unit = "sample key"
            keyed(epoch, built, built.samples)
        elif built is not None and built.index is not None:
            unit = unit or "batch"
            by_epoch[epoch].append(built.index)
        else:
            unkeyed[epoch] += 1
    return EpochItems(unit, dict(by_epoch), {k: dict(v) for k, v in built_by.items()}, unkeyed)


def _first_missing(counts: Counter[int], total: int, most: int) -> list[int]:
    """The first ``most`` items of ``range(total)`` not in ``counts``, in order.

    >>> _first_missing(Counter([0, 1, 3]), 10, 3)
    [2, 4, 5]
    """
    found: list[int] = []
    for i in range(total):  # stops within len(counts) + most steps
        if len(found) == most:
            break
        if i not in counts:
            found.append(i)
    return found


def coverage(trace: Trace, matches: list[int | None]) -> list[Coverage]:
    """Per run and epoch: items consumed more than once, and never (when the total
    is known and the epoch ran to its end; an epoch cut short, which a
    ``cut_short`` mark names, counts them as not reached instead).

    Items are batch indices for indexable loaders (Keras PyDataset), sample
    indices for torch map-style datasets, and the keys of each sample (content
    fingerprints or the user's key) where batches carry no index; an epoch
    whose batches all went without keys is listed with none.
    """
    found = epoch_items(trace, matches)
    unit, by_epoch, built_by, unkeyed = found.unit, found.items, found.built_by, found.unkeyed
    if unit is None:
        return []
    total = trace.meta.num_samples if unit == "sample" else trace.meta.num_batches if unit == "batch" else None
    batches = Counter((c.run, c.epoch) for c in trace.consumed)
    whole = trace.meta.num_batches
    cut = cut_short_epochs(trace)
    resumed = resumed_epochs(trace)
    epochs = set(by_epoch) | (set(unkeyed) if unit == "sample key" else set())
    result = []
    for run, epoch in sorted(epochs):
        items = by_epoch.get((run, epoch), [])
        counts = Counter(items)
        taken = batches[(run, epoch)]
        # An epoch that took every batch the loader has was not cut short, marked or not.
        short = epoch in cut and (whole is None or taken < whole)
        cov = Coverage(run, epoch, unit, len(items), total, batches=taken, cut_short=short)
        cov.resumed_after = resumed.get(epoch)
        cov.unkeyed = unkeyed[(run, epoch)] if unit == "sample key" else 0
        cov.duplicates = sorted(i for i, n in counts.items() if n > 1)
        cov.extra = sum(n - 1 for n in counts.values() if n > 1)
        origins = built_by.get((run, epoch), {})
        cov.repeats = [Repeat(i, counts[i], sorted(set(origins.get(i, [])))) for i in cov.duplicates[:20]]
        workers = {w for built in origins.values() for w in built if w}
        cov.cause = _repeat_cause(counts, origins, len(workers), _framework(trace.meta).shard_advice)
        if isinstance(total, int):
            # Counted, not listed: a dataset may hold billions of samples.
            missing = total - sum(1 for i in counts if 0 <= i < total)
            if cov.cut_short or cov.resumed_after is not None:
                cov.not_reached = missing
            else:
                cov.never_count = missing
                cov.never = _first_missing(counts, total, 20)
        result.append(cov)
    return result


@dataclass(frozen=True)
class Coverages:
    """The report's section of coverage: each epoch's (``coverage``), and whether
    some epoch's is partial (``coverage_partial``: batches left without sample
    keys, which its counts leave out; see :attr:`Coverage.partial`)."""

    coverage: list[Coverage]
    coverage_partial: bool


def coverage_of(trace: Trace, matches: list[int | None]) -> Coverages:
    """The coverage section of ``trace``, whose consumed batches are ``matches`` of its produced ones.

    >>> coverage_of(Trace(), [])
    Coverages(coverage=[], coverage_partial=False)
    """
    found = coverage(trace, matches)
    return Coverages(found, any(c.partial for c in found))


def resumed_epochs(trace: Trace) -> dict[int, int]:
    """The epochs that resumed one another process began: epoch, the batches
    handed over there (from ``resumed`` marks).

    >>> from queuetune.record.trace import Mark
    >>> resumed_epochs(Trace(marks=[Mark(1.0, "resumed", {"epoch": 0, "batches": 7})]))
    {0: 7}
    """
    found = {}
    for m in trace.marks:
        if m.kind == "resumed" and isinstance(m.value, dict):
            epoch, batches = m.value.get("epoch"), m.value.get("batches")
            if isinstance(epoch, int) and isinstance(batches, int):
                found[epoch] = batches
    return found


def cut_short_epochs(trace: Trace) -> set[int]:
    """The epochs that ended before their loader was exhausted: those a
    ``cut_short`` mark names (a watcher that can tell marks them; torch's does).

    >>> from queuetune.record.trace import Mark
    >>> cut_short_epochs(Trace(marks=[Mark(1.0, "epoch_end", 0), Mark(2.0, "cut_short", 1)]))
    {1}
    """
    return {m.value for m in trace.marks if m.kind == "cut_short" and isinstance(m.value, int)}


def _repeat_cause(counts: Counter[int], origins: dict[int, list[str]], workers: int, advice: str | None) -> str | None:
    """Each sample once from each worker: a dataset that every worker reads whole
    (not sharded among them); ``advice``: the framework's way to shard it."""
    if workers < 2 or not origins or len(counts) < 2:
        return None
    every = all(n == workers and len(set(origins.get(i, []))) == workers for i, n in counts.items())
    if not every:
        return None
    cause = f"each sample came once from each of {workers} workers: the dataset is read whole by every worker"
    return cause if advice is None else f"{cause}; {advice}"


def _framework(meta: TraceMeta) -> Framework:
    """The framework a trace's meta names (a plain iterable's when it names none known)."""
    return FRAMEWORKS.get(meta.framework or "", PYTHON)
