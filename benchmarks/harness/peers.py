"""The loaders prefetcher.py compares on a synthetic workload, each run once: the
Prefetcher and its extra rows, Keras, torch, tf.data, torchdata.nodes and SPDL."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import Any

import numpy as np

import queuetune
from harness.consume import consume, counted_result, counting, load_counted, make_step, measured, result
from harness.loaders import stop_nodes
from harness.synthetic import (
    COLS,
    DEEP,
    DEEP_BUDGET_BATCHES,
    LEAN,
    LENGTH,
    NODES,
    NODES_PROCESS,
    SPDL,
    SPDL_PROCESS,
    UNORDERED,
    Batches,
    Workload,
    lean_budget_batches,
)

os.environ.setdefault("KERAS_BACKEND", "torch")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_prefetcher(
    w: Workload, ordered: bool = True, max_bytes: int | None = None, name: str = "prefetcher"
) -> dict[str, Any]:
    p = queuetune.Prefetcher(
        Batches(w), max_bytes=max_bytes or w.max_bytes, workers=w.workers, mode=w.mode, ordered=ordered
    )
    return result(name, *measured(p, w), w)


def run_keras(w: Workload) -> dict[str, Any]:
    import keras

    inner = Batches(w)

    class Data(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__(workers=w.workers, use_multiprocessing=False, max_queue_size=10)

        def __len__(self) -> int:
            return LENGTH

        def __getitem__(self, index: int) -> Any:
            return inner[index]

    step = make_step(w)

    class Sleeper(keras.Model):
        def train_step(self, data: Any) -> dict[str, Any]:
            step(data)
            return {}

    inputs = keras.Input((COLS,))
    model = Sleeper(inputs, keras.layers.Dense(1)(inputs))
    model.compile("sgd", "mse")
    watched = queuetune.watch(Data())

    def fit(probe: Any) -> None:
        callbacks = [probe.keras_callback(print_report=False)]
        model.fit(watched, epochs=1, steps_per_epoch=w.steps, shuffle=False, verbose=0, callbacks=callbacks)

    return result("keras", *probed(watched, fit), w)


def run_torch(w: Workload) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    loader = DataLoader(Batches(w), batch_size=None, num_workers=w.workers, prefetch_factor=2)
    watched = queuetune.watch(loader)
    return result("torch", *probed(watched, lambda _: consume(watched, w)), w)


def probed(watched: Any, read: Callable[[Any], None]) -> tuple[Any, Any]:
    """The trace and report of ``watched`` once ``read`` (given its probe) has read it and the probe has settled."""
    probe = queuetune.probe_of(watched)
    try:
        read(probe)
        probe.settle(quiet=0.05, timeout=2.0)
        return probe.trace(), probe.report()
    finally:
        probe.close()


def run_tf(w: Workload) -> dict[str, Any]:
    """tf.data as its guide builds an input pipeline: map(AUTOTUNE) -> prefetch(AUTOTUNE),
    counted in the load function like the other loaders queuetune does not build."""
    import tensorflow as tf

    counted = counting(w)

    def load(i: Any) -> tuple[np.ndarray, np.ndarray]:
        return load_counted(int(i))

    ds = (
        tf.data.Dataset.range(LENGTH)
        .map(
            lambda i: tuple(tf.numpy_function(load, [i], [tf.float32, tf.int64])),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .prefetch(tf.data.AUTOTUNE)
    )
    arrived = consume(ds, w, counted)
    return counted_result("tf.data", w, arrived, counted)


def run_nodes(w: Workload, method: str = "thread", name: str = NODES) -> dict[str, Any]:
    """torchdata.nodes as its docs build a loader: ParallelMapper(in_order) -> Prefetcher(2) -> Loader."""
    from torchdata.nodes import IterableWrapper, Loader, ParallelMapper
    from torchdata.nodes import Prefetcher as NodesPrefetcher

    counted = counting(w)
    mapper = ParallelMapper(
        IterableWrapper(range(LENGTH)),
        map_fn=load_counted,
        num_workers=w.workers,
        in_order=True,
        method=method,  # type: ignore[arg-type]
        multiprocessing_context="fork" if method == "process" else None,
    )
    prefetcher = NodesPrefetcher(mapper, prefetch_factor=2)
    try:
        arrived = consume(Loader(prefetcher), w, counted)
    finally:
        stop_nodes(prefetcher, mapper)
    return counted_result(name, w, arrived, counted)


def run_spdl(w: Workload, process: bool = False, name: str = SPDL) -> dict[str, Any]:
    """SPDL's pipeline: pipe(load, concurrency=workers, output_order="input") -> add_sink(3)."""
    import concurrent.futures as cf
    import multiprocessing

    from spdl.pipeline import PipelineBuilder

    counted = counting(w)
    executor = cf.ProcessPoolExecutor(w.workers, mp_context=multiprocessing.get_context("fork")) if process else None
    pipeline = (
        PipelineBuilder()
        .add_source(range(LENGTH))
        .pipe(load_counted, concurrency=w.workers, executor=executor, output_order="input")
        .add_sink(3)
        .build(num_threads=w.workers)
    )
    try:
        with pipeline.auto_stop():
            arrived = consume(pipeline.get_iterator(timeout=60), w, counted)
    finally:
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
    return counted_result(name, w, arrived, counted)


RUNNERS = {
    "prefetcher": run_prefetcher,
    "keras": run_keras,
    "torch": run_torch,
    "tf.data": run_tf,
    NODES: run_nodes,
    SPDL: run_spdl,
    NODES_PROCESS: lambda w: run_nodes(w, "process", NODES_PROCESS),
    SPDL_PROCESS: lambda w: run_spdl(w, True, SPDL_PROCESS),
    UNORDERED: lambda w: run_prefetcher(w, ordered=False, name=UNORDERED),
    DEEP: lambda w: run_prefetcher(w, max_bytes=DEEP_BUDGET_BATCHES * w.batch_bytes, name=DEEP),
    LEAN: lambda w: run_prefetcher(w, max_bytes=lean_budget_batches(w.workers) * w.batch_bytes, name=LEAN),
}


def versions() -> dict[str, str]:
    from importlib.metadata import version

    import keras
    import tensorflow as tf
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "keras": keras.__version__,
        "tensorflow": tf.__version__,
        "torchdata": version("torchdata"),
        "spdl": version("spdl"),
        "numpy": np.__version__,
        "queuetune": queuetune.__version__,
    }
