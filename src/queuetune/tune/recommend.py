"""A recommendation from one trace, with no trials: the queue model fitted to
what was measured, asked for the setting of least memory that keeps the
throughput it predicts at best (what ``queuetune run`` can say after a
program; ``queuetune tune`` measures it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..analysis.in_flight import consumed_by_block
from ..analysis.report import MODERATE, Report, analyze
from ..frameworks import FRAMEWORKS
from ..frameworks.base import Framework
from ..record.trace import Trace
from .machine import Limits, machine_limits
from .measures import after_warmup
from .predict import Predicted, predict, search_workers
from .worker_memory import WorkerMemory, thread_memory, worker_memory


@dataclass(frozen=True)
class Recommendation:
    """What the model predicts for the recommended setting and for the one measured.

    ``settings``: the knobs to set (None with ``why`` when the trace cannot
    give a recommendation); ``share``: its predicted throughput as a share of
    the best predicted; ``peak_bytes``: its predicted peak in flight;
    ``current_share``/``current_peak_bytes``: the same for the settings
    measured (None when the model does not reach them); ``for_speed``: chosen
    for more throughput (the run waited for its builds), not for less memory.
    ``worker_bytes``: each worker process's own memory as measured at the
    memory peak (its baseline and its growth; None where not read), which a setting's memory
    counts once a worker: ``held_bytes`` and ``current_held_bytes`` are the
    peak in flight and the workers' own memory together; ``copying``: the
    workers copy what they read, so that fewer workers each hold more (see
    :mod:`.worker_memory`). ``limit``, ``cores``
    and ``edge``: what bounds it beyond the queue (see :mod:`.machine`).

    >>> Recommendation(None, why="too few batches").text()
    'no recommendation: too few batches'
    """

    settings: dict[str, Any] | None
    share: float = 0.0
    peak_bytes: float = 0.0
    current: dict[str, Any] | None = None
    current_share: float | None = None
    current_peak_bytes: float | None = None
    why: str = ""
    for_speed: bool = False
    worker_bytes: float | None = None
    held_bytes: float = 0.0
    current_held_bytes: float | None = None
    copying: bool = False
    #: The heap each worker thread keeps beyond the batches in flight, counted
    #: in ``held_bytes`` (None: processes, or none kept; see :func:`.thread_memory`).
    thread_bytes: float | None = None
    #: ``"cores"`` where its predicted throughput is what the machine's ``cores``
    #: (those this process may run on) give, ``others`` of them kept busy by other programs.
    limit: str | None = None
    cores: int | None = None
    others: float | None = None
    #: What kept more workers from being considered, where it offers the most considered.
    edge: str | None = None

    @property
    def changes(self) -> bool:
        """Whether it recommends settings other than those measured."""
        return self.settings is not None and not (
            self.current is not None and all(self.current.get(k) == v for k, v in self.settings.items())
        )

    @property
    def gain(self) -> float | None:
        """Its predicted throughput over that of the settings measured."""
        if self.current_share is None or not self.current_share:
            return None
        return self.share / self.current_share

    @property
    def saved_bytes(self) -> float | None:
        """The memory it is predicted to hold less than the settings measured:
        the peak in flight and the workers' baselines."""
        return None if self.current_held_bytes is None else self.current_held_bytes - self.held_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON, with :meth:`text`."""
        return {**asdict(self), "text": self.text()}

    def text(self) -> str:
        """The recommendation in one sentence."""
        from ..common.units import format_bytes

        if self.settings is None:
            return f"no recommendation: {self.why}"
        shown = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        if not self.changes:
            if self.for_speed:
                return f"keep {shown}: the model predicts no setting of more throughput"
            return f"keep {shown}: the model predicts no setting of less memory at {self.share:.0%} of the best"
        peak = format_bytes(int(self.peak_bytes))
        text = f"{shown}: predicted {self.share:.0%} of the best throughput, {peak} in flight at peak"
        if self.current_share is not None and self.current_peak_bytes is not None:
            text += f" (the settings measured: {self.current_share:.0%}, {format_bytes(int(self.current_peak_bytes))})"
        return text + "; `queuetune tune` measures it"


def recommend(
    trace: Trace, tolerance: float = 0.02, max_depth: int = 32, warmup: int = 10, report: Report | None = None
) -> Recommendation:
    """The setting of least predicted peak memory whose predicted throughput is
    at least ``1 - tolerance`` of the best predicted, over depths up to
    ``max_depth`` and worker counts 1, 2, 3, 4, 6, ... as far as more are
    predicted to gain (see :func:`~queuetune.tune.worker_choices`), none
    predicted faster than the machine's cores allow (:mod:`.machine`), from
    ``trace`` alone (``report``: its analysis, where it was made already).

    It agrees with the report's verdict: a run that waited for its builds
    (``input_bound_fraction`` at least ``MODERATE``) is offered only a
    setting predicted faster than the one measured (``for_speed``), else it
    keeps its settings; a run that did not is offered only one that holds
    less, else it keeps them.

    >>> from queuetune.record.trace import Trace, TraceMeta
    >>> recommend(Trace(meta=TraceMeta(framework="queuetune"))).why
    'the Prefetcher sizes its own queue (max_bytes, adaptive)'
    """
    meta = trace.meta
    framework = FRAMEWORKS.get(meta.framework or "")
    if framework is not None and framework.unmodelled is not None:
        return Recommendation(None, why=framework.unmodelled)
    if framework is None or framework.depth_knob is None or meta.settings is None:
        return Recommendation(None, why=f"no queue model for a {meta.loader or 'loader'} watched so")
    if len(trace.consumed) < 2 * warmup or not trace.produced:
        return Recommendation(None, why=f"too few batches consumed ({len(trace.consumed)}) to fit the model")
    report = analyze(trace) if report is None else report
    current = {k: meta.settings[k] for k in framework.tuned_knobs if k in meta.settings}
    workers = framework.workers(current) if framework.workers_knob else None
    trimmed = after_warmup(consumed_by_block(trace), warmup)
    limits = machine_limits(trimmed, report)
    rows, considered = _predicted(trimmed, framework, workers, limits, max_depth, tolerance)
    if not rows:
        return Recommendation(None, why="the queue model could not be fitted to this run")
    held = _Held(framework, current, _own_memory(trace, report, framework, current))
    now = _matching(rows, current)
    for_speed = (report.input_bound_fraction or 0.0) >= MODERATE
    chosen = _choose(rows, now, held, tolerance, for_speed, limits.worker_bytes, workers)
    edge = limits.bound if workers is not None and considered == limits.most == held.workers(chosen) else None
    return _recommendation(current, chosen, now, max(p.throughput for p in rows), held, for_speed, limits, edge)


def _predicted(
    trimmed: Trace, framework: Framework, workers: int | None, limits: Limits, max_depth: int, tolerance: float
) -> tuple[list[Predicted], int | None]:
    """The model's rows, over depths at the loader's workers or as far as more
    workers gain, and the most workers considered (None where it has none)."""
    if workers is None:
        return predict(trimmed, framework, [None], max_depth, seed=0, machine=limits.machine), None
    return search_workers(
        trimmed, framework, workers, limits.most, max_depth, seed=0, machine=limits.machine, tolerance=tolerance
    )


def _own_memory(trace: Trace, report: Report, framework: Framework, current: dict[str, Any]) -> WorkerMemory | None:
    """Each worker's own memory, as measured: its processes', else its threads' heaps."""
    own = worker_memory(trace, report)
    if own is None and framework.workers_knob and current.get(framework.workers_knob):
        # Worker threads (a torch DataLoader of num_workers=0 builds in the consumer's).
        own = None if framework.rules(current).processes else thread_memory(trace)
    return own


