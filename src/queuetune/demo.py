"""The article's experiment on the installed Keras 3: how many batches does the
loader build for ``predict(steps=10)``, and how many reach the model?"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .analysis.report import Report
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
    import numpy as np

    inputs, classes = 60, 10
    inp = keras.Input((inputs,))
    model = keras.Model(inp, keras.layers.Dense(classes, activation="softmax")(inp))
    model.compile("adam", "categorical_crossentropy")

    def make_batch(rng: np.random.Generator) -> tuple[Any, Any]:
        x = rng.standard_normal((batch_size, inputs)).astype("float32")
        y = np.eye(classes, dtype="float32")[rng.integers(0, classes, batch_size)]
        return x, y

    class RandomBatches(keras.utils.PyDataset):  # type: ignore[misc]  # keras ships no types: its base is Any
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.rng = np.random.default_rng(0)

        @property
        def num_batches(self) -> None:
            return None

        def __getitem__(self, index: int) -> tuple[Any, Any]:
            return make_batch(self.rng)

    class StepTime(keras.callbacks.Callback):  # type: ignore[misc]  # keras ships no types: its base is Any
        def __init__(self, seconds: float) -> None:
            super().__init__()
            self.seconds = seconds

        def on_predict_batch_end(self, batch: int, logs: Any = None) -> None:
            time.sleep(self.seconds)

    def generator() -> Any:
        rng = np.random.default_rng(0)
        while True:
            yield make_batch(rng)

    results = []
    batch_nbytes = 0
    for run in runs:
        if progress:
            progress(run.label)
        if run.loader == "generator":
            loader = watch(generator(), name=run.label)
        else:
            loader = watch(
                RandomBatches(workers=run.workers, max_queue_size=run.max_queue_size),
                name=run.label,
            )
        probe = probe_of(loader)
        try:
            # The step's time goes before the probe's callback, which must come last.
            callbacks = [StepTime(step_seconds), probe.keras_callback(print_report=False)]
            predictions = model.predict(loader, steps=steps, verbose=0, callbacks=callbacks)
            probe.settle()
            report = probe.report()
        finally:
            probe.close()
        batch_nbytes = int(report.batch_bytes.median or 0)
        results.append(_run_result(run, batch_size, len(predictions), report, keras.backend.backend()))
    return DemoResult(
        keras=keras.__version__,
        backend=keras.backend.backend(),
        model=f"Dense({inputs}->{classes}) softmax",
        step_ms=1000 * step_seconds,
        steps=steps,
        batch_size=batch_size,
        batch_bytes=batch_nbytes,
        runs=results,
        article=ARTICLE,
        advice=advice(results),
    )


def _run_result(run: DemoRun, batch_size: int, predicted: int, report: Report, backend: str) -> RunResult:
    batch = int(report.batch_bytes.median or 1)
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
        consumed_batches=report.consumed_batches,
        consumed_samples=(report.consumed_batches or 0) * batch_size,
        produced_batches=report.produced_batches,
        produced_samples=report.produced_batches * batch_size,
        read_ahead_batches=report.read_ahead_batches,
        peak_in_flight_batches=report.peak_in_flight_batches,
        peak_in_flight_bytes=report.peak_in_flight_bytes,
        estimated_footprint_bytes=estimate.total_bytes,
        estimated_depth=estimate.depth,
        estimated_batches=estimate.total_batches,
        input_wait_seconds=report.input_wait_seconds,
        wall_seconds=report.wall_seconds,
        first_batch_seconds=None if report.start is None else report.start.first_batch_seconds,
        built_before_asked=None if report.start is None else report.start.built_before_asked,
        steady_wait_seconds=report.steady_wait_seconds,
        steady_seconds=report.steady_seconds,
        input_bound_fraction=report.input_bound_fraction,
        verdict=report.verdict,
    )
