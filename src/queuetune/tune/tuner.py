"""tune(): a baseline, the model's curve, interleaved trials, the decision."""

from __future__ import annotations

import json
import math
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.in_flight import consumed_by_block
from ..analysis.report import Report
from ..common.jsonio import dumps
from ..common.units import parse_bytes, positive_int
from ..frameworks import get
from ..frameworks.adapters import adapter_of
from ..prefetch.read_ahead import read_ahead
from ..record.trace import Trace
from .decide import (
    Candidate,
    Trial,
    decide,
    pick_settings,
    summarise,
    trial_noise,
    trial_of,
    unsettled,
    unsure,
    weakest_reference,
)
from .job import Factory, as_job, build, framework_of
from .machine import machine_limits
from .measures import after_warmup
from .predict import Predicted, counts_up_to, predict, search_workers
from .trials import run_trial


@dataclass
class TuneResult:
    """The tuner's decision, with everything it measured and predicted: the
    default run's report (``baseline``), the candidates, the one chosen and those
    not chosen for want of sureness (``doubted``, see :func:`.decide.unsettled`);
    the decision in words is :func:`queuetune.render.explain.explain`.

    >>> r = TuneResult("python", {"buffer": 1}, [], None, [], None, 0.02, None)
    >>> r.kwargs()
    {}
    """

    framework: str
    default_settings: dict[str, Any]
    candidates: list[Candidate]
    chosen: Candidate | None
    predictions: list[Predicted]
    baseline: Report | None
    tolerance: float
    budget: int | None
    trials: list[Trial] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    margin: float = 0.0
    modelled_from: dict[str, Any] | None = None
    noise: float = 0.0
    sure: float = 0.9
    max_trials: int | None = None
    extra_trials: int = 0
    doubted: list[Candidate] = field(default_factory=list)

    def kwargs(self) -> dict[str, Any]:
        """The chosen settings as keyword arguments for the factory."""
        if self.chosen is None:
            return {}
        return {k: v for k, v in self.chosen.settings.items() if v is not None}

    def apply(self, factory: Factory) -> Any:
        """Build the tuned job with ``factory(**self.kwargs())``; for plain
        iterables, the loader comes wrapped in queuetune's bounded read-ahead; for
        a Ray dataset, its context gets the chosen ``object_store_memory`` and
        ``job.kwargs`` the chosen ``prefetch_batches``: read it with
        ``job.loader.iter_batches(**job.kwargs)``."""
        framework = get(self.framework)
        job = build(factory, framework, self.kwargs())
        knob = framework.depth_knob
        buffer = self.chosen.settings.get(knob) if self.chosen is not None and knob is not None else None
        if framework.read_ahead_by_queuetune and buffer:
            job.loader = read_ahead(job.loader, buffer)
        return job

    @property
    def default(self) -> Candidate | None:
        return next((c for c in self.candidates if c.is_default), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["baseline"] = None if self.baseline is None else self.baseline.to_dict(series=False)
        data["kwargs"] = self.kwargs()
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent=indent)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> TuneResult:
        data = json.loads(Path(path).read_text())
        data.pop("kwargs", None)
        data.pop("explanation", None)  # saved by versions that kept the words with the data
        data["candidates"] = [Candidate(**c) for c in data["candidates"]]
        data["chosen"] = Candidate(**data["chosen"]) if data["chosen"] else None
        data["trials"] = [Trial(**t) for t in data["trials"]]
        data["predictions"] = [Predicted.from_dict(p) for p in data["predictions"]]
        data["baseline"] = None if not data["baseline"] else Report.from_dict(data["baseline"])
        data["doubted"] = [Candidate(**c) for c in data.get("doubted", [])]
        return cls(**data)


#: Builds whose threads are busy (on a CPU or waiting for one) less than this share
#: of their time wait (on I/O, mostly): more workers than cores keep more of them going.
WAITING_BUILDS = 0.5


def worker_choices(default: int | None, most: int) -> list[int | None]:
    """The worker counts the tuner and the recommendation consider unless told, in
    the order they are tried: 1, 2, 3, 4, 6, 8, 12, 16, ... up to ``most`` (what
    the machine can hold, see :func:`.machine.most_workers`) and the loader's own;
    only the loader's (None) where it has no workers to set. The search stops where
    more workers stop gaining (see :func:`.predict.search_workers`): builds that
    wait on I/O go on past the cores, builds that fill them stop there.

    >>> worker_choices(4, 12), worker_choices(1, 2), worker_choices(None, 8)
    ([1, 2, 3, 4, 6, 8, 12], [1, 2], [None])
    """
    if default is None:
        return [None]
    return list(counts_up_to(most, default))


