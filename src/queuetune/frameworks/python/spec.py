"""What queuetune knows of any iterable (a generator, a list, an iterator) and of a
loader that reads nothing ahead."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...common.kinds import Settings
from ..base import Framework, Lines, buffer_depth, buffer_for


@dataclass(frozen=True)
class Python(Framework):
    """Any iterable. In tuning trials queuetune reads it ahead with its own thread
    (``buffer`` batches ready, 0 for none); watched, it is counted where each
    ``next`` returns.

    >>> PYTHON.depth({"buffer": 3}), PYTHON.settings_for(4, None), PYTHON.recognises(iter([]))
    (4, {'buffer': 3}, True)
    """

    def recognises(self, loader: Any) -> bool:
        return isinstance(loader, Iterable)

    def depth(self, settings: Settings) -> int:
        return buffer_depth(settings.get("buffer", 0))

    def settings_for(self, depth: int, workers: int | None) -> Settings | None:
        buffer = buffer_for(depth)
        return None if buffer is None else {"buffer": buffer}

    def factory_kwargs(self, settings: Settings) -> dict[str, Any]:
        return {}  # the buffer is queuetune's own


@dataclass(frozen=True)
class Nothing(Framework):
    """A loader that reads nothing ahead: only the batch being consumed is held.

    >>> NONE.read_ahead({}, 100)
    ({}, [], 0)
    """

    def read_ahead(self, settings: Settings, batch_bytes: int) -> tuple[Settings, Lines, int]:
        return {}, [], 0


PYTHON = Python("python", depth_knob="buffer", tuned_knobs=("buffer",), read_ahead_by_queuetune=True)
NONE = Nothing("none", settings=())
