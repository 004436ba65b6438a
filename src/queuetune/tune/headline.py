"""The one line a report opens with: the bottleneck, its size, and the next step.

The same :class:`Headline` is printed first in the terminal, opens each loader's
part of the HTML report, and is the ``headline`` of the JSON, so the three never
say different things; its next step is the :class:`~.recommend.Recommendation`'s,
which agrees with the verdict (see :func:`~.recommend.recommend`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..analysis.memory import COPY_ON_READ_FIX
from ..analysis.report import MODERATE, Report, analyze
from ..common import cores
from ..common.units import format_bytes, format_seconds
from ..frameworks import FRAMEWORKS
from ..record.trace import Trace
from .recommend import Recommendation, recommend
from .tuner import WAITING_BUILDS

#: What held the run back: its loading (waits for batches not yet built), the
#: hand-over (waits to take batches already built), or the model.
Bottleneck = Literal["loading", "the hand-over", "the model", "unknown"]

#: Where no framework says what lowers its hand-over.
HANDOVER_ADVICE = "fewer or smaller tensors a batch"
#: Where no framework says what copies its batches ahead of the step.
COPY_ADVICE = 'copy each batch to the device before the step asks: queuetune.Prefetcher(device="cuda")'
#: Where the step's batches are already pinned and it still waits for their copies.
PINNED_COPY_ADVICE = (
    'copy with .to(device, non_blocking=True), or ahead of the step with queuetune.Prefetcher(device="cuda")'
)


@dataclass(frozen=True)
class Headline:
    """The bottleneck, the shares of the steady state spent waiting for builds
    (``waiting``) and for hand-overs (``handover``), the next step in words and
    the settings it names (None where it names none), and whether coverage was
    partial (some batches' samples not keyed).

    >>> Headline("the model", 0.002, 0.01, "keep num_workers=2: nothing holds less").text()
    'Bottleneck: the model (waits 0.2 % for batches not yet built). Keep num_workers=2: nothing holds less.'
    """

    bottleneck: Bottleneck
    waiting: float | None
    handover: float | None
    next_step: str
    settings: dict[str, Any] | None = None
    partial_coverage: bool = False
    #: The memory finding in a few words (see :meth:`queuetune.analysis.memory.MemoryUse.short`).
    memory: str | None = None
    #: Items an epoch consumed more than once, with their cause or fix (see :func:`repeated`).
    coverage: str | None = None
    #: The epoch that spans a restart of the job, counted across both runs (see :mod:`queuetune.analysis.resumes`).
    resume: str | None = None

    def text(self) -> str:
        """The headline in one line."""
        if self.bottleneck == "unknown":
            size = "no batch reached the consumer"
        elif self.bottleneck == "the hand-over":
            size = f"waits {_share(self.handover)} to take batches already built, {_share(self.waiting)} for builds"
        else:
            size = f"waits {_share(self.waiting)} for batches not yet built"
        text = f"Bottleneck: {self.bottleneck} ({size})."
        if self.next_step:
            step = self.next_step.rstrip(".")
            first = step.split(" ", 1)[0]
            text += " " + (step[0].upper() + step[1:] if first.isalpha() else step) + "."
        if self.partial_coverage:
            text += " Coverage partial: some batches' samples were not keyed."
        if self.memory:
            text += f" Memory: {self.memory}."
        if self.coverage:
            text += f" Coverage: {self.coverage}."
        if self.resume:
            text += f" Resume: {self.resume}."
        return text

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.text()}


def headline(report: Report, recommendation: Recommendation) -> Headline:
    """The headline of ``report``, with ``recommendation`` (made from the same
    run) as its next step where it has one.

    >>> from queuetune.analysis.report import analyze
    >>> from queuetune.record.trace import Trace
    >>> headline(analyze(Trace()), Recommendation(None, why="no batches")).text()
    'Bottleneck: unknown (no batch reached the consumer). No batches.'
    """
    waiting, handover = report.input_bound_fraction, _handover_share(report)
    partial = report.coverage_partial
    memory = report.memory.short() if report.memory is not None else None
    notes = {"memory": memory, "coverage": repeated(report)}
    if waiting is None:
        return Headline("unknown", None, None, recommendation.why, None, partial, **notes)
    if waiting >= MODERATE:
        step, settings = _faster(report, recommendation)
        return Headline("loading", waiting, handover, step, settings, partial, **notes)
    step, settings = _leaner(recommendation)
    copying = _copying(report)
    if handover is not None and handover >= MODERATE:
        spec = FRAMEWORKS.get(report.meta.framework or "")
        advice = (spec.handover_advice if spec is not None else None) or HANDOVER_ADVICE
        per_batch = report.handover.median
        each = f" ({format_seconds(per_batch)} a batch)" if per_batch is not None else ""
        if report.memory is not None and report.memory.copy_on_read:
            # Workers copying pages (a fault and a copy each) take the cores the consumer
            # takes its batches on: their fix comes before a cheaper hand-over.
            lower = f"workers copy what they read (copy-on-read), which slows the hand-over{each}: {COPY_ON_READ_FIX}"
        else:
            lower = f"lower the hand-over{each}: {advice}"
        lower += f"; {copying}" if copying else ""
        step = lower + (f"; {step}" if recommendation.settings is not None else "")
        return Headline("the hand-over", waiting, handover, step, settings, partial, **notes)
    step = f"{copying}; {step}" if copying else step
    return Headline("the model", waiting, handover, step, settings, partial, **notes)


def repeated(report: Report) -> str | None:
    """The epochs that consumed items more than once, in a few words, with the
    cause the pattern tells or the framework's advice (None where none did).

    >>> from queuetune.analysis.report import Coverage
    >>> r = analyze(Trace())
    >>> r.coverage = [Coverage(0, 0, "batch", 40, 40, duplicates=[25, 29, 32], extra=3)]
    >>> repeated(r)
    'epoch 0 took 3 batches more than once (25, 29, 32)'
    """
    rows = [c for c in report.coverage if c.duplicates]
    if not rows:
        return None
    parts = []
    for c in rows[:3]:
        shown = ", ".join(str(d) for d in c.duplicates[:5]) + (", …" if len(c.duplicates) > 5 else "")
        parts.append(f"epoch {c.epoch} took {len(c.duplicates)} {_plural(c.unit)} more than once ({shown})")
    text = "; ".join(parts) + (f"; {len(rows) - 3} epochs more" if len(rows) > 3 else "")
    spec = FRAMEWORKS.get(report.meta.framework or "")
    why = next((c.cause for c in rows if c.cause), None) or (spec.repeat_advice if spec is not None else None)
    return f"{text}: {why}" if why else text


def _faster(report: Report, rec: Recommendation) -> tuple[str, dict[str, Any] | None]:
    share = report.build_busy_share
    waits_on_io = share is not None and share < WAITING_BUILDS
    if rec.changes and rec.settings is not None:
        step = f"try {_shown(rec.settings)}"
        gain = rec.gain
        predicted = f"predicted {gain:.1f}× the throughput" if gain is not None else "predicted"
        if rec.limit == "cores" and rec.cores is not None:
            step += f" ({_filling(report, rec)}: {predicted})"
        elif gain is not None:
            step += f" ({predicted})"
        if waits_on_io and share is not None:
            step += f": builds wait on I/O {_share(1 - share)} of their time"
        if rec.edge:
            step += f"; the most workers considered, as {rec.edge} allows"
        return step, rec.settings
    if share is not None and not waits_on_io:
        return (
            f"builds use a core {_share(share)} of their time and {cores.available()} cores are available: "
            "make each build cheaper (decode smaller, cache decoded samples) or give it more cores"
        ), None
    if rec.settings is None and report.meta.depth == 0:
        return (
            "nothing is built ahead of the model: build batches in workers while it steps "
            "(queuetune.Prefetcher, or the framework's loader with workers)"
        ), None
    if rec.settings is None:
        return rec.why, None
    return "the queue model predicts no faster setting; `queuetune tune` measures them", None


def _filling(report: Report, rec: Recommendation) -> str:
    """Which limit the setting reaches: "16 workers would fill the 16 cores"."""
    spec = FRAMEWORKS.get(report.meta.framework or "")
    knob = spec.workers_knob if spec is not None else None
    workers = (rec.settings or {}).get(knob) if knob else None
    who = f"{workers} workers" if workers is not None else "this setting"
    if rec.others is not None and rec.others >= 0.5:
        return f"{who} would fill the {rec.cores} cores, {rec.others:.1f} of them taken by other programs"
    return f"{who} would fill the {rec.cores} cores"


def _leaner(rec: Recommendation) -> tuple[str, dict[str, Any] | None]:
    if rec.settings is None:
        return f"no setting to recommend: {rec.why}", None
    if rec.changes:
        saved = rec.saved_bytes
        if saved is None or saved <= 0:
            return f"{_shown(rec.settings)}: predicted at {_share(rec.share)} of the best throughput", rec.settings
        workers = " (the workers' own memory counted)" if rec.worker_bytes is not None else ""
        if rec.thread_bytes is not None:
            workers = f" (the {format_bytes(int(rec.thread_bytes))} heap each worker thread keeps counted)"
        if rec.copying:
            workers = " (the workers' own memory counted, each copying the pages of what it reads)"
        return (
            f"{_shown(rec.settings)} is predicted to hold {format_bytes(int(saved))} less{workers} "
            f"at {_share(rec.share)} of the best throughput"
        ), rec.settings
    return f"keep {_shown(rec.settings)}: no setting is predicted to hold less at the same throughput", None


def _copying(report: Report) -> str | None:
    """The step's wait for copies of its batches to the device, and what copies
    them ahead, where that wait is a moderate share of its time or more (None
    otherwise: the copy is not what the step waits for)."""
    use = report.device
    if use is None or use.step_copy_share is None or use.step_copy_share < MODERATE:
        return None
    pinned = use.pageable_share is not None and use.pageable_share < 0.5
    spec = FRAMEWORKS.get(report.meta.framework or "")
    advice = PINNED_COPY_ADVICE if pinned else (spec.copy_advice if spec is not None else None) or COPY_ADVICE
    each = f", {format_seconds(use.step_copy_median_seconds)} a step" if use.step_copy_median_seconds else ""
    memory = "pinned" if pinned else "pageable"
    return (
        f"the step waits {_share(use.step_copy_share)} of its time for copies of its batches to the device "
        f"(from {memory} memory{each}): {advice}"
    )


def _plural(unit: str) -> str:
    return {"batch": "batches", "sample": "samples", "sample key": "sample keys"}.get(unit, unit)


def _handover_share(report: Report) -> float | None:
    if not report.handover_seen or not report.steady_seconds or report.steady_handover_seconds is None:
        return None
    return min(1.0, report.steady_handover_seconds / report.steady_seconds)


def _share(value: float | None) -> str:
    if value is None:
        return "an unknown share"
    return f"{value * 100:.0f} %" if value >= 0.1 else f"{value * 100:.1f} %"


def _shown(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def advise(trace: Trace, report: Report | None = None) -> tuple[Recommendation, Headline]:
    """The recommendation for ``trace`` and the headline of its report (made here
    where not given): what ``queuetune run`` and ``queuetune report`` show.

    >>> from queuetune.record.trace import Trace
    >>> advise(Trace())[1].bottleneck
    'unknown'
    """
    report = analyze(trace) if report is None else report
    recommendation = recommend(trace, report=report)
    return recommendation, headline(report, recommendation)
