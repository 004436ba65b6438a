"""tune_workloads.py's Keras workloads: random images for a CNN, PNG files decoded, and
batches that stall at random, each a factory of a fresh PyDataset and a compiled model."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np

from harness.interleave import Tunable

SIZE = 128


LENGTH = 100_000  # batches per epoch: more than any run reads


def light_model() -> keras.Model:
    """Global average pooling and a dense softmax: a training step of a few ms."""
    inputs = keras.Input((SIZE, SIZE, 3))
    x = keras.layers.GlobalAveragePooling2D()(inputs)
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))
    model.compile("adam", "sparse_categorical_crossentropy")
    return model


def cnn_model() -> keras.Model:
    """Two 3x3 convolutions, pooling and a dense softmax: the slow side on a CPU."""
    inputs = keras.Input((SIZE, SIZE, 3))
    x = keras.layers.Conv2D(16, 3, activation="relu")(inputs)
    x = keras.layers.Conv2D(32, 3, strides=2, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))
    model.compile("adam", "sparse_categorical_crossentropy")
    return model


class RandomImages(keras.utils.PyDataset):
    """Random float32 images, generated in ``__getitem__`` (quick)."""

    def __init__(self, batch: int = 16, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batch = batch

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(index)
        x = rng.random((self.batch, SIZE, SIZE, 3), dtype=np.float32)
        return x, rng.integers(0, 10, self.batch)


class PngImages(keras.utils.PyDataset):
    """PNG files decoded with Pillow and normalised to float32 in ``__getitem__``."""

    def __init__(self, paths: list[Path], labels: np.ndarray, batch: int = 32, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.paths, self.labels, self.batch = paths, labels, batch

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        from PIL import Image

        picks = [(index * self.batch + j) % len(self.paths) for j in range(self.batch)]
        x = np.empty((self.batch, SIZE, SIZE, 3), dtype=np.float32)
        for row, k in enumerate(picks):
            with Image.open(self.paths[k]) as image:
                x[row] = np.asarray(image.convert("RGB"), dtype=np.float32)
        x *= 1.0 / 255.0
        return x, self.labels[picks]


class JitteryImages(keras.utils.PyDataset):
    """A copy of a fixed batch after a sleep of ``base`` s, or ``stall`` s for the
    batch indices a seeded draw marks (probability ``p``)."""

    def __init__(
        self, base: float = 0.003, stall: float = 0.150, p: float = 0.04, batch: int = 16, seed: int = 0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        rng = np.random.default_rng(seed)
        self.sleeps = np.where(rng.random(LENGTH) < p, stall, base)
        self.template = rng.random((batch, SIZE, SIZE, 3), dtype=np.float32)
        self.labels = rng.integers(0, 10, batch)

    def __len__(self) -> int:
        return LENGTH

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(float(self.sleeps[index]))
        return self.template.copy(), self.labels.copy()


def write_pngs(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` 128x128 RGB PNG files: smooth gradients with noise, so that they
    neither compress to nothing nor decode trivially."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 255, SIZE, dtype=np.float32)
    paths = []
    for i in range(count):
        across = ramp[None, :, None] * rng.random(3, dtype=np.float32)
        down = ramp[:, None, None] * rng.random(3, dtype=np.float32)
        base = across + down
        pixels = np.clip(base / 2 + rng.normal(0, 24, (SIZE, SIZE, 3)), 0, 255).astype(np.uint8)
        path = folder / f"image_{i:04d}.png"
        Image.fromarray(pixels, "RGB").save(path)
        paths.append(path)
    return paths


def workloads(folder: Path, scale: float) -> list[Tunable]:
    paths = write_pngs(folder, 256)
    labels = np.random.default_rng(1).integers(0, 10, len(paths))

    def compute_bound(workers: int = 4, max_queue_size: int = 10) -> tuple[Any, Any]:
        return RandomImages(workers=workers, max_queue_size=max_queue_size), cnn_model()

    def input_bound(workers: int = 4, max_queue_size: int = 10) -> tuple[Any, Any]:
        return PngImages(paths, labels, workers=workers, max_queue_size=max_queue_size), light_model()

    def jittery(workers: int = 4, max_queue_size: int = 10) -> tuple[Any, Any]:
        return JitteryImages(workers=workers, max_queue_size=max_queue_size), light_model()

    def steps(n: int) -> int:
        return max(20, int(n * scale))

    return [
        Tunable(
            "compute-bound",
            "random float32 128x128x3 images, batch 16 (3 MiB), built with numpy; CNN: Conv2D(16, 3) + "
            "Conv2D(32, 3, strides 2) + global average pooling + Dense(10)",
            compute_bound,
            steps(150),
            10,
        ),
        Tunable(
            "input-bound",
            "256 PNG files 128x128 RGB decoded with Pillow and normalised to float32, batch 32 (6 MiB); "
            "light model: global average pooling + Dense(10)",
            input_bound,
            steps(300),
            30,
        ),
        Tunable(
            "jittery",
            "sleep 3 ms, or 150 ms with probability 0.04 (seeded per batch index), then a copy of a "
            "float32 batch 16x128x128x3 (3 MiB); light model",
            jittery,
            steps(400),
            40,
        ),
    ]
