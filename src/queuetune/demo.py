"""The article's experiment on the installed Keras 3: how many batches does the
loader build for ``predict(steps=10)``, and how many reach the model?"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .analysis.counts import Counts
from .analysis.in_flight import InFlight
from .analysis.report import Report, section_of
from .analysis.timing import Timings
from .analysis.waits import Waits
from .api import probe_of, watch
from .estimate.experiment import ARTICLE, DemoResult, RunResult, advice
from .estimate.memory import footprint


@dataclass(frozen=True)
class DemoRun:
    """One loader configuration of the experiment."""

    loader: str
    workers: int
    max_queue_size: int | None

    @property
    def label(self) -> str:
        if self.loader == "generator":
            return "plain generator"
        return f"PyDataset workers={self.workers}, max_queue_size={self.max_queue_size}"


#: The least time a step of the demo's ``predict`` takes (see :func:`run_demo`).
STEP_SECONDS = 0.005
#: The model's inputs and classes.
INPUTS, CLASSES = 60, 10

DEFAULT_RUNS = (
    DemoRun("pydataset", 4, 10),
    DemoRun("pydataset", 4, 2),
    DemoRun("generator", 0, None),
)


def run_demo(
    steps: int = 10,
    batch_size: int = 128,
    runs: tuple[DemoRun, ...] = DEFAULT_RUNS,
    progress: Callable[[str], None] | None = None,
    step_seconds: float = STEP_SECONDS,
) -> DemoResult:
    """Run the experiment (its ``to_dict()`` is the ``queuetune demo --json`` schema).

    Each step of ``predict`` takes at least ``step_seconds``, as the article's
    model's did: the one-layer model alone takes a tenth of a millisecond, less
    than Keras's workers take to hand a batch over, so which side ran ahead
    when ``predict`` stopped, and with it how many batches were built (12 to 21
    at ``max_queue_size=10``), would be chance.

    >>> result = run_demo(steps=2, runs=(DemoRun("generator", 0, None),))  # doctest: +SKIP
    >>> result.runs[0].consumed_batches  # doctest: +SKIP
    2
    """
    os.environ.setdefault("KERAS_BACKEND", "torch")
    from .frameworks import require

    require("keras", "keras")
    import keras

    model = _model(keras)
    results = []
    batch_nbytes = 0
    for run in runs:
        if progress:
            progress(run.label)
        predicted, report = _predict(keras, model, _loader(keras, run, batch_size), steps, step_seconds)
        batch_nbytes = int(section_of(Timings, report).batch_bytes.median or 0)
        results.append(_run_result(run, batch_size, predicted, report, keras.backend.backend()))
    return DemoResult(
        keras=keras.__version__,
        backend=keras.backend.backend(),
        model=f"Dense({INPUTS}->{CLASSES}) softmax",
        step_ms=1000 * step_seconds,
        steps=steps,
        batch_size=batch_size,
        batch_bytes=batch_nbytes,
        runs=results,
        article=ARTICLE,
        advice=advice(results),
    )


def _model(keras: Any) -> Any:
    """The one-layer model of the article, compiled."""
    inp = keras.Input((INPUTS,))
    model = keras.Model(inp, keras.layers.Dense(CLASSES, activation="softmax")(inp))
    model.compile("adam", "categorical_crossentropy")
    return model


def _batch(rng: np.random.Generator, batch_size: int) -> tuple[Any, Any]:
    """Random inputs and one-hot labels."""
    x = rng.standard_normal((batch_size, INPUTS)).astype("float32")
    y = np.eye(CLASSES, dtype="float32")[rng.integers(0, CLASSES, batch_size)]
    return x, y


def _generator(batch_size: int) -> Iterator[tuple[Any, Any]]:
    rng = np.random.default_rng(0)
    while True:
        yield _batch(rng, batch_size)


def _loader(keras: Any, run: DemoRun, batch_size: int) -> Any:
    """The run's loader, watched: a plain generator, or a PyDataset of no end with its workers and queue."""
    if run.loader == "generator":
        return watch(_generator(batch_size), name=run.label)

    class RandomBatches(keras.utils.PyDataset):  # type: ignore[misc]  # keras ships no types: its base is Any
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.rng = np.random.default_rng(0)

        @property
        def num_batches(self) -> None:
            return None

        def __getitem__(self, index: int) -> tuple[Any, Any]:
            return _batch(self.rng, batch_size)

    return watch(RandomBatches(workers=run.workers, max_queue_size=run.max_queue_size), name=run.label)


def _step_time(keras: Any, seconds: float) -> Any:
    """A callback that makes each step of ``predict`` take at least ``seconds``."""

    class StepTime(keras.callbacks.Callback):  # type: ignore[misc]  # keras ships no types: its base is Any
        def on_predict_batch_end(self, batch: int, logs: Any = None) -> None:
            time.sleep(seconds)

    return StepTime()


def _predict(keras: Any, model: Any, loader: Any, steps: int, step_seconds: float) -> tuple[int, Report]:
    """``predict`` over ``steps`` of the watched ``loader``: the samples predicted, and the loader's report."""
    probe = probe_of(loader)
    try:
        # The step's time goes before the probe's callback, which must come last.
        callbacks = [_step_time(keras, step_seconds), probe.keras_callback(print_report=False)]
        predictions = model.predict(loader, steps=steps, verbose=0, callbacks=callbacks)
        probe.settle()
        report = probe.report()
    finally:
        probe.close()
    return len(predictions), report


def _run_result(run: DemoRun, batch_size: int, predicted: int, report: Report, backend: str) -> RunResult:
    counts, flight, waits = section_of(Counts, report), section_of(InFlight, report), section_of(Waits, report)
    batch = int(section_of(Timings, report).batch_bytes.median or 1)
    if run.loader == "generator":
        estimate = footprint(batch, "generator", backend=backend)
    else:
        estimate = footprint(batch, "keras", workers=run.workers, max_queue_size=run.max_queue_size)
    return RunResult(
        loader=run.loader,
        label=run.label,
        workers=run.workers,
        max_queue_size=run.max_queue_size,
        batch_size=batch_size,
        predicted_samples=predicted,
        consumed_batches=counts.consumed_batches,
        consumed_samples=(counts.consumed_batches or 0) * batch_size,
        produced_batches=counts.produced_batches,
        produced_samples=counts.produced_batches * batch_size,
        read_ahead_batches=counts.read_ahead_batches,
        peak_in_flight_batches=flight.peak_in_flight_batches,
        peak_in_flight_bytes=flight.peak_in_flight_bytes,
        estimated_footprint_bytes=estimate.total_bytes,
        estimated_depth=estimate.depth,
        estimated_batches=estimate.total_batches,
        input_wait_seconds=waits.input_wait_seconds,
        wall_seconds=waits.wall_seconds,
        first_batch_seconds=None if waits.start is None else waits.start.first_batch_seconds,
        built_before_asked=None if waits.start is None else waits.start.built_before_asked,
        steady_wait_seconds=waits.steady_wait_seconds,
        steady_seconds=waits.steady_seconds,
        input_bound_fraction=waits.input_bound_fraction,
        verdict=waits.verdict,
    )
