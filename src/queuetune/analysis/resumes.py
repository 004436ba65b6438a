"""A job stopped and resumed, read as one: the epoch that spans a restart, its
samples counted across the run that stopped and the run that resumed it.

Each run of the job gives, for each of its loaders, a :class:`Part`: the
samples of every batch it handed over, epoch by epoch, from its trace, or
from the journal ``queuetune run`` appends as the run goes (where the run was
killed before it wrote its trace). Where a run's last epoch stopped before its
end, the next run's first epoch is taken to continue it: known where the
loader says it resumed (a Prefetcher's or a ``StatefulDataLoader``'s state
loaded: a ``resumed`` mark), assumed otherwise. The two together should hand
over every sample of the epoch once; :func:`spans` says whether they did, and
where not, the likely cause.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..record.trace import Trace, TraceMeta

#: A run's journal beside its trace: ``NN-<kind>.journal.jsonl``.
JOURNAL_SUFFIX = ".journal.jsonl"


class Batch(NamedTuple):
    """A batch handed over: when it was ``asked`` for, when it was handed
    over (``got``), and its samples (None where not known)."""

    asked: float
    got: float
    samples: list[int] | None


#: The shortest step of a loop whose batches can be told dropped: a batch dropped
#: unused is one whose next was asked for within a tenth of the steps after it.
STEP = 0.01


def dropped(batches: list[Batch]) -> int:
    """How many of ``batches`` (an epoch's, in order) the program took first and
    dropped unused, as ``itertools.islice(loader, k, None)`` does to skip the
    batches taken before a restart: those before the first step of
    :data:`STEP` or longer, each one's next asked for within a tenth of the
    median step after them (a loop whose steps are all shorter drops none, and
    one step at least must follow them: a run that takes one batch after them
    drops none).

    >>> dropped([Batch(0, 0.1, None), Batch(0.1001, 0.2, None), Batch(0.2001, 0.3, None),
    ...          Batch(0.35, 0.4, None), Batch(0.45, 0.5, None)])
    2
    """
    gaps = [after.asked - batch.got for batch, after in itertools.pairwise(batches)]
    first = next((i for i, gap in enumerate(gaps) if gap >= STEP), len(gaps))
    rest = gaps[first:]
    if not first or not rest:
        return 0
    step = statistics.median(rest)
    return first if all(gap < step / 10 for gap in gaps[:first]) else 0


def epoch_samples(meta: TraceMeta) -> int | None:
    """The samples an epoch of the loader ``meta`` tells of reads: its sampler's
    (``extra["epoch_samples"]``: one rank's share under a ``DistributedSampler``),
    else its source's.

    >>> epoch_samples(TraceMeta(num_samples=64, extra={"epoch_samples": 32})), epoch_samples(TraceMeta(num_samples=8))
    (32, 8)
    """
    share = (meta.extra or {}).get("epoch_samples")
    return share if isinstance(share, int) else meta.num_samples


@dataclass
class Part:
    """One loader in one run of a job: each epoch's batches in the order handed
    over (when, and each batch's samples, None where not known), the epochs a
    ``resumed`` mark names, those cut short, when its state was last taken
    (``checkpoint``), the sampler's epoch each drew (``sampler_epochs``: a
    ``DistributedSampler``'s ``set_epoch``), the source's ``samples`` and its ``batches`` in an epoch
    (None where not known), and whether the run ``ended`` (its trace written)
    rather than was killed."""

    epochs: dict[tuple[int, int], list[Batch]] = field(default_factory=dict)
    resumed: set[tuple[int, int]] = field(default_factory=set)
    cut_short: set[tuple[int, int]] = field(default_factory=set)
    checkpoint: float | None = None
    sampler_epochs: dict[tuple[int, int], int] = field(default_factory=dict)
    samples: int | None = None
    batches: int | None = None
    ended: bool = True

    @classmethod
    def of_trace(cls, trace: Trace) -> Part:
        """The part of a run's trace: what its journal would hold, the run ended.

        >>> from queuetune.record.trace import Consumed, TraceMeta
        >>> part = Part.of_trace(Trace(meta=TraceMeta(num_samples=4), consumed=[Consumed(0, 1, samples=[0, 1])]))
        >>> part.epochs, part.samples, part.ended
        ({(0, 0): [Batch(asked=0, got=1, samples=[0, 1])]}, 4, True)
        """
        runs = {c.epoch: c.run for c in trace.consumed}
        entries = [journal_meta(trace.meta), *journal_entries(trace.consumed, trace.marks, runs)]
        return cls.of_entries(entries, ended=True)

    @classmethod
    def of_journal(cls, path: str | Path) -> Part:
        """The part a journal holds (a line cut off by a kill is left out), the run killed."""
        entries = []
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
        return cls.of_entries(entries, ended=False)

    @classmethod
    def of_entries(cls, entries: list[Any], ended: bool) -> Part:
        """The part journal ``entries`` (see :func:`journal_entries`) make."""
        part = cls(ended=ended)
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            if "meta" in entry:
                part.samples, part.batches = entry["meta"].get("samples"), entry["meta"].get("batches")
            elif "c" in entry:
                run, epoch, samples, asked, got = entry["c"]
                part.epochs.setdefault((run, epoch), []).append(Batch(asked, got, samples))
            elif entry.get("m") == "resumed":
                part.resumed.add((entry["run"], entry["epoch"]))
            elif entry.get("m") == "cut_short":
                part.cut_short.add((entry["run"], entry["epoch"]))
            elif entry.get("m") == "checkpoint":
                part.checkpoint = entry["t"]
            elif entry.get("m") == "sampler_epoch" and isinstance(entry.get("sampler"), int):
                part.sampler_epochs[(entry["run"], entry["epoch"])] = entry["sampler"]
        return part


def journal_meta(meta: TraceMeta) -> dict[str, Any]:
    """A journal's first line: the samples and batches of an epoch.

    >>> journal_meta(TraceMeta(num_samples=8, num_batches=2))
    {'meta': {'samples': 8, 'batches': 2}}
    """
    return {"meta": {"samples": epoch_samples(meta), "batches": meta.num_batches}}


def journal_entries(trace_consumed: list[Any], marks: list[Any], run_of: dict[int, int]) -> list[dict[str, Any]]:
    """The journal lines (as dicts) of consumed records and marks: a batch's run,
    epoch, samples, and when it was asked for and handed over; a ``resumed`` or ``cut_short`` mark's
    run and epoch (``run_of``: each epoch's run, as far as known); a
    ``checkpoint``'s time.

    >>> from queuetune.record.trace import Consumed, Mark
    >>> journal_entries([Consumed(0, 1, run=0, epoch=2, samples=[3])], [Mark(1.0, "cut_short", 2)], {2: 0})
    [{'c': [0, 2, [3], 0, 1]}, {'m': 'cut_short', 'run': 0, 'epoch': 2}]
    """
    out: list[dict[str, Any]] = [{"c": [c.run, c.epoch, c.samples, c.requested, c.consumed]} for c in trace_consumed]
    for m in marks:
        epoch = m.value.get("epoch") if isinstance(m.value, dict) else m.value
        if m.kind in ("resumed", "cut_short", "sampler_epoch") and isinstance(epoch, int):
            entry = {"m": m.kind, "run": run_of.get(epoch, 0), "epoch": epoch}
            if m.kind == "sampler_epoch":
                entry["sampler"] = m.value.get("sampler")
            out.append(entry)
        elif m.kind == "checkpoint":
            out.append({"m": m.kind, "t": m.t})
    return out


@dataclass
class Span:
    """The epoch ``epoch`` of run ``runs[0]`` (its number there), continued by
    the first epoch of run ``runs[1]``: ``before`` and ``after`` batches handed
    over in each, of ``total`` samples; ``twice`` the samples handed over more
    than once (counted once for each time more), ``never`` those not handed
    over in an epoch that reached its end (``not_reached`` where the resumed
    run stopped before it did); ``cause`` in words where they are not all once;
    ``assumed`` where the loader did not say that it resumed; ``dropped``: the
    batches the resumed run took and dropped at once, first (see :func:`dropped`),
    left out of ``after``; ``lost``: where the restart came between epochs, the
    epochs between the one the stopped run ended and the one the resumed run
    began, as their samplers drew them (negative: begun again)."""

    loader: str
    epoch: int
    runs: tuple[int, int]
    before: int
    after: int
    total: int
    twice: int
    never: int
    not_reached: int = 0
    cause: str | None = None
    assumed: bool = False
    dropped: int = 0
    lost: int = 0

    @property
    def once(self) -> bool:
        return not self.twice and not self.never and not self.lost

    def text(self) -> str:
        """The finding in one line.

        >>> Span("dataloader 1", 0, (1, 2), 3, 5, 30, 0, 0).text()
        'epoch 0 spans runs 1 and 2: every sample once'
        """
        where = f"epoch {self.epoch} spans runs {self.runs[0]} and {self.runs[1]}"
        if self.lost:
            n, last = abs(self.lost), f"run {self.runs[0]} ended its epoch {self.epoch}"
            what = f"{n} epoch{'s' if n > 1 else ''} {'lost' if self.lost > 0 else 'handed over again'}"
            return f"{last}, and run {self.runs[1]} began the next with {what}: {self.cause}"
        if self.once:
            text = f"{where}: every sample once"
            if self.not_reached:
                text += f" so far (run {self.runs[1]} stopped {self.not_reached} samples before the epoch's end)"
        else:
            counts = [f"{n:,} samples {what}" for n, what in ((self.twice, "seen twice"), (self.never, "never seen"))]
            text = f"{where}: " + " and ".join(c for c, n in zip(counts, (self.twice, self.never)) if n)
            if self.cause:
                text += f": {self.cause}"
        if self.dropped:
            text += f" (run {self.runs[1]} dropped its first {self.dropped} batches unused, as itertools.islice does)"
        if self.assumed:
            text += f" (assumed: run {self.runs[1]}'s first epoch continues it)"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "runs": list(self.runs), "text": self.text()}


#: What each finding says of its likely cause.
RESTARTED = (
    "the resumed run started the epoch again: load the loader's state "
    "(Prefetcher.state_dict, StatefulDataLoader) or skip the batches already taken"
)
REORDERED = (
    "the resumed run skipped batches of another order (an unseeded shuffle, or a sampler "
    "whose epoch was not set): seed the shuffle and set the epoch, or resume from the loader's state"
)
REPEATED = "batches handed over before the restart were handed over again"
SKIPPED = "batches were skipped, or an epoch lost"
LOST = (
    "the sampler drew epoch {drew} before the restart and epoch {draws} after it: resume from the epoch "
    "the state says (the sampler's set_epoch, a Prefetcher's state), not a number kept apart"
)
UNSET = (
    "the resumed run's sampler drew its epoch {draws}, the stopped run's its epoch {drew}: "
    "call sampler.set_epoch({drew}) before the resumed epoch"
)


def spans(parts: list[Part], loader: str = "") -> list[Span]:
    """Each restart of a job whose runs' ``parts`` (one loader's, in run order)
    stopped mid-epoch: the :class:`Span` of that epoch across the two runs.
    Runs are numbered from 1; a part whose batches' samples are not all known
    gives none.

    >>> stopped = Part(epochs={(0, 0): [Batch(0, 1, [0, 1]), Batch(2, 3, [2, 3])]}, samples=6, batches=3, ended=False)
    >>> whole = [Batch(0, 1, [0, 1]), Batch(2, 3, [2, 3]), Batch(4, 5, [4, 5])]
    >>> again = Part(epochs={(0, 0): whole}, samples=6, batches=3)
    >>> (span,) = spans([stopped, again])
    >>> span.twice, span.never, span.cause == RESTARTED, span.assumed
    (4, 0, True, True)
    """
    found = []
    # The epoch so far where a run resumed it and stopped again before its end.
    carried: list[Batch] = []
    for number, (stopped, resumed) in enumerate(itertools.pairwise(parts), start=1):
        made = _span(stopped, resumed, carried if len(stopped.epochs) == 1 else [], number, loader)
        carried = []
        if made is not None:
            span, before = made
            found.append(span)
            if len(resumed.epochs) == 1:
                carried = before
    return found


def _span(
    stopped: Part, resumed: Part, carried: list[Batch], number: int, loader: str
) -> tuple[Span, list[Batch]] | None:
    """The span of run ``number``'s last epoch (after the ``carried`` batches of
    the runs before it, where it continued them) and run ``number + 1``'s first,
    and the epoch's batches before run ``number + 1``: what it carries to the
    next span, should it stop before the epoch's end; None where they make none."""
    if not stopped.epochs or not resumed.epochs:
        return None
    last = list(stopped.epochs)[-1]
    first = next(iter(resumed.epochs))
    taken, then = stopped.epochs[last], resumed.epochs[first]
    # Where the stopped run's state was taken, what it handed over after is replayed, not lost.
    mark = stopped.checkpoint
    if mark is not None:
        taken = [batch for batch in taken if batch.got <= mark]
    if carried:  # this run resumed the epoch too: what it dropped unused first was not seen
        taken = taken[dropped(taken) :]
    taken = carried + taken
    if not taken:
        return None  # nothing of the epoch kept (its state taken before it began): the resumed run begins it anew
    whole = resumed.batches or stopped.batches
    total = resumed.samples or stopped.samples
    drew, draws = stopped.sampler_epochs.get(last), resumed.sampler_epochs.get(first)
    if whole is not None and len(taken) >= whole and last not in stopped.cut_short:
        # The restart came between epochs: the epoch begun next should be the one after.
        if drew is None or draws is None or draws == drew + 1:
            return None
        span = Span(loader, last[1], (number, number + 1), len(taken), len(then), total or 0, 0, 0)
        span.lost = draws - drew - 1
        span.cause = LOST.format(drew=drew, draws=draws)
        return span, []
    if total is None or any(batch.samples is None for batch in taken + then):
        return None
    skipped = dropped(then)
    then = then[skipped:]
    counts = Counter(i for batch in taken + then for i in batch.samples or [])
    twice = sum(n - 1 for n in counts.values() if n > 1)
    missing = max(0, total - len(counts))  # a rank's share holds samples from all the dataset
    # The resumed epoch reached its end where the run went on past it, or ended without cutting it short.
    reached = len(resumed.epochs) > 1 or (resumed.ended and first not in resumed.cut_short)
    never, not_reached = (missing, 0) if reached else (0, missing)
    span = Span(loader, last[1], (number, number + 1), len(taken), len(then), total, twice, never, not_reached)
    span.dropped = skipped
    # Known to continue where the loader said it resumed, or its sampler draws the same epoch again.
    span.assumed = first not in resumed.resumed and (drew is None or drew != draws)
    if drew is not None and draws is not None and drew != draws:
        span.cause = UNSET.format(drew=drew, draws=draws)
    elif twice and not skipped and whole is not None and len(then) >= whole:
        span.cause = RESTARTED
    elif twice and never:
        span.cause = REORDERED
    elif twice:
        span.cause = REPEATED
    elif never:
        span.cause = SKIPPED
    return span, taken