@dataclass(frozen=True)
class _Held:
    """What a predicted setting holds: its peak in flight and its workers' own memory (``own``)."""

    framework: Framework
    current: dict[str, Any]
    own: WorkerMemory | None

    def workers(self, p: Predicted) -> int:
        return _workers_of(self.framework, self.current, p)

    def __call__(self, p: Predicted) -> float:
        return p.peak_built_bytes + (self.own.total(self.workers(p)) if self.own is not None else 0.0)


def _choose(
    rows: list[Predicted],
    now: Predicted | None,
    held: _Held,
    tolerance: float,
    for_speed: bool,
    per_worker: float | None,
    workers: int | None,
) -> Predicted:
    """The row of least memory within ``tolerance`` of the best, unless it is not
    faster (``for_speed``) or leaner than the settings measured (``now``): then those."""
    best = max(p.throughput for p in rows)
    keeping = [p for p in rows if p.throughput >= (1 - tolerance) * best]
    if per_worker is None and workers is not None:  # a worker's own memory unknown: none added for memory
        keeping = [p for p in keeping if held.workers(p) <= workers] or keeping
    chosen = min(keeping, key=lambda p: (held(p), -p.throughput))
    if now is not None:
        faster = chosen.throughput > (1 + tolerance) * now.throughput
        leaner = held(chosen) < held(now) and (per_worker is not None or held.workers(chosen) <= held.workers(now))
        if not (faster if for_speed else leaner):
            chosen = now
    return chosen


def _recommendation(
    current: dict[str, Any],
    chosen: Predicted,
    now: Predicted | None,
    best: float,
    held: _Held,
    for_speed: bool,
    limits: Limits,
    edge: str | None,
) -> Recommendation:
    machine, own = limits.machine, held.own
    return Recommendation(
        settings={**current, **chosen.settings},
        share=chosen.throughput / best if best else 0.0,
        peak_bytes=chosen.peak_built_bytes,
        current=current,
        current_share=now.throughput / best if now is not None and best else None,
        current_peak_bytes=now.peak_built_bytes if now is not None else None,
        for_speed=for_speed,
        worker_bytes=limits.worker_bytes,
        held_bytes=held(chosen),
        current_held_bytes=held(now) if now is not None else None,
        copying=own is not None and own.copying,
        thread_bytes=own.each if own is not None and own.threads else None,
        limit=chosen.limit,
        cores=machine.cores if machine is not None else None,
        others=machine.others if machine is not None else None,
        edge=edge,
    )


def _workers_of(framework: Any, current: dict[str, Any], p: Predicted) -> int:
    """The worker processes or threads setting ``p`` runs (0 where the loader has none)."""
    if not framework.workers_knob:
        return 0
    return int(framework.workers({**current, **p.settings}) or 0)


def _matching(rows: list[Predicted], current: dict[str, Any]) -> Predicted | None:
    for p in rows:
        if all(current.get(k) == v for k, v in p.settings.items()):
            return p
    return None
