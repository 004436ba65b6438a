"""tf.data's hook: every pass over a ``Dataset`` a program makes, watched as a plain iterable."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ...common.kinds import Settings
from ..base import Adapter, Watching, parameter_default


@dataclasses.dataclass(frozen=True)
class TfDataAdapter(Adapter):
    """No watcher of its own (a ``Dataset`` is read as a plain iterable); hooks
    ``Dataset.__iter__``; in tuning, the factory names the prefetch size."""

    def tuner_defaults(self, factory: Callable[..., Any], loader: Any, kwargs: dict[str, Any]) -> Settings:
        # AUTOTUNE's buffer is sized inside TensorFlow, out of sight: the factory names it.
        value = parameter_default(factory, "buffer")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                "a tf.data factory takes the prefetch size as `buffer` with an integer default "
                f"(e.g. def make(buffer=8)); got {value!r}"
            )
        return {"buffer": value}

    def autowatch(self, session: Watching, module: ModuleType) -> Callable[[], None]:
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
                watched = session.watch(dataset, "tf.data", framework=self.spec.name, depth=None)
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


ADAPTERS: dict[str, type[Adapter]] = {"tfdata": TfDataAdapter}
