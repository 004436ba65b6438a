"""tf.data: a ``Dataset`` whose last ``prefetch`` buffer bounds its read-ahead.

It builds batches inside TensorFlow, out of the probe's sight: a watched
``Dataset`` is read as a plain iterable, and the tuner counts its buffer as full
and fits the queue model to a run with ``prefetch(0)``, where each request
builds its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...common.kinds import Settings
from ...common.units import nonnegative_int
from ..base import Framework, Lines, Setting, has_base
from .tensors import SAMPLE_TENSORS


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

    def depth(self, settings: Settings) -> int:
        return nonnegative_int(settings.get("buffer", 1), "buffer")

    def settings_for(self, depth: int, workers: int | None) -> Settings | None:
        return {"buffer": depth} if depth >= 0 else None

    def read_ahead(self, settings: Settings, batch_bytes: int) -> tuple[Settings, Lines, int]:
        buffer = nonnegative_int(settings.get("buffer", 1), "buffer")
        why = f"prefetch buffer of {buffer} batch(es); with AUTOTUNE pass the size you expect"
        return {"buffer": buffer}, [("prefetched", buffer, why)], buffer

    def model_settings(self, default: Settings) -> Settings | None:
        # prefetch(0) builds each batch in the request, where the probe times it.
        return {"buffer": 0}

    def estimated_peak(self, depth: int, batch_bytes: int) -> tuple[int, int] | None:
        # The buffer is assumed full, plus the batch the step holds.
        return depth + 1, (depth + 1) * batch_bytes


TFDATA = TfData(
    "tfdata",
    depth_knob="buffer",
    tuned_knobs=("buffer",),
    settings=(Setting("buffer", "count", "prefetch buffer in batches (default 1)"),),
    extra="tf",
    tensor_kind=SAMPLE_TENSORS,
    autowatch_module="tensorflow",
    unmodelled="tf.data builds its batches inside TensorFlow; `queuetune tune` measures them",
)