def tune(
    factory: Factory,
    *,
    steps: int = 100,
    warmup: int = 10,
    rounds: int = 3,
    tolerance: float = 0.02,
    budget: int | str | float | None = None,
    workers: list[int] | None = None,
    max_depth: int = 32,
    candidates: int = 4,
    progress: Callable[[int, int, str], None] | None = None,
    seed: int = 0,
    sure: float = 0.9,
    max_trials: int | None = None,
) -> TuneResult:
    """Find the setting with the least peak in-flight memory that keeps throughput.

    ``factory(**settings)`` builds a fresh job (see :class:`~queuetune.tune.Job`)
    for the knob values it is given and uses its own defaults when given none:
    Keras ``workers``/``max_queue_size``, torch ``num_workers``/``prefetch_factor``,
    tf.data ``buffer``, Ray Data ``concurrency`` (queuetune sets the object-store
    budget and ``prefetch_batches`` itself); a plain iterable is read ahead by
    queuetune itself. ``workers``: the worker counts to consider, by default
    the loader's own and 1, 2, 3, 4, 6, ... as far as more are predicted to gain,
    within what the machine's cores give and its memory holds (:func:`worker_choices`,
    :mod:`.machine`).

    One traced run of the loader as it is (the default; for tf.data a second
    one with ``prefetch(0)``, whose requests show the build times), the queue
    model's predicted curve over depths, then short measured trials of the few settings
    the model ranks best, interleaved in one process so that machine noise hits
    them alike; the decision is :func:`~queuetune.tune.decide`'s. A setting
    of less memory that measured within the tolerance but of which the trials
    are less than ``sure`` (their noise is larger than the gap) is measured
    again beside the best or the default, whichever it is less sure to keep up
    with, a pair of trials at a time, while the trials stay
    within ``max_trials`` (default: twice those of the rounds); what is still
    unsure then is not chosen, and a deeper setting is.

    >>> def factory():
    ...     return (x for x in range(40)), (lambda batch: None)
    >>> result = tune(factory, steps=20, warmup=2, rounds=1, candidates=2)  # doctest: +SKIP
    >>> result.kwargs()  # doctest: +SKIP
    {'buffer': 1}
    """
    options = _Options.checked(steps, warmup, rounds, tolerance, budget, max_depth, candidates, sure, max_trials)
    tuning = _Tuning(factory, options, progress)
    base = tuning.baseline()
    predictions = tuning.predict(base, workers, seed)
    tuning.interleave(pick_settings(predictions, base.default, options.tolerance, options.limit, options.candidates))
    summary = tuning.measure_doubts(base.default, predictions)
    return tuning.result(base, predictions, summary)


@dataclass(frozen=True)
class _Options:
    """:func:`tune`'s numbers, checked; ``limit``: the budget in bytes."""

    steps: int
    warmup: int
    rounds: int
    tolerance: float
    limit: int | None
    max_depth: int
    candidates: int
    sure: float
    max_trials: int | None

    @classmethod
    def checked(
        cls,
        steps: int,
        warmup: int,
        rounds: int,
        tolerance: float,
        budget: int | str | float | None,
        max_depth: int,
        candidates: int,
        sure: float,
        max_trials: int | None,
    ) -> _Options:
        steps = positive_int(steps, "steps")
        rounds = positive_int(rounds, "rounds")
        max_depth = positive_int(max_depth, "max depth")
        candidates = positive_int(candidates, "candidates")
        if not isinstance(warmup, int) or isinstance(warmup, bool) or not 0 <= warmup < steps:
            raise ValueError(f"warmup must be an integer from 0 to steps - 1, got {warmup!r}")
        if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not 0 <= tolerance < 1:
            raise ValueError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
        limit = None if budget is None else parse_bytes(budget, "budget")
        if not isinstance(sure, (int, float)) or isinstance(sure, bool) or not 0 <= sure < 1:
            raise ValueError(f"sure must be a number in [0, 1), got {sure!r}")
        if max_trials is not None:
            max_trials = positive_int(max_trials, "max trials")
        return cls(steps, warmup, rounds, tolerance, limit, max_depth, candidates, sure, max_trials)


@dataclass(frozen=True)
class _Baseline:
    """The loader as it is: its default settings and workers, the baseline run's
    trace and report, and the run at the settings the model reads build times
    from (``modelled``; ``unbuffered``: its trace after the warm-up)."""

    default: dict[str, Any]
    default_workers: int | None
    trace: Trace
    report: Report
    modelled: dict[str, Any] | None
    unbuffered: Trace | None


