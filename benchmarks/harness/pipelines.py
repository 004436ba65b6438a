"""advice.py's six pipelines, each a training run in a process of its own: its loader with
the settings given, its model, its steps; measured, its row printed as JSON."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.memory import SAMPLE_EVERY_TRAINING, Sampler, reap, tree_memory
from harness.models import heavier_cnn, sgd_trainer, small_cnn
from harness.samples import LATENCY, SIDE, STRING_BYTES, STRINGS, Cheap, Decoded, FileReads, Strings, jpeg_paths


@dataclass(frozen=True)
class Pipeline:
    """One pipeline: its framework, its original settings, its batch size, its
    steps at ``--scale 1`` and what it does, in a few words."""

    name: str
    framework: str
    settings: dict[str, Any]
    batch: int
    steps: int
    what: str


PIPELINES = {
    p.name: p
    for p in (
        Pipeline(
            "io-bound",
            "torch",
            {"num_workers": 2, "prefetch_factor": 2},
            16,
            600,
            f"file read + {LATENCY * 1e3:.0f} ms sleep a sample (a network disk's latency), light step",
        ),
        Pipeline(
            "decode",
            "torch",
            {"num_workers": 1, "prefetch_factor": 2},
            16,
            200,
            f"JPEG 500x375 decoded (Pillow), resized to {SIDE}x{SIDE}; small CNN on the consumer's core",
        ),
        Pipeline(
            "model-bound",
            "torch",
            {"num_workers": 2, "prefetch_factor": 8},
            32,
            120,
            "cheap samples (seeded torch.rand 3x96x96, 3.4 MiB a batch), heavier CNN",
        ),
        Pipeline(
            "copy-on-read",
            "torch",
            {"num_workers": 4, "prefetch_factor": 2},
            256,
            400,
            f"{STRINGS:,} Python strings in a list read shuffled by forked workers, MLP step",
        ),
        Pipeline(
            "keras",
            "keras",
            {"workers": 4, "max_queue_size": 10, "use_multiprocessing": False},
            32,
            120,
            "Keras PyDataset (threads) of random 32x96x96x3 float32 batches, model.fit of a small CNN",
        ),
        Pipeline(
            "tfdata",
            "tfdata",
            {"num_parallel_calls": 2, "buffer": 8},
            16,
            200,
            f"tf.data read_file, decode_jpeg, resize, random crop {SIDE}x{SIDE}, flip, brightness, batch, prefetch; "
            "small CNN in torch",
        ),
    )
}


def torch_pipeline(pipeline: Pipeline, settings: dict[str, Any], steps: int, folder: Path) -> tuple[Any, Any]:
    """The pipeline's DataLoader with ``settings``, and the step it feeds."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, RandomSampler

    length = steps * pipeline.batch
    if pipeline.name == "io-bound":
        data: Any = FileReads(jpeg_paths(folder), length)
        linear = nn.Linear(4096, 10)
        train = sgd_trainer(linear)

        def step(x: Any, y: Any) -> None:
            train(x[:, :4096].float() / 255.0, y)

    elif pipeline.name == "decode":
        data, step = Decoded(jpeg_paths(folder), length), sgd_trainer(small_cnn())
    elif pipeline.name == "model-bound":
        data, step = Cheap(length), sgd_trainer(heavier_cnn())
    else:
        data = Strings()
        mlp = sgd_trainer(
            nn.Sequential(
                nn.Linear(STRING_BYTES, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
            )
        )

        def step(x: Any, y: Any) -> None:
            mlp(x.float() / 255.0, y)

    workers = int(settings.get("num_workers") or 0)
    loader = DataLoader(
        data,
        batch_size=pipeline.batch,
        # Shuffled, and ``steps`` batches long where the dataset is longer (copy-on-read's).
        sampler=RandomSampler(data, num_samples=length, generator=torch.Generator().manual_seed(0)),
        num_workers=workers,
        prefetch_factor=settings.get("prefetch_factor") if workers else None,
        multiprocessing_context="fork" if workers else None,
    )
    return loader, step


#: What a pipeline calls after each step (the child's clock and its last memory reading).
Stepped = Callable[[], None]


def run_torch(pipeline: Pipeline, settings: dict[str, Any], steps: int, folder: Path, stepped: Stepped) -> None:
    """The pipeline's one epoch of ``steps`` batches, ``stepped()`` after each step."""
    loader, step = torch_pipeline(pipeline, settings, steps, folder)
    for x, y in loader:
        step(x, y)
        stepped()


def run_keras(pipeline: Pipeline, settings: dict[str, Any], steps: int, folder: Path, stepped: Stepped) -> None:
    """``model.fit`` of one epoch of ``steps`` batches, ``stepped()`` after each step."""
    import keras
    import numpy as np

    batch = pipeline.batch

    class RandomBatches(keras.utils.PyDataset):
        def __len__(self) -> int:
            return steps

        def __getitem__(self, index: int) -> tuple[Any, Any]:
            rng = np.random.default_rng(index)
            return rng.random((batch, 96, 96, 3), dtype=np.float32), rng.integers(0, 10, batch)

    class Stepped(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            stepped()

    keras.utils.set_random_seed(0)
    inputs = keras.Input((96, 96, 3))
    x = keras.layers.Conv2D(32, 3, strides=2, activation="relu")(inputs)
    x = keras.layers.Conv2D(64, 3, strides=2, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))
    model.compile("sgd", "sparse_categorical_crossentropy")
    model.fit(RandomBatches(**settings), epochs=1, verbose=0, callbacks=[Stepped()])


def run_tfdata(pipeline: Pipeline, settings: dict[str, Any], steps: int, folder: Path, stepped: Stepped) -> None:
    """The tf.data pipeline's ``steps`` batches, each a step of the small CNN in torch, ``stepped()`` after each."""
    import tensorflow as tf
    import torch

    def load(path: Any) -> Any:
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        # Augmented at random, as training does: the 64 files repeated are not the same samples
        # again (a crop alone repeats: 289 places for some 20 reads of each file).
        image = tf.image.resize(image, (SIDE + 16, SIDE + 16))
        image = tf.image.random_flip_left_right(tf.image.random_crop(image, (SIDE, SIDE, 3)))
        return tf.image.random_brightness(image, 16.0) / 255.0

    paths = [str(p) for p in jpeg_paths(folder)]
    dataset = (
        tf.data.Dataset.from_tensor_slices(paths)
        .repeat()
        .map(load, num_parallel_calls=settings["num_parallel_calls"])
        .batch(pipeline.batch)
        .prefetch(settings["buffer"])
        .take(steps)
    )
    step = sgd_trainer(small_cnn())
    labels = torch.arange(pipeline.batch) % 10
    for x in dataset:
        step(torch.from_numpy(x.numpy()).permute(0, 3, 1, 2).contiguous(), labels)
        stepped()


RUNS = {"torch": run_torch, "keras": run_keras, "tfdata": run_tfdata}


def warmup_of(steps: int) -> int:
    """Steps left out of a run's throughput: a tenth, at least 5."""
    return max(5, steps // 10)


def child(name: str, settings: dict[str, Any], steps: int, folder: Path, measure: bool) -> int:
    """Run pipeline ``name`` with ``settings``; with ``measure``, print its row (JSON) last."""
    import torch

    # torch warns of more worker processes than cores; io-bound's mostly sleep.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    pipeline = PIPELINES[name]
    run = RUNS[pipeline.framework]
    if not measure:  # under queuetune run: the program alone
        run(pipeline, settings, steps, folder, lambda: None)
        return 0
    ended: list[float] = []
    last: list[int] = []

    def stepped() -> None:
        ended.append(time.perf_counter())
        if len(ended) == steps:  # the loader still running: a tree that grows peaks here
            last.append(tree_memory()["total"])

    with Sampler(SAMPLE_EVERY_TRAINING) as sampler:
        began = time.perf_counter()
        run(pipeline, settings, steps, folder, stepped)
    left = reap()
    warmup = warmup_of(steps)
    if len(ended) != steps or not last:
        raise RuntimeError(f"{name}: {len(ended)} steps, not {steps}")
    figures = sampler.figures()
    row = {
        "settings": settings,
        "throughput": (steps - warmup) / (ended[-1] - ended[warmup - 1]),
        "seconds": ended[-1] - began,
        "pss_peak": max(figures["pss_peak"] or 0, last[0]),
        "pss_median": figures["pss_median"],
        "pss_last": last[0],
        "unmapped_shm_peak": figures["unmapped_shm_peak"],
        "pss_samples": figures["pss_samples"] + 1,
        "children_left": left,
    }
    print(json.dumps(row))
    return 0
