"""What queuetune knows of Keras 3 without importing it: a ``PyDataset`` read by
``fit``/``predict``/``evaluate``, and a plain generator handed to Keras."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...common.kinds import Settings
from ...common.units import nonnegative_int, positive_int
from ...model.rules import LoaderRules
from ..base import Framework, Lines, Setting, count_setting, flag, has_base
from ..tfdata.spec import TFDATA


def is_pydataset(obj: Any) -> bool:
    """A Keras ``PyDataset``.

    >>> is_pydataset([])
    False
    """
    return has_base(obj, "PyDataset", "keras")


def is_keras_model(obj: Any) -> bool:
    """A Keras model or layer.

    >>> is_keras_model(print)
    False
    """
    return has_base(obj, "Model", "keras") or has_base(obj, "Layer", "keras")


def run_model(model: Any, method: str, loader: Any, kwargs: dict[str, Any], callback: Any, steps: int) -> None:
    """Let a Keras model's ``method`` ("fit", "predict" or "evaluate") take ``steps``
    batches of ``loader``, with ``callback`` after the job's own callbacks (one epoch
    of ``steps`` for ``fit``).

    >>> class Model:
    ...     def predict(self, x, callbacks, **kwargs): print(len(callbacks), kwargs)
    >>> run_model(Model(), "predict", [], {"callbacks": ["mine"]}, "probe's", 5)
    2 {'verbose': 0, 'steps': 5}
    """
    kwargs = dict(kwargs)
    callbacks = list(kwargs.pop("callbacks", []))
    kwargs.setdefault("verbose", 0)
    if method == "fit":
        kwargs.update(epochs=1, steps_per_epoch=steps)
    else:
        kwargs["steps"] = steps
    getattr(model, method)(loader, callbacks=[*callbacks, callback], **kwargs)


@dataclass(frozen=True)
class Keras(Framework):
    """A ``PyDataset``: an enqueuer exists when ``workers > 1`` or
    ``use_multiprocessing`` (with ``workers > 0``); its feeder thread keeps up to
    ``max_queue_size + 1`` batches submitted and not taken (a queue of futures,
    plus the one it waits to put); otherwise batches are read synchronously.

    >>> KERAS.depth({"workers": 4, "max_queue_size": 10}), KERAS.depth({"workers": 1})
    (11, 0)
    >>> KERAS.settings_for(3, 4)
    {'workers': 4, 'max_queue_size': 2}
    """

    def recognises(self, loader: Any) -> bool:
        return is_pydataset(loader)

    def depth(self, settings: Settings) -> int:
        workers = int(settings.get("workers", 1))
        multiprocessing = bool(settings.get("use_multiprocessing", False))
        if workers > 1 or (workers > 0 and multiprocessing):
            return int(settings.get("max_queue_size", 10)) + 1
        return 0

    def settings_for(self, depth: int, workers: int | None) -> Settings | None:
        workers = 1 if workers is None else workers
        if workers <= 1:
            return {"workers": 1, "max_queue_size": 10} if depth == 0 else None
        if depth < 2:  # max_queue_size=0 would make Keras's queue unbounded
            return None
        return {"workers": workers, "max_queue_size": depth - 1}

    def rules(self, settings: Settings) -> LoaderRules:
        # Keras's executor: any free worker; its feeder submits the next batch when
        # the consumer removes the head of the queue, before that batch is ready.
        return LoaderRules(
            "shared", "request", bool(settings.get("use_multiprocessing")), count_setting(settings, "workers")
        )

    def read_ahead(self, settings: Settings, batch_bytes: int) -> tuple[Settings, Lines, int]:
        workers = nonnegative_int(settings.get("workers", 1), "workers")
        multiprocessing = flag(settings.get("use_multiprocessing", False), "use_multiprocessing")
        queue_size = positive_int(settings.get("max_queue_size", 10), "max_queue_size")
        resolved = {"workers": workers, "use_multiprocessing": multiprocessing, "max_queue_size": queue_size}
        depth = self.depth(resolved)
        if depth:
            why = f"max_queue_size + 1: queue of {queue_size} futures plus the one the feeder thread waits to put"
        else:
            why = f"synchronous: workers={workers}" + ("" if multiprocessing else " without multiprocessing")
            why += ", no queue"
        return resolved, [("queued", depth, why)], depth

    def recognises_model(self, consumer: Any) -> bool:
        return is_keras_model(consumer)

    def batch_count(self, loader: Any) -> int | None:
        count = getattr(loader, "num_batches", None)
        return None if count is None else int(count)

    def settings_of(self, loader: Any) -> Settings:
        return {
            "workers": loader.workers,
            "use_multiprocessing": loader.use_multiprocessing,
            "max_queue_size": loader.max_queue_size,
        }


@dataclass(frozen=True)
class KerasGenerator(Framework):
    """A plain generator handed to Keras 3, which reads it by backend: the
    TensorFlow backend wraps it in tf.data with ``prefetch(AUTOTUNE)`` (counted
    as ``buffer`` batches, 1 unless given: AUTOTUNE can grow it), the torch
    backend in a ``DataLoader`` with no workers (nothing ahead), the JAX backend
    may keep one batch ahead on accelerators.

    >>> GENERATOR.depth({"backend": "torch"}), GENERATOR.depth({"backend": "tensorflow"})
    (0, 1)
    """

    def depth(self, settings: Settings) -> int:
        backend = settings.get("backend", "tensorflow")
        if backend == "tensorflow":
            return TFDATA.depth(settings)
        return 1 if backend == "jax" else 0

    def read_ahead(self, settings: Settings, batch_bytes: int) -> tuple[Settings, Lines, int]:
        backend = settings.get("backend", "tensorflow")
        if backend not in ("tensorflow", "torch", "jax"):
            raise ValueError(f"unknown backend {backend!r}; known backends: tensorflow, torch, jax")
        if backend == "tensorflow":
            buffer = nonnegative_int(settings.get("buffer", 1), "buffer")
            resolved: dict[str, Any] = {"backend": backend, "buffer": buffer}
            why = f"tf.data prefetch(AUTOTUNE), assumed to hold {buffer} batch(es); AUTOTUNE can grow it"
            return resolved, [("prefetched", buffer, why)], self.depth(resolved)
        if "buffer" in settings:
            raise ValueError(f"buffer only applies to the tensorflow backend, not {backend!r}")
        resolved = {"backend": backend}
        if backend == "torch":
            why = "torch backend: DataLoader without workers, nothing read ahead"
            return resolved, [("prefetched", 0, why)], 0
        return resolved, [("prefetched", 1, "jax backend: assumed one batch ahead on accelerators")], 1


KERAS = Keras(
    "keras",
    depth_knob="max_queue_size",
    workers_knob="workers",
    tuned_knobs=("workers", "max_queue_size", "use_multiprocessing"),
    settings=(
        Setting("workers", "count", "PyDataset workers (default 1)"),
        Setting("use_multiprocessing", "flag", "use_multiprocessing=True"),
        Setting("max_queue_size", "positive", "max_queue_size (default 10)"),
    ),
    extra="keras",
    autowatch_module="keras",
    handover_advice=(
        "fewer or smaller arrays a batch; with use_multiprocessing=True each batch is pickled "
        "through a pipe, which threads (use_multiprocessing=False) do not pay"
    ),
    repeat_advice=(
        "Keras's enqueuer with workers > 1 serves batches built ahead again at an epoch's start: "
        "set workers=1, or read the PyDataset through queuetune.Prefetcher"
    ),
)
GENERATOR = KerasGenerator(
    "generator",
    settings=(
        Setting("backend", "text", "Keras backend, tensorflow, torch or jax (default tensorflow)"),
        Setting("buffer", "count", "prefetch buffer in batches (default 1)"),
    ),
    extra="keras",
    unmodelled="Keras reads a generator with no queue of its own to set (a PyDataset has workers and max_queue_size)",
)
