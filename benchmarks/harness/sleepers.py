"""model_accuracy.py's workloads: items that sleep a seeded producer time, a step that
sleeps a consumer time, and each framework's loader over them, built anew by a factory."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from queuetune import frameworks

ITEM_FLOATS = 16_384  # 64 KiB of float32 per batch


CONSUMER_LOW, CONSUMER_HIGH = 0.006, 0.008


@dataclasses.dataclass(frozen=True)
class Workload:
    """A producer-time distribution and the seeded times it gives to items."""

    name: str
    description: str
    draw: Callable[[np.random.Generator, int], np.ndarray]


def _constant(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.full(n, 0.020)


def _exponential(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.exponential(0.020, n)


def _heavy(rng: np.random.Generator, n: int) -> np.ndarray:
    return 0.012 + 0.120 * (rng.random(n) < 0.04)


WORKLOADS = [
    Workload("constant", "20 ms every item", _constant),
    Workload("exponential", "exponential, mean 20 ms", _exponential),
    Workload("heavy-tailed", "12 ms, plus a 120 ms stall with probability 0.04 (mean 16.8 ms)", _heavy),
]


class SleepItems:
    """Item ``i`` sleeps ``times[i]`` seconds and returns an array of ``floats``
    float32 (64 KiB unless told)."""

    def __init__(self, times: np.ndarray, floats: int = ITEM_FLOATS) -> None:
        self.times = [float(t) for t in times]
        self.floats = floats

    def __len__(self) -> int:
        return len(self.times)

    def item(self, index: int) -> np.ndarray:
        time.sleep(self.times[index])
        return np.full(self.floats, index, dtype=np.float32)

    def __iter__(self) -> Iterator[np.ndarray]:
        """Every item, in order."""
        for index in range(len(self)):
            yield self.item(index)


def sleeping_step(consumer: np.ndarray) -> Callable[[Any], None]:
    """A step function that sleeps the consumer time of the step it is at."""
    counter = [0]

    def step(batch: Any) -> None:
        i = counter[0]
        counter[0] += 1
        time.sleep(consumer[i % len(consumer)])

    return step


Factory = Callable[..., tuple[Any, Any]]


@dataclasses.dataclass(frozen=True)
class Loader:
    """One framework's loader under test: its knobs, the settings tried, the
    baseline the model is built from, and a factory maker."""

    framework: str
    label: str
    workers_knob: str
    depth_knob: str
    settings: list[tuple[int, int]]
    baseline: tuple[int, int]
    make_factory: Callable[[np.ndarray, np.ndarray], Factory]
    rule: str
    #: The key in LOADERS, when it is not the framework's name.
    name: str = ""
    #: Producer times are the distributions' times this many times over.
    build_scale: float = 1.0

    @property
    def key(self) -> str:
        return self.name or self.framework

    def depth(self, workers: int, knob: int) -> int:
        return frameworks.get(self.framework).depth(self.as_settings(workers, knob))

    def as_settings(self, workers: int, knob: int) -> dict[str, int]:
        if not self.workers_knob:
            return {self.depth_knob: knob}
        return {self.workers_knob: workers, self.depth_knob: knob}


def torch_factory(producer: np.ndarray, consumer: np.ndarray, floats: int = ITEM_FLOATS) -> Factory:
    """``make(num_workers, prefetch_factor)``: a fresh DataLoader over the items
    and a step function that sleeps the consumer time of the step it is at."""
    import torch.utils.data

    class SleepDataset(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.items = SleepItems(producer, floats)

        def __len__(self) -> int:
            return len(self.items)

        def __getitem__(self, index: int) -> np.ndarray:
            return self.items.item(index)

    def make(num_workers: int = 4, prefetch_factor: int = 2) -> tuple[Any, Callable[[Any], None]]:
        loader = torch.utils.data.DataLoader(
            SleepDataset(), batch_size=None, num_workers=num_workers, prefetch_factor=prefetch_factor
        )
        return loader, sleeping_step(consumer)

    return make


def keras_factory(producer: np.ndarray, consumer: np.ndarray) -> Factory:
    """``make(workers, max_queue_size)``: a fresh PyDataset (threads) over the
    items, batches of shape (1, 16384), and a compiled Keras model whose
    ``train_step`` sleeps the consumer time of the step it is at."""
    import keras

    class SleepPyDataset(keras.utils.PyDataset):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.items = SleepItems(producer)

        def __len__(self) -> int:
            return len(self.items)

        def __getitem__(self, index: int) -> np.ndarray:
            return self.items.item(index)[None, :]

    class SleepModel(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.steps_taken = 0

        def call(self, inputs: Any) -> Any:
            return inputs

        def train_step(self, data: Any) -> dict[str, Any]:
            time.sleep(consumer[self.steps_taken % len(consumer)])
            self.steps_taken += 1
            return {}

    def make(workers: int = 4, max_queue_size: int = 7) -> tuple[Any, Any]:
        model = SleepModel()
        model.compile()
        return SleepPyDataset(workers=workers, max_queue_size=max_queue_size), model

    return make


def generator_factory(producer: np.ndarray, consumer: np.ndarray) -> Factory:
    """``make()``: a fresh plain generator over the items and a step function;
    queuetune's own prefetch thread in front of it is the setting (``buffer``)."""

    def make() -> tuple[Any, Callable[[Any], None]]:
        return iter(SleepItems(producer)), sleeping_step(consumer)

    return make


def tfdata_factory(producer: np.ndarray, consumer: np.ndarray) -> Factory:
    """``make(buffer)``: a fresh ``tf.data`` pipeline, ``from_generator`` over the
    items then ``prefetch(buffer)`` (0: each request builds its batch), and a
    step function."""
    import tensorflow as tf

    def make(buffer: int = 3) -> tuple[Any, Callable[[Any], None]]:
        items = SleepItems(producer)
        spec = tf.TensorSpec((ITEM_FLOATS,), tf.float32)
        dataset = tf.data.Dataset.from_generator(lambda: iter(items), output_signature=spec).prefetch(buffer)
        return dataset, sleeping_step(consumer)

    return make