class _Tuning:
    """The runs of one tuning, one after another in this process, each counted
    for ``progress``; ``trials``: those of the compared settings."""

    def __init__(self, factory: Factory, options: _Options, progress: Callable[[int, int, str], None] | None) -> None:
        self.factory, self.options, self.progress = factory, options, progress
        probe_job = as_job(factory())
        self.adapter = adapter_of(framework_of(probe_job.loader))
        self.framework = self.adapter.bound()
        self.default = self.adapter.tuner_defaults(factory, probe_job.loader, probe_job.kwargs)
        if isinstance(probe_job.loader, types.GeneratorType):
            probe_job.loader.close()
        self.total = 2 + options.candidates * options.rounds
        self.done = 0
        self.trials: list[Trial] = []
        self.noise = 0.0
        self.allowed = self.first = 0

    def run(self, settings: dict[str, Any], label: str) -> tuple[Trace, Report, float]:
        """One run of the job at ``settings``, shown as ``label``."""
        ran = run_trial(self.factory, settings, self.framework, self.options.steps, self.options.warmup)
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, label)
        return ran

    def measure(self, settings: dict[str, Any], round_: int, label: str) -> None:
        """A trial of ``settings`` in ``round_``, kept in :attr:`trials`."""
        _, report, rate = self.run(settings, label)
        self.trials.append(trial_of(settings, self.framework, round_, report, rate))

    def baseline(self) -> _Baseline:
        """A warm-up run, the baseline, and the run the model reads build times from (where the loader has one)."""
        default = self.default
        default_workers = self.framework.workers(default) if self.framework.workers_knob else None
        # The first run in a process pays for imports, compilation and cold caches.
        self.run(default, "warm-up")
        base_trace, base_report, _ = self.run(default, "baseline")
        self.framework = self.adapter.measured(self.framework, base_trace)
        modelled = self.framework.model_settings(default)
        unbuffered = None
        if modelled is not None:
            self.total += 1
            unbuffered = after_warmup(self.run(modelled, "model: " + _shown(modelled))[0], self.options.warmup)
        return _Baseline(default, default_workers, base_trace, base_report, modelled, unbuffered)

    def predict(self, base: _Baseline, workers: list[int] | None, seed: int) -> list[Predicted]:
        """The model's curve over depths, at ``workers`` or as far as more workers gain."""
        options = self.options
        # Ray's blocks are cut into batches: the model counts blocks, the warm-up too.
        blocks = consumed_by_block(base.trace)
        block_warmup = options.warmup * len(blocks.consumed) // max(1, len(base.trace.consumed))
        trimmed = after_warmup(blocks, block_warmup)
        limits = machine_limits(trimmed, base.report)
        if workers or base.default_workers is None:
            counts: list[int | None] = list(workers) if workers else [None]
            return predict(trimmed, self.framework, counts, options.max_depth, seed, base.unbuffered, limits.machine)
        predictions, _ = search_workers(
            trimmed,
            self.framework,
            base.default_workers,
            limits.most,
            options.max_depth,
            seed,
            limits.machine,
            options.tolerance,
            base.unbuffered,
        )
        return predictions

    def interleave(self, chosen: list[dict[str, Any]]) -> None:
        """The rounds of trials of the ``chosen`` settings, and the noise they measure."""
        rounds = self.options.rounds
        self.total = self.done + len(chosen) * rounds
        for round_ in range(rounds):
            # Each round starts one setting later, so no setting always runs first
            # while the machine warms up.
            shift = round_ % len(chosen)
            for settings in chosen[shift:] + chosen[:shift]:
                self.measure(settings, round_, _shown(settings))
        self.noise = trial_noise(self.trials)
        self.first = len(self.trials)
        self.allowed = self.options.max_trials if self.options.max_trials is not None else 2 * self.first

    def measure_doubts(self, default: dict[str, Any], predictions: list[Predicted]) -> list[Candidate]:
        """Pairs of trials more of a setting the trials are unsure of, beside the
        one it is least sure to keep up with, while :attr:`allowed`; the candidates then."""
        options = self.options
        summary = summarise(self.trials, default, predictions)
        extra = options.rounds
        while len(self.trials) + 2 <= self.allowed:
            doubt = unsure(summary, options.tolerance, options.limit, self.noise, options.sure)
            if doubt is None:
                break
            beside = weakest_reference(doubt, summary, options.tolerance, self.noise)
            pair = [doubt.settings, beside.settings]
            self.total = max(self.total, self.done + 2)
            for settings in pair if extra % 2 else pair[::-1]:
                self.measure(settings, extra, "again: " + _shown(settings))
            extra += 1
            summary = summarise(self.trials, default, predictions)
        return summary

    def result(self, base: _Baseline, predictions: list[Predicted], summary: list[Candidate]) -> TuneResult:
        """The decision over ``summary``, with everything measured and predicted."""
        options = self.options
        chosen = decide(summary, options.tolerance, options.limit, self.noise, options.sure)
        return TuneResult(
            framework=self.framework.name,
            default_settings=base.default,
            candidates=summary,
            chosen=chosen,
            predictions=predictions,
            baseline=base.report,
            tolerance=options.tolerance,
            budget=options.limit,
            trials=self.trials,
            versions=dict(base.trace.meta.versions or {}),
            margin=self.noise * math.sqrt(2 / options.rounds),
            modelled_from=base.modelled,
            noise=self.noise,
            sure=options.sure,
            max_trials=self.allowed,
            extra_trials=len(self.trials) - self.first,
            doubted=[] if chosen is None else unsettled(summary, chosen, options.tolerance, options.sure),
        )


def _shown(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())
