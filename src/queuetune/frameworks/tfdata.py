"""tf.data: a ``Dataset`` whose last ``prefetch`` buffer bounds its read-ahead.

It builds batches inside TensorFlow, out of the probe's sight: a watched
``Dataset`` is read as a plain iterable, and the tuner counts its buffer as full
and fits the queue model to a run with ``prefetch(0)``, where each request
builds its batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..units import nonnegative_int
from .base import Framework, Lines, has_base, parameter_default

if TYPE_CHECKING:
    from ..session import Session


def is_tf_dataset(obj: Any) -> bool:
    """A ``tf.data.Dataset``.

    >>> is_tf_dataset([])
    False
    """
    return has_base(obj, "DatasetV2", "tensorflow")


@dataclass(frozen=True)
class TfData(Framework):
    """The final ``prefetch(buffer)``: one producer thread that waits for room
    in the buffer before it builds, so ``buffer`` batches at most are being
    built or ready (its depth; 0 builds each batch in the request).

    >>> TFDATA.depth({"buffer": 8}), TFDATA.settings_for(9, None)
    (8, {'buffer': 9})
    """

    def recognises(self, loader: Any) -> bool:
        return is_tf_dataset(loader)

    def depth(self, settings: dict[str, Any]) -> int:
        return nonnegative_int(settings.get("buffer", 1), "buffer")

    def settings_for(self, depth: int, workers: int | None) -> dict[str, Any] | None:
        return {"buffer": depth} if depth >= 0 else None

    def read_ahead(self, settings: dict[str, Any], batch_bytes: int) -> tuple[dict[str, Any], Lines, int]:
        buffer = nonnegative_int(settings.get("buffer", 1), "buffer")
        why = f"prefetch buffer of {buffer} batch(es); with AUTOTUNE pass the size you expect"
        return {"buffer": buffer}, [("prefetched", buffer, why)], buffer

    def tuner_defaults(self, factory: Callable[..., Any], loader: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        # AUTOTUNE's buffer is sized inside TensorFlow, out of sight: the factory names it.
        value = parameter_default(factory, "buffer")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                "a tf.data factory takes the prefetch size as `buffer` with an integer default "
                f"(e.g. def make(buffer=8)); got {value!r}"
            )
        return {"buffer": value}

    def model_settings(self, default: dict[str, Any]) -> dict[str, Any] | None:
        # prefetch(0) builds each batch in the request, where the probe times it.
        return {"buffer": 0}

    def estimated_peak(self, depth: int, batch_bytes: int) -> tuple[int, int] | None:
        # The buffer is assumed full, plus the batch the step holds.
        return depth + 1, (depth + 1) * batch_bytes

    def autowatch(self, session: Session, module: ModuleType) -> Callable[[], None]:
        """Make every pass over a ``Dataset`` while ``session`` is active a watched
        pass (one watcher per dataset), read as a plain iterable: what reaches the
        program, and its waits."""
        cls = module.data.Dataset
        original = cls.__iter__
        copies: dict[int, tuple[Any, Any]] = {}
        inside = threading.local()

        def __iter__(dataset: Any) -> Any:
            if not session.active or getattr(inside, "busy", False):
                return original(dataset)
            held = copies.get(id(dataset))
            watched = held[1] if held is not None and held[0] is dataset else None
            if watched is None:
                # Its read-ahead happens inside TensorFlow: its depth is not known.
                watched = session.watch(dataset, "tf.data", framework=self.name, depth=None)
                if watched is None:
                    return original(dataset)
                copies[id(dataset)] = (dataset, watched)
            inside.busy = True
            try:
                return iter(watched)
            finally:
                inside.busy = False

        cls.__iter__ = __iter__

        def undo() -> None:
            cls.__iter__ = original
            copies.clear()

        return undo


TFDATA = TfData(
    "tfdata",
    depth_knob="buffer",
    tuned_knobs=("buffer",),
    estimate_settings=("buffer",),
    extra="tf",
    autowatch_module="tensorflow",
    unmodelled="tf.data builds its batches inside TensorFlow; `queuetune tune` measures them",
)
