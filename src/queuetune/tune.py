"""Trials and the queue model -> the smallest queue that keeps throughput.

One traced run of the loader as it is (the default), the queue model's predicted
curve over depths, then short measured trials of the few settings the model
ranks best, interleaved in one process so that machine noise hits them alike.
The decision: the least peak in-flight memory whose throughput is at least
``(1 - tolerance)`` times the best measured, optionally under a byte budget.
The trials confirm the model rather than overrule it on noise: a setting the
model predicts to keep throughput is refused only when it measured slower than
the tolerance by more than the trials' own noise (:func:`trial_noise`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import types
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .analysis import Report, analyze, consumed_by_block
from .kinds import is_dataloader, is_keras_model, is_pydataset, is_ray_dataset, is_tf_dataset
from .knobs import BY_FRAMEWORK, Knobs, RayKnobs, reachable_depths
from .nbytes import nbytes
from .prefetch import read_ahead
from .probe import probe_of, watch
from .recorder import clock
from .trace import Trace
from .units import format_bytes, parse_bytes, positive_int

Factory = Callable[..., Any]


@dataclass
class Job:
    """What a factory returns: the loader, and the consumer that takes its batches.

    The consumer is either ``step`` (called with each batch, for a plain loop) or
    a Keras ``model`` whose ``method`` ("fit", "predict" or "evaluate") is called
    with the loader and ``kwargs``. A Ray ``Dataset`` is read with ``step``
    through its ``method`` "iter_batches" (the default for it) or
    "iter_torch_batches", called with ``kwargs`` (``batch_size``...).

    >>> job = Job(loader=[1, 2, 3], step=print)
    >>> job.method
    'fit'
    """

    loader: Any
    step: Callable[[Any], Any] | None = None
    model: Any = None
    method: str = "fit"
    kwargs: dict[str, Any] = field(default_factory=dict)


def as_job(made: Any) -> Job:
    """Accept a :class:`Job`, or a ``(loader, step_function)`` or ``(loader, keras_model)`` pair.

    >>> as_job(([1], len)).step is len
    True
    """
    if isinstance(made, Job):
        job = made
    elif isinstance(made, tuple) and len(made) == 2:
        loader, consumer = made
        if is_keras_model(consumer):
            job = Job(loader, model=consumer)
        elif callable(consumer):
            job = Job(loader, step=consumer)
        else:
            raise TypeError(
                f"the factory's consumer must be a step function or a Keras model, got {type(consumer).__name__}"
            )
    else:
        raise TypeError(f"the factory must return queuetune.Job(...) or (loader, consumer), got {type(made).__name__}")
    if job.model is None and job.step is None:
        raise TypeError("the job needs a consumer: a step function or a Keras model")
    if is_ray_dataset(job.loader):
        if job.model is not None:
            raise TypeError("a Ray dataset is read by a step function, not a Keras model")
        if job.method not in ("fit", *RAY_METHODS):
            raise ValueError(f"method must be 'iter_batches' or 'iter_torch_batches', got {job.method!r}")
    elif job.method not in ("fit", "predict", "evaluate"):
        raise ValueError(f"method must be 'fit', 'predict' or 'evaluate', got {job.method!r}")
    return job


#: The iterators of a Ray dataset a job may read it with.
RAY_METHODS = ("iter_batches", "iter_torch_batches")


def detect_framework(loader: Any) -> str:
    """``keras``, ``torch``, ``tfdata``, ``ray`` or ``python`` (any other iterable).

    >>> detect_framework(iter([1]))
    'python'
    """
    if is_pydataset(loader):
        return "keras"
    if is_dataloader(loader):
        return "torch"
    if is_tf_dataset(loader):
        return "tfdata"
    if is_ray_dataset(loader):
        return "ray"
    if isinstance(loader, Iterable):
        return "python"
    raise TypeError(f"cannot tune {type(loader).__name__}: it is not a loader")


def default_settings(factory: Factory, job: Job, framework: str) -> dict[str, Any]:
    """The knob values of the loader the factory builds when given nothing.

    A plain iterable is read without prefetch (``buffer=0``); a tf.data factory
    must give its ``buffer`` parameter an integer default (AUTOTUNE's buffer is
    sized inside TensorFlow, out of the probe's sight). A Ray dataset's are the
    job's ``prefetch_batches`` (Ray's 1 when not given), its context's budget
    (None: Ray's default) and the factory's ``concurrency`` default (None when
    it takes none: every CPU).
    """
    if framework == "python":
        return {"buffer": 0}
    if framework == "ray":
        from .frameworks.ray import object_store_budget

        return {
            "prefetch_batches": job.kwargs.get("prefetch_batches", 1),
            "object_store_memory": object_store_budget(job.loader),
            "concurrency": _parameter_default(factory, "concurrency"),
        }
    if framework == "tfdata":
        value = _parameter_default(factory, "buffer")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                "a tf.data factory takes the prefetch size as `buffer` with an integer default "
                f"(e.g. def make(buffer=8)); got {value!r}"
            )
        return {"buffer": value}
    return loader_settings(job.loader, framework)


def _parameter_default(factory: Factory, name: str) -> Any:
    """The default of the factory's keyword argument ``name`` (None when it has none)."""
    import inspect

    try:
        parameter = inspect.signature(factory).parameters.get(name)
    except (TypeError, ValueError):
        return None
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return None
    return parameter.default


def loader_settings(loader: Any, framework: str) -> dict[str, Any]:
    """The knob values a freshly built loader carries (its defaults)."""
    if framework == "keras":
        return {
            "workers": loader.workers,
            "max_queue_size": loader.max_queue_size,
            "use_multiprocessing": loader.use_multiprocessing,
        }
    if framework == "torch":
        return {
            "num_workers": loader.num_workers,
            "prefetch_factor": loader.prefetch_factor if loader.num_workers else None,
        }
    return {}


@dataclass
class Trial:
    """One measured run of one setting."""

    settings: dict[str, Any]
    depth: int
    round: int
    batches: int
    throughput: float
    peak_in_flight_batches: int
    peak_in_flight_bytes: int
    input_bound_fraction: float | None
    peak_rss_bytes: int | None
    bytes_estimated: bool = False


@dataclass
class Candidate:
    """A setting, its trials summarised (median throughput, highest peak memory),
    and what the model predicted for it."""

    settings: dict[str, Any]
    depth: int
    throughput: float
    peak_in_flight_batches: int
    peak_in_flight_bytes: int
    peak_rss_bytes: int | None
    input_bound_fraction: float | None
    trials: int
    predicted_throughput: float | None = None
    predicted_peak_in_flight_batches: float | None = None
    is_default: bool = False
    relative: float | None = None
    predicted_share: float | None = None

    def share(self, candidates: list[Candidate]) -> float:
        """Its throughput as a share of the best: the median over rounds of its
        share of that round's best when rounds were paired, else of medians."""
        relatives = [c.relative for c in candidates if c.relative is not None]
        if self.relative is not None and relatives:
            return self.relative / max(relatives)
        best = max(c.throughput for c in candidates)
        return self.throughput / best if best else 0.0

    def label(self, knobs: Knobs) -> str:
        shown = {k: v for k, v in self.settings.items() if v is not None}
        text = ", ".join(f"{k}={v}" for k, v in shown.items())
        return f"{text} (depth {self.depth})" if text else f"depth {self.depth}"


@dataclass
class TuneResult:
    """The tuner's decision, with everything it measured and predicted.

    >>> r = TuneResult("python", {"buffer": 1}, [], None, [], {}, 0.02, None, [])
    >>> r.kwargs()
    {}
    """

    framework: str
    default_settings: dict[str, Any]
    candidates: list[Candidate]
    chosen: Candidate | None
    predictions: list[dict[str, Any]]
    baseline: dict[str, Any]
    tolerance: float
    budget: int | None
    explanation: list[str]
    trials: list[Trial] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    margin: float = 0.0

    def kwargs(self) -> dict[str, Any]:
        """The chosen settings as keyword arguments for the factory."""
        if self.chosen is None:
            return {}
        return {k: v for k, v in self.chosen.settings.items() if v is not None}

    def apply(self, factory: Factory) -> Any:
        """Build the tuned job with ``factory(**self.kwargs())``; for plain
        iterables, the loader comes wrapped in queuetune's bounded prefetch; for
        a Ray dataset, its context gets the chosen ``object_store_memory`` and
        ``job.kwargs`` the chosen ``prefetch_batches``: read it with
        ``job.loader.iter_batches(**job.kwargs)``."""
        job = build(factory, self.framework, self.kwargs())
        if self.framework == "python" and self.chosen is not None and self.chosen.settings["buffer"]:
            job.loader = read_ahead(job.loader, self.chosen.settings["buffer"])
        return job

    @property
    def default(self) -> Candidate | None:
        return next((c for c in self.candidates if c.is_default), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kwargs"] = self.kwargs()
        return data

    def to_json(self, indent: int | None = 2) -> str:
        from .render.json import dumps

        return dumps(self.to_dict(), indent=indent)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> TuneResult:
        data = json.loads(Path(path).read_text())
        data.pop("kwargs", None)
        data["candidates"] = [Candidate(**c) for c in data["candidates"]]
        data["chosen"] = Candidate(**data["chosen"]) if data["chosen"] else None
        data["trials"] = [Trial(**t) for t in data["trials"]]
        return cls(**data)


def build(factory: Factory, framework: str, settings: dict[str, Any]) -> Job:
    """Call the factory with the settings it takes (queuetune applies its own
    prefetch buffer to plain iterables itself) and return the job."""
    import inspect

    if framework == "python":
        kwargs: dict[str, Any] = {}
    elif framework == "ray":
        # queuetune sets the budget and the prefetch itself; the factory may take concurrency
        kwargs = {k: v for k, v in settings.items() if k == "concurrency" and v is not None}
    else:
        kwargs = dict(settings)
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return _configured(as_job(factory(**kwargs)), framework, settings)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        names = {p.name for p in parameters}
        knob = BY_FRAMEWORK[framework].depth_knob if framework not in ("python", "ray") else None
        if kwargs and knob is not None and knob not in names:
            raise TypeError(f"the factory must take the keyword argument {knob!r}")
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    return _configured(as_job(factory(**kwargs)), framework, settings)


def _configured(job: Job, framework: str, settings: dict[str, Any]) -> Job:
    """A Ray job with the settings queuetune applies itself: the budget in the
    dataset's context and ``prefetch_batches`` among the iterator's arguments."""
    if framework != "ray":
        return job
    from .frameworks.ray import set_object_store_budget

    if settings.get("object_store_memory") is not None:
        set_object_store_budget(job.loader, settings["object_store_memory"])
    if "prefetch_batches" in settings:
        job.kwargs = {**job.kwargs, "prefetch_batches": settings["prefetch_batches"]}
    return job


def run_trial(
    factory: Factory,
    settings: dict[str, Any],
    framework: str,
    steps: int,
    warmup: int,
) -> tuple[Trace, Report, float]:
    """Build the job for ``settings``, consume ``steps`` batches under the probe,
    and return the trace, its report and the throughput after ``warmup`` batches
    and after the :func:`startup_backlog`.

    If the trial fails (the loader or the consumer raises, or it is interrupted),
    the exception reaches the caller unchanged, with one note added: the file in
    the system's temporary directory where the trace recorded up to the fault
    was saved (``queuetune-trial-<pid>-<random>.json``, read it with
    :meth:`Trace.load`).

    >>> def make():
    ...     def batches():
    ...         yield from range(3)
    ...         raise OSError("disk gone")
    ...     return batches(), lambda batch: None
    >>> import os
    >>> try:
    ...     run_trial(make, {"buffer": 0}, "python", steps=10, warmup=0)
    ... except OSError as exc:
    ...     path = exc.__notes__[0].split()[-1]
    >>> len(Trace.load(path).consumed)
    3
    >>> os.remove(path)
    """
    job = build(factory, framework, settings)
    if framework == "python":
        trace = _run_prefetched(job, settings["buffer"], steps)
    else:
        watched = watch(job.loader)
        probe = probe_of(watched)
        try:
            _consume(job, watched, probe, steps)
            probe.settle(quiet=0.05, timeout=2.0)
            trace = probe.trace()
        except BaseException as exc:
            probe.close()
            _keep_partial(probe.trace(), exc)
            raise
        finally:
            probe.close()
    return trace, analyze(trace), throughput(trace, max(warmup, startup_backlog(trace)))


def _consume(job: Job, watched: Any, probe: Any, steps: int) -> None:
    if job.model is not None:
        kwargs = dict(job.kwargs)
        callbacks = list(kwargs.pop("callbacks", []))
        kwargs.setdefault("verbose", 0)
        if job.method == "fit":
            kwargs.update(epochs=1, steps_per_epoch=steps)
        else:
            kwargs["steps"] = steps
        method = getattr(job.model, job.method)
        method(watched, callbacks=[*callbacks, probe.keras_callback(print_report=False)], **kwargs)
        return
    if is_ray_dataset(job.loader):
        method = job.method if job.method in RAY_METHODS else "iter_batches"
        iterator = iter(getattr(watched, method)(**job.kwargs))
    else:
        iterator = iter(watched)
    try:
        for _ in range(steps):
            try:
                batch = next(iterator)
            except StopIteration:
                break
            job.step(batch)  # type: ignore[misc]
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def _run_prefetched(job: Job, buffer: int, steps: int) -> Trace:
    """A plain iterable behind queuetune's prefetch thread: batches are counted
    as built inside the thread and as consumed by this loop."""
    if job.step is None:
        raise TypeError("a plain iterable needs a step function as its consumer")
    inner = watch(iter(job.loader))
    probe = probe_of(inner)
    recorder = probe.recorder
    recorder.consumer = "loop"
    outer = read_ahead(inner, buffer) if buffer > 0 else inner
    recorder.run_begin()
    failure: BaseException | None = None
    try:
        for seq in range(steps):
            asked = clock()
            try:
                batch = next(outer)
            except StopIteration:
                break
            recorder.consumed(asked, clock(), nbytes=nbytes(batch), key=seq)
            job.step(batch)
    except BaseException as exc:
        failure = exc
        raise
    finally:
        try:
            outer.close()  # type: ignore[union-attr]
        finally:
            recorder.run_end()
            trace = probe.trace()
            probe.close()
            if failure is not None:
                _keep_partial(trace, failure)
    return trace


def _keep_partial(trace: Trace, exc: BaseException) -> None:
    """Save the trace of a failed trial to a temporary file and name it in a note
    on ``exc``; saving never replaces the trial's own error."""
    import os
    import tempfile

    try:
        fd, path = tempfile.mkstemp(prefix=f"queuetune-trial-{os.getpid()}-", suffix=".json")
        with os.fdopen(fd, "w") as file:
            file.write(trace.to_json())
    except Exception as error:
        exc.add_note(f"queuetune: the trial's trace could not be saved ({error})")
        return
    exc.add_note(f"queuetune: the trace recorded up to the fault is saved in {path}")


def after_warmup(trace: Trace, warmup: int) -> Trace:
    """The trace without its first ``warmup`` consumed batches and the batches
    built for them (start-up: imports, model build, worker start). Batches are
    matched on the whole trace first, so batches finished out of order keep
    their partners.

    >>> from queuetune.trace import Consumed, Produced
    >>> t = Trace(produced=[Produced(i, i, 1) for i in range(8)], consumed=[Consumed(i, i) for i in range(8)])
    >>> len(after_warmup(t, 2).consumed), len(after_warmup(t, 2).produced)
    (6, 6)
    """
    if warmup <= 0 or len(trace.consumed) - warmup < 4:
        return trace
    from .analysis import match

    matching = match(trace)
    dropped = {j for j in matching.consumed[:warmup] if j is not None}
    dropped |= {i for _, i in matching.hidden}
    return Trace(
        meta=dataclasses.replace(trace.meta, pre_run_consumes=None),
        start=trace.start,
        end=trace.end,
        produced=[p for i, p in enumerate(trace.produced) if i not in dropped],
        consumed=trace.consumed[warmup:],
        marks=trace.marks,
        memory=trace.memory,
    )


def startup_backlog(trace: Trace) -> int:
    """Batches already built when the consumer first asked (Keras builds twice its
    depth while ``fit`` builds the model). A trial counts throughput only after
    the consumer has taken them: they cost the timed window nothing, so a deeper
    queue would look faster in a short run than it is.

    >>> from queuetune.trace import Consumed, Produced
    >>> startup_backlog(Trace(produced=[Produced(0, t, 1) for t in (0.5, 0.8, 1.5)],
    ...                       consumed=[Consumed(1.0, 1.0)]))
    2
    """
    if not trace.consumed:
        return 0
    first = trace.consumed[0].requested
    return sum(1 for p in trace.produced if p.end <= first)


def throughput(trace: Trace, warmup: int = 0) -> float:
    """Batches per second the consumer took, after the first ``warmup`` batches.

    >>> from queuetune.trace import Consumed
    >>> throughput(Trace(consumed=[Consumed(0, t) for t in (0.0, 1.0, 1.5, 2.0)]), warmup=1)
    2.0
    """
    times = [c.consumed for c in trace.consumed]
    if len(times) - warmup < 2:
        warmup = 0
    times = times[warmup:]
    if len(times) < 2 or times[-1] <= times[0]:
        return 0.0
    return (len(times) - 1) / (times[-1] - times[0])


def tune(
    factory: Factory,
    *,
    steps: int = 100,
    warmup: int = 10,
    rounds: int = 3,
    tolerance: float = 0.02,
    budget: int | str | None = None,
    workers: list[int] | None = None,
    max_depth: int = 32,
    candidates: int = 4,
    progress: Callable[[int, int, str], None] | None = None,
    seed: int = 0,
) -> TuneResult:
    """Find the setting with the least peak in-flight memory that keeps throughput.

    ``factory(**settings)`` builds a fresh job (see :class:`Job`) for the knob
    values it is given and uses its own defaults when given none: Keras
    ``workers``/``max_queue_size``, torch ``num_workers``/``prefetch_factor``,
    tf.data ``buffer``, Ray Data ``concurrency`` (queuetune sets the object-store
    budget and ``prefetch_batches`` itself); a plain iterable is prefetched by
    queuetune itself.

    >>> def factory():
    ...     return (x for x in range(40)), (lambda batch: None)
    >>> result = tune(factory, steps=20, warmup=2, rounds=1, candidates=2)  # doctest: +SKIP
    >>> result.kwargs()  # doctest: +SKIP
    {'buffer': 1}
    """
    steps = positive_int(steps, "steps")
    rounds = positive_int(rounds, "rounds")
    max_depth = positive_int(max_depth, "max depth")
    candidates = positive_int(candidates, "candidates")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or not 0 <= warmup < steps:
        raise ValueError(f"warmup must be an integer from 0 to steps - 1, got {warmup!r}")
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
    limit = None if budget is None else parse_bytes(budget)

    probe_job = as_job(factory())
    framework = detect_framework(probe_job.loader)
    knobs = BY_FRAMEWORK[framework]
    if framework == "ray":
        from .frameworks.ray import cluster_knobs

        knobs = cluster_knobs()
    default = default_settings(factory, probe_job, framework)
    if isinstance(probe_job.loader, types.GeneratorType):
        probe_job.loader.close()
    default_workers = knobs.workers(default) if knobs.workers_knob else None
    worker_counts: list[int | None] = list(workers) if workers else [default_workers]

    total = 2 + candidates * rounds
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, label)

    # The first run in a process pays for imports, compilation and cold caches.
    run_trial(factory, default, framework, steps, warmup)
    tick("warm-up")
    base_trace, base_report, _ = run_trial(factory, default, framework, steps, warmup)
    tick("baseline")
    if isinstance(knobs, RayKnobs) and base_trace.produced:
        # A depth counts blocks: the budget that holds one depends on their size.
        block = statistics.median(p.nbytes for p in base_trace.produced)
        knobs = dataclasses.replace(knobs, block_bytes=int(block))
    # Ray's blocks are cut into batches: the model counts blocks, the warm-up too.
    blocks = consumed_by_block(base_trace)
    block_warmup = warmup * len(blocks.consumed) // max(1, len(base_trace.consumed))
    predictions = _predict(after_warmup(blocks, block_warmup), knobs, worker_counts, max_depth, seed)
    chosen_settings = _candidates(predictions, knobs, default, tolerance, limit, candidates)
    total = 2 + len(chosen_settings) * rounds

    trials: list[Trial] = []
    for round_ in range(rounds):
        # Each round starts one setting later, so no setting always runs first
        # while the machine warms up.
        shift = round_ % len(chosen_settings)
        for settings in chosen_settings[shift:] + chosen_settings[:shift]:
            _, report, rate = run_trial(factory, settings, framework, steps, warmup)
            trials.append(_trial(settings, knobs, framework, round_, report, rate))
            tick(", ".join(f"{k}={v}" for k, v in settings.items()))

    summary = _summarise(trials, knobs, default, predictions)
    margin = trial_noise(trials) * math.sqrt(2 / rounds)
    chosen = decide(summary, tolerance, limit, margin)
    result = TuneResult(
        framework=framework,
        default_settings=default,
        candidates=summary,
        chosen=chosen,
        predictions=predictions,
        baseline=base_report.to_dict(series=False),
        tolerance=tolerance,
        budget=limit,
        explanation=[],
        trials=trials,
        versions=dict(base_trace.meta.versions or {}),
        margin=margin,
    )
    result.explanation = explain(result, knobs, base_report)
    return result


def _predict(
    trace: Trace, knobs: Knobs, worker_counts: list[int | None], max_depth: int, seed: int
) -> list[dict[str, Any]]:
    from .queue_model import PipelineModel, predict_curve

    try:
        model = PipelineModel.from_trace(trace)
    except ValueError:
        return []
    rows = []
    for count in worker_counts:
        depths = reachable_depths(knobs, count, max_depth)
        if not depths:
            continue
        curve = predict_curve(model, depths=depths, workers=[count or 1], seed=seed)
        for p in curve:
            row = p.to_dict()
            row["workers"] = count or 1
            row["settings"] = knobs.settings_for(p.depth, count)
            # what the probe reports as in flight: built and not yet released
            row["peak_built_bytes"] = p.peak_built_batches * model.batch_bytes
            rows.append(row)
    return rows


def _candidates(
    predictions: list[dict[str, Any]],
    knobs: Knobs,
    default: dict[str, Any],
    tolerance: float,
    budget: int | None,
    count: int,
) -> list[dict[str, Any]]:
    """The default, the shallowest predicted to keep throughput, and its neighbours."""
    picked: list[dict[str, Any]] = [dict(default)]
    fits = [p for p in predictions if budget is None or p["peak_built_bytes"] <= budget]
    if fits:
        best = max(p["throughput"] for p in fits)
        keeping = sorted(
            (p for p in fits if p["throughput"] >= (1 - tolerance) * best),
            key=lambda p: (p["peak_built_bytes"], -p["throughput"]),
        )
        ordered = sorted(fits, key=lambda p: (p["workers"], p["depth"]))
        if keeping:
            first = keeping[0]
            position = ordered.index(first)
            neighbours = [first, *ordered[max(0, position - 1) : position], *ordered[position + 1 : position + 3]]
            for p in neighbours:
                settings = {**default, **p["settings"]}
                if settings not in picked:
                    picked.append(settings)
                if len(picked) >= count:
                    break
    return picked[:count]


def _trial(settings: dict[str, Any], knobs: Knobs, framework: str, round_: int, report: Report, rate: float) -> Trial:
    depth = knobs.depth(settings)
    peak_batches, peak_bytes, estimated = report.peak_in_flight_batches, report.peak_in_flight_bytes, False
    if framework == "tfdata":
        # tf.data builds batches inside TensorFlow, out of the probe's sight: its
        # buffer is assumed full, plus the batch the step holds.
        size = int(report.batch_bytes.median or 0)
        peak_batches, peak_bytes, estimated = depth + 1, (depth + 1) * size, True
    return Trial(
        settings=dict(settings),
        depth=depth,
        round=round_,
        batches=report.consumed_batches or 0,
        throughput=rate,
        peak_in_flight_batches=peak_batches,
        peak_in_flight_bytes=peak_bytes,
        input_bound_fraction=report.input_bound_fraction,
        peak_rss_bytes=report.peak_rss_bytes,
        bytes_estimated=estimated,
    )


def _setting_key(settings: dict[str, Any]) -> str:
    """One setting's trials group under this key (settings are dicts, not hashable)."""
    return json.dumps(settings, sort_keys=True)


def _summarise(
    trials: list[Trial], knobs: Knobs, default: dict[str, Any], predictions: list[dict[str, Any]]
) -> list[Candidate]:
    groups: dict[str, list[Trial]] = {}
    for t in trials:
        groups.setdefault(_setting_key(t.settings), []).append(t)
    # Trials of one round ran back to back: comparing within a round cancels
    # what the machine did between rounds.
    round_best: dict[int, float] = {}
    for t in trials:
        round_best[t.round] = max(round_best.get(t.round, 0.0), t.throughput)
    best_predicted = max((p["throughput"] for p in predictions), default=0.0)
    summary = []
    for group in groups.values():
        settings = group[0].settings
        predicted = next((p for p in predictions if {**default, **p["settings"]} == settings), None)
        fractions = [t.input_bound_fraction for t in group if t.input_bound_fraction is not None]
        rss = [t.peak_rss_bytes for t in group if t.peak_rss_bytes is not None]
        summary.append(
            Candidate(
                settings=settings,
                depth=group[0].depth,
                throughput=statistics.median(t.throughput for t in group),
                peak_in_flight_batches=max(t.peak_in_flight_batches for t in group),
                peak_in_flight_bytes=max(t.peak_in_flight_bytes for t in group),
                peak_rss_bytes=max(rss) if rss else None,
                input_bound_fraction=statistics.median(fractions) if fractions else None,
                trials=len(group),
                predicted_throughput=predicted["throughput"] if predicted else None,
                predicted_peak_in_flight_batches=predicted["peak_built_batches"] if predicted else None,
                is_default=settings == default,
                relative=statistics.median(
                    t.throughput / round_best[t.round] if round_best[t.round] else 0.0 for t in group
                ),
                predicted_share=predicted["throughput"] / best_predicted if predicted and best_predicted else None,
            )
        )
    return sorted(summary, key=lambda c: c.depth)


def trial_noise(trials: list[Trial]) -> float:
    """How much one trial's throughput varies, as a fraction: the standard
    deviation of log throughput left over once each setting's and each round's
    own level are taken out (a two-way fit over the rounds in which every
    setting ran). 0 with fewer than two settings or two such rounds.

    >>> from queuetune.tune import Trial
    >>> def t(q, r, rate): return Trial({"q": q}, q, r, 50, rate, q, q, None, None)
    >>> round(trial_noise([t(1, 0, 100.0), t(2, 0, 110.0), t(1, 1, 200.0), t(2, 1, 230.0)]), 3)
    0.022
    """
    table: dict[str, dict[int, float]] = {}
    for t in trials:
        if t.throughput > 0:
            table.setdefault(_setting_key(t.settings), {})[t.round] = math.log(t.throughput)
    rows = list(table.values())
    complete = sorted(set.intersection(*(set(row) for row in rows))) if rows else []
    if len(rows) < 2 or len(complete) < 2:
        return 0.0
    y = [[row[r] for r in complete] for row in rows]
    row_mean = [statistics.fmean(values) for values in y]
    col_mean = [statistics.fmean(column) for column in zip(*y)]
    grand = statistics.fmean(row_mean)
    squares = sum(
        (v - row_mean[i] - col_mean[j] + grand) ** 2 for i, values in enumerate(y) for j, v in enumerate(values)
    )
    return math.sqrt(squares / ((len(rows) - 1) * (len(complete) - 1)))


def decide(candidates: list[Candidate], tolerance: float, budget: int | None, margin: float = 0.0) -> Candidate | None:
    """The least peak in-flight memory among candidates that keep throughput (and
    fit ``budget``); ties go to the shallower queue.

    A candidate keeps throughput when its measured share of the best (compared
    round by round where the trials were paired, see :meth:`Candidate.share`)
    is at least ``1 - tolerance``; or, when the model predicted it to keep
    throughput, when its share is short of that by no more than ``margin``,
    the trials' noise on a difference between two settings (a fraction on
    a log scale, see :func:`trial_noise`): the trials cannot tell it apart from keeping.

    >>> a = Candidate({"q": 10}, 11, 100.0, 11, 1100, None, None, 3)
    >>> b = Candidate({"q": 2}, 3, 99.0, 3, 300, None, None, 3)
    >>> decide([a, b], 0.02, None).settings
    {'q': 2}
    >>> c = Candidate({"q": 1}, 2, 95.0, 2, 200, None, None, 3, predicted_share=1.0)
    >>> decide([a, b, c], 0.02, None, margin=0.05).settings
    {'q': 1}
    """
    if not candidates:
        return None
    floor = 1 - tolerance

    def keeps(c: Candidate) -> bool:
        share = c.share(candidates)
        if share >= floor:
            return True
        predicted = c.predicted_share is not None and c.predicted_share >= floor
        return predicted and share >= floor * math.exp(-margin)

    keeping = [c for c in candidates if keeps(c) and (budget is None or c.peak_in_flight_bytes <= budget)]
    if not keeping:
        return None
    return min(keeping, key=lambda c: (c.peak_in_flight_bytes, c.depth, -c.throughput))


def explain(result: TuneResult, knobs: Knobs, baseline: Report) -> list[str]:
    """The decision in words and numbers."""
    lines = []
    fraction = baseline.input_bound_fraction
    if fraction is not None:
        side = "loading" if fraction >= 0.05 else "the model"
        lines.append(
            f"Bottleneck: {side} (the consumer waited for input {fraction:.0%} of the default run: {baseline.verdict})."
        )
    candidates = result.candidates
    for c in candidates:
        predicted = f"; predicted {c.predicted_share:.1%}" if c.predicted_share is not None else ""
        lines.append(
            f"{c.label(knobs)}{' (default)' if c.is_default else ''}: {c.throughput:.1f} batches/s "
            f"({c.share(candidates):.1%} of the best, round by round{predicted}), peak "
            f"{c.peak_in_flight_batches} batches / {format_bytes(c.peak_in_flight_bytes)} in flight "
            f"over {c.trials} trial(s)"
        )
    if result.margin:
        lines.append(
            f"Trial noise: {result.margin:.1%} on the difference between two settings. A setting the model "
            f"predicts to keep throughput counts as keeping it unless it measured more than that below "
            f"{1 - result.tolerance:.0%} of the best."
        )
        if result.margin > result.tolerance:
            lines.append(
                "The trials could not tell settings apart within the tolerance: the decision leans on "
                "the model's prediction (more rounds or steps would measure it more finely)."
            )
    chosen, default = result.chosen, result.default
    if chosen is None:
        limit = f" under the budget of {format_bytes(result.budget)}" if result.budget else ""
        lines.append(f"No setting kept {1 - result.tolerance:.0%} of the best throughput{limit}.")
        under = [c for c in result.candidates if result.budget and c.peak_in_flight_bytes <= result.budget]
        if under:
            fastest = max(under, key=lambda c: c.share(candidates))
            lines.append(
                f"Under the budget the fastest was {fastest.label(knobs)}, at "
                f"{fastest.share(candidates):.1%} of the best throughput."
            )
        return lines
    lines.append(f"Chosen: {chosen.label(knobs)}.")
    deepest = max((p["depth"] for p in result.predictions), default=None)
    if deepest is not None and chosen.depth >= deepest and not chosen.is_default:
        lines.append(
            f"The chosen depth is the deepest tried ({deepest}): throughput may still rise "
            "deeper (try a larger max_depth, or a budget)."
        )
    if default is not None and default is not chosen and default.peak_in_flight_bytes and default.throughput:
        saved = default.peak_in_flight_bytes - chosen.peak_in_flight_bytes
        ratio = chosen.throughput / default.throughput
        if saved >= 0:
            lines.append(
                f"Against the default ({default.label(knobs)}): {ratio:.1%} of its throughput with "
                f"{format_bytes(saved)} less in flight at peak "
                f"({chosen.peak_in_flight_bytes / default.peak_in_flight_bytes:.0%} of its peak)."
            )
        else:
            lines.append(
                f"The default ({default.label(knobs)}) is slower: the chosen setting reaches {ratio:.1%} "
                f"of its throughput for {format_bytes(-saved)} more in flight at peak."
            )
    elif default is chosen:
        lines.append("The default is already the smallest setting that keeps throughput.")
    return lines


def load_factory(spec: str) -> Factory:
    """The function named by ``FILE.py:FACTORY``, imported from that file.

    >>> load_factory("missing.py:make")
    Traceback (most recent call last):
    ...
    ValueError: no such file: 'missing.py'
    """
    import importlib.util

    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"expected FILE.py:FACTORY, got {spec!r}")
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no such file: {path!r}")
    module_spec = importlib.util.spec_from_file_location(f"queuetune_factory_{file.stem}", file)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f"cannot import {path!r} as Python")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    factory = getattr(module, name, None)
    if factory is None:
        raise ValueError(f"{path!r} has no {name!r}")
    if not callable(factory):
        raise TypeError(f"{name!r} in {path!r} is not a function")
    return factory
