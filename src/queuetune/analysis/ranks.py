"""Several ranks of one distributed launch (torchrun), read together: each
rank's throughput, input wait and verdict; the straggler whose input wait holds
the others at every collective step; and coverage across ranks (samples more
than one rank read in an epoch, and epochs that came in the same order).

Pure functions from traces to a :class:`RanksReport`, like :mod:`queuetune.analysis.report`.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from ..common.jsonio import dumps
from ..record.matching import match
from ..record.trace import Trace
from .counts import Counts
from .coverage import EpochItems, epoch_items
from .report import MODERATE, Report, analyze, section_of
from .timing import Timings
from .waits import Waits


@dataclass
class RankLoader:
    """One loader on one rank: batches a second over its runs, the share and
    seconds of its steady state spent waiting for input, the median step."""

    loader: str
    batches_per_second: float | None
    input_wait_fraction: float | None
    input_wait_seconds: float | None
    step_median_seconds: float | None
    verdict: str


@dataclass
class Rank:
    """A rank and its loaders."""

    rank: int
    loaders: list[RankLoader]


@dataclass
class Straggler:
    """The rank that holds the others, ``by`` its input wait or its step time:
    ``seconds`` of it over the steady state against the other ranks' median;
    in synchronous training every other rank waits for it at each collective
    step, about ``cost_seconds`` in all."""

    loader: str
    rank: int
    by: str
    seconds: float
    others_median_seconds: float
    cost_seconds: float
    text: str


@dataclass
class RanksCoverage:
    """One epoch across ranks: the distinct items read, how many more than one
    rank read (and the first of them), and the likely cause in words."""

    run: int
    epoch: int
    unit: str
    items: int
    seen_by_several: int
    examples: list[int] = field(default_factory=list)
    per_rank: dict[int, int] = field(default_factory=dict)
    cause: str | None = None


@dataclass
class RanksLoader:
    """One loader, merged over the ranks."""

    loader: str
    straggler: Straggler | None
    coverage: list[RanksCoverage]
    same_order_ranks: list[int]
    notes: list[str]


@dataclass
class RanksReport:
    """Every rank of a launch (``job``), with the ranks whose traces are missing."""

    job: str | None
    world_size: int
    missing_ranks: list[int]
    ranks: list[Rank]
    loaders: list[RanksLoader]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent=indent)


def ranked(traces: list[Trace]) -> bool:
    """Whether these traces come from ranks of a launch (their meta has a rank).

    >>> from queuetune.record.trace import Trace, TraceMeta
    >>> ranked([Trace(meta=TraceMeta(rank=0, world_size=2, job="j"))]), ranked([Trace()])
    (True, False)
    """
    return bool(traces) and any(t.meta.rank is not None for t in traces)


def check_one_launch(traces: list[Trace], names: list[str]) -> None:
    """A ValueError naming the runs where ``traces`` (read from ``names``) mix
    launches, or ranked traces with unranked ones."""
    jobs: dict[str, list[str]] = defaultdict(list)
    for trace, name in zip(traces, names):
        job = trace.meta.job if trace.meta.rank is not None else None
        jobs["(not a rank of a launch)" if job is None else f"job {job}"].append(name)
    if len(jobs) > 1:
        parts = [f"{job} ({len(files)} of them: {', '.join(files[:3])})" for job, files in jobs.items()]
        raise ValueError("traces of different runs mixed: " + "; ".join(parts))


def analyze_ranks(traces: list[Trace], reports: list[Report] | None = None) -> RanksReport:
    """Merge the traces of one launch's ranks (see :func:`check_one_launch`).

    >>> from queuetune.record.trace import Trace, TraceMeta, Consumed, Produced
    >>> def rank(r, samples):
    ...     meta = TraceMeta(name="loader", rank=r, world_size=2, job="j")
    ...     return Trace(meta=meta, produced=[Produced(0, 1, 8)], consumed=[Consumed(0, 1, samples=samples)], end=1)
    >>> merged = analyze_ranks([rank(0, [0, 1]), rank(1, [0, 1])])
    >>> [r.rank for r in merged.ranks], merged.loaders[0].coverage[0].seen_by_several
    ([0, 1], 2)
    """
    if reports is None:
        reports = [analyze(t) for t in traces]
    world = max((t.meta.world_size or 0 for t in traces), default=0)
    world = max(world, max((t.meta.rank or 0 for t in traces), default=0) + 1)
    present = {t.meta.rank for t in traces if t.meta.rank is not None}
    by_rank: dict[int, list[RankLoader]] = defaultdict(list)
    by_loader: dict[str, list[tuple[int, Trace, Report]]] = defaultdict(list)
    for trace, report in zip(traces, reports):
        rank = trace.meta.rank or 0
        name = trace.meta.name or "loader"
        by_rank[rank].append(_rank_loader(name, report))
        by_loader[name].append((rank, trace, report))
    loaders = [_merge(name, members, world) for name, members in by_loader.items()]
    return RanksReport(
        job=next((t.meta.job for t in traces if t.meta.job), None),
        world_size=world,
        missing_ranks=[r for r in range(world) if r not in present],
        ranks=[Rank(r, by_rank[r]) for r in sorted(by_rank)],
        loaders=loaders,
    )


def _rank_loader(name: str, report: Report) -> RankLoader:
    consumed, waits = section_of(Counts, report).consumed_batches, section_of(Waits, report)
    rate = None
    if consumed and waits.wall_seconds:
        rate = consumed / waits.wall_seconds
    step = section_of(Timings, report).consumer_step.median
    return RankLoader(name, rate, waits.input_bound_fraction, waits.steady_wait_seconds, step, waits.verdict)


def _merge(name: str, members: list[tuple[int, Trace, Report]], world: int) -> RanksLoader:
    notes = []
    ranks = sorted(r for r, _, _ in members)
    if len(ranks) != len(set(ranks)):
        notes.append(f"several traces of {name} on one rank: each is counted")
    # Each rank's items, epoch by epoch: matched once, read by both checks.
    found = [(rank, epoch_items(trace, match(trace).consumed)) for rank, trace, _ in members]
    return RanksLoader(name, straggler(name, members), _coverage(found), _same_order(found), notes)


def straggler(name: str, members: list[tuple[int, Trace, Report]]) -> Straggler | None:
    """The rank whose steady-state input wait exceeds the others' median by more
    than 5 % of its steady state (and 0.1 s); else the rank whose steps took in
    all more than the others' median by over 10 % (and 0.1 s). Each collective
    step waits for it, so the others lose about the difference. None when no
    rank stands out; with a collective every step the ranks' step times even
    out, so only the input wait can tell there."""
    waits = {r: (rep.steady_wait_seconds, rep.steady_seconds) for r, _, rep in members}
    known = {r: (w, s) for r, (w, s) in waits.items() if w is not None and s}
    if len(known) >= 2:
        rank = max(known, key=lambda r: known[r][0])
        wait, steady = known[rank]
        middle = statistics.median(w for r, (w, _) in known.items() if r != rank)
        cost = wait - middle
        if cost > max(MODERATE * steady, 0.1):
            text = (
                f"rank {rank} holds the others: it waited for input {wait:.2f} s ({wait / steady:.0%} of its steady "
                f"state) against a median {middle:.2f} s on the other ranks, so each of them waits about {cost:.2f} s "
                "for it at the collective steps; give its loader more workers or find what makes its loading slow"
            )
            return Straggler(name, rank, "input wait", wait, middle, cost, text)
    steps = {r: rep.consumer_step.mean * rep.consumer_step.n for r, _, rep in members if rep.consumer_step.mean}
    if len(steps) < 2:
        return None
    rank = max(steps, key=lambda r: steps[r])
    middle = statistics.median(t for r, t in steps.items() if r != rank)
    cost = steps[rank] - middle
    if cost <= max(0.1 * middle, 0.1):
        return None
    text = (
        f"rank {rank} holds the others: its steps took {steps[rank]:.2f} s against a median {middle:.2f} s on the "
        f"other ranks (not its loading: its input wait is like theirs), so they wait about {cost:.2f} s for it at "
        "the collective steps"
    )
    return Straggler(name, rank, "step time", steps[rank], middle, cost, text)


def _coverage(members: list[tuple[int, EpochItems]]) -> list[RanksCoverage]:
    per_epoch: dict[tuple[int, int], dict[int, list[int]]] = defaultdict(dict)
    unit = None
    for rank, found in members:
        if found.unit is None:
            continue
        unit = unit or found.unit
        for epoch, items in found.items.items():
            per_epoch[epoch].setdefault(rank, []).extend(items)
    if unit is None or unit == "batch":
        return []
    world = len({r for r, _ in members})
    result = []
    for (run, epoch_), by_rank in sorted(per_epoch.items()):
        readers: Counter[int] = Counter()
        for items in by_rank.values():
            readers.update(set(items))
        several = sorted(i for i, n in readers.items() if n > 1)
        cov = RanksCoverage(run, epoch_, unit, len(readers), len(several), several[:20])
        cov.per_rank = {r: len(items) for r, items in sorted(by_rank.items())}
        cov.cause = _ranks_cause(readers, several, cov.per_rank, world)
        result.append(cov)
    return result


def _ranks_cause(readers: Counter[int], several: list[int], per_rank: dict[int, int], world: int) -> str | None:
    if not several or world < 2:
        return None
    if len(several) == len(readers) and all(n == world for n in readers.values()):
        return (
            f"every rank read every sample ({len(readers)} of them): the loader has no DistributedSampler "
            "(or other sharding by rank), so each epoch trains on the data world-size times"
        )
    even = len(set(per_rank.values())) == 1
    if even and len(several) < world and sum(per_rank.values()) - len(readers) == len(several):
        return (
            f"DistributedSampler padding: {len(readers)} samples do not divide among {world} ranks, so "
            f"{len(several)} were given to a second rank to even them out (DistributedSampler(drop_last=True) "
            "drops the remainder instead)"
        )
    return f"{len(several)} samples came to more than one rank in this epoch"


def _same_order(members: list[tuple[int, EpochItems]]) -> list[int]:
    """Ranks whose every epoch came in the same, shuffled order: a
    DistributedSampler whose ``set_epoch`` was never called."""
    flagged = []
    for rank, found in members:
        if found.unit != "sample":
            continue
        orders = [tuple(items) for _, items in sorted(found.items.items())]
        if len(orders) >= 2 and len(set(orders)) == 1 and list(orders[0]) != sorted(orders[0]):
            flagged.append(rank)
    return flagged
