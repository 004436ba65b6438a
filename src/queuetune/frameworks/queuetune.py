"""queuetune's own :class:`~queuetune.Prefetcher`, as the queue model sees it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .base import Framework, LoaderRules

if TYPE_CHECKING:
    from ..session import Session


@dataclass(frozen=True)
class Queuetune(Framework):
    """Any free worker builds the next batch; a place frees when the consumer
    takes a batch; batches cross from worker processes in ``mode="process"``.

    >>> QUEUETUNE.rules({"mode": "process"}).processes
    True
    """

    def rules(self, settings: dict[str, Any]) -> LoaderRules:
        return LoaderRules("shared", "take", settings.get("mode") == "process")

    def autowatch(self, session: Session, module: ModuleType) -> Callable[[], None]:
        """Keep every Prefetcher made while ``session`` is active (it records itself)."""
        Prefetcher = module.Prefetcher
        original = Prefetcher.__init__

        def __init__(prefetcher: Any, *args: Any, **kwargs: Any) -> None:
            original(prefetcher, *args, **kwargs)
            if session.active:
                label = session.add("prefetcher", prefetcher.trace, prefetcher.close, prefetcher.recorder.live)
                prefetcher.recorder.meta.name = prefetcher.recorder.meta.name or label

        Prefetcher.__init__ = __init__

        def undo() -> None:
            Prefetcher.__init__ = original

        return undo


QUEUETUNE = Queuetune(
    "queuetune",
    autowatch_module="queuetune.prefetch",
    unmodelled="the Prefetcher sizes its own queue (max_bytes, adaptive)",
)
