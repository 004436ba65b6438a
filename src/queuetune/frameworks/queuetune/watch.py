"""The Prefetcher's hook: every Prefetcher a program makes, kept by the session (it records itself)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..base import Adapter, Watching


@dataclasses.dataclass(frozen=True)
class QueuetuneAdapter(Adapter):
    """Keeps every Prefetcher made while a session is active."""

    def autowatch(self, session: Watching, module: ModuleType) -> Callable[[], None]:
        """Keep every Prefetcher made while ``session`` is active (it records itself)."""
        Prefetcher = module.Prefetcher
        original = Prefetcher.__init__

        def __init__(prefetcher: Any, *args: Any, **kwargs: Any) -> None:
            original(prefetcher, *args, **kwargs)
            if session.active:
                recorder = prefetcher.recorder
                session.add("prefetcher", prefetcher.trace, prefetcher.close, recorder.live, recorder)

        Prefetcher.__init__ = __init__

        def undo() -> None:
            Prefetcher.__init__ = original

        return undo


ADAPTERS: dict[str, type[Adapter]] = {"queuetune": QueuetuneAdapter}
