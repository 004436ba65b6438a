"""tf.data: a ``Dataset`` whose last ``prefetch`` buffer bounds its read-ahead.

It builds batches inside TensorFlow, out of the probe's sight: a watched
``Dataset`` is read as a plain iterable, and the tuner counts its buffer as full.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..units import nonnegative_int
from .base import Framework, Lines, buffer_depth, buffer_for, has_base, parameter_default


def is_tf_dataset(obj: Any) -> bool:
    """A ``tf.data.Dataset``.

    >>> is_tf_dataset([])
    False
    """
    return has_base(obj, "DatasetV2", "tensorflow")


@dataclass(frozen=True)
class TfData(Framework):
    """The final ``prefetch(buffer)``: one producer and ``buffer`` ready batches.

    >>> TFDATA.depth({"buffer": 8}), TFDATA.settings_for(9, None)
    (9, {'buffer': 8})
    """

    def recognises(self, loader: Any) -> bool:
        return is_tf_dataset(loader)

    def depth(self, settings: dict[str, Any]) -> int:
        return buffer_depth(settings.get("buffer", 1))

    def settings_for(self, depth: int, workers: int | None) -> dict[str, Any] | None:
        buffer = buffer_for(depth)
        return None if buffer is None else {"buffer": buffer}

    def read_ahead(self, settings: dict[str, Any], batch_bytes: int) -> tuple[dict[str, Any], Lines, int]:
        buffer = nonnegative_int(settings.get("buffer", 1), "buffer")
        why = f"prefetch buffer of {buffer} batch(es); with AUTOTUNE pass the size you expect"
        return {"buffer": buffer}, [("prefetched", buffer, why)], buffer_depth(buffer)

    def tuner_defaults(self, factory: Callable[..., Any], loader: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        # AUTOTUNE's buffer is sized inside TensorFlow, out of sight: the factory names it.
        value = parameter_default(factory, "buffer")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                "a tf.data factory takes the prefetch size as `buffer` with an integer default "
                f"(e.g. def make(buffer=8)); got {value!r}"
            )
        return {"buffer": value}

    def estimated_peak(self, depth: int, batch_bytes: int) -> tuple[int, int] | None:
        # The buffer is assumed full, plus the batch the step holds.
        return depth + 1, (depth + 1) * batch_bytes


TFDATA = TfData("tfdata", depth_knob="buffer", tuned_knobs=("buffer",), estimate_settings=("buffer",), extra="tf")
