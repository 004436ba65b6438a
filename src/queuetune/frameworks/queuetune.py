"""queuetune's own :class:`~queuetune.Prefetcher`, as the queue model sees it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Framework, LoaderRules


@dataclass(frozen=True)
class Queuetune(Framework):
    """Any free worker builds the next batch; a place frees when the consumer
    takes a batch; batches cross from worker processes in ``mode="process"``.

    >>> QUEUETUNE.rules({"mode": "process"}).processes
    True
    """

    def rules(self, settings: dict[str, Any]) -> LoaderRules:
        return LoaderRules("shared", "take", settings.get("mode") == "process")


QUEUETUNE = Queuetune("queuetune")
