"""What queuetune knows of its own :class:`~queuetune.Prefetcher`, as the queue model sees it."""

from __future__ import annotations

from dataclasses import dataclass

from ...common.kinds import Settings
from ...model.rules import LoaderRules
from ..base import Framework, count_setting


@dataclass(frozen=True)
class Queuetune(Framework):
    """Any free worker builds the next batch; a place frees when the consumer
    takes a batch; batches cross from worker processes in ``mode="process"``.

    >>> QUEUETUNE.rules({"mode": "process"}).processes
    True
    """

    def rules(self, settings: Settings) -> LoaderRules:
        return LoaderRules("shared", "take", settings.get("mode") == "process", count_setting(settings, "workers"))


QUEUETUNE = Queuetune(
    "queuetune",
    autowatch_module="queuetune.prefetch",
    unmodelled="the Prefetcher sizes its own queue (max_bytes, adaptive)",
    handover_advice=(
        'fewer or smaller arrays a batch, or mode="thread" where the builds release the GIL '
        "(no copy into shared memory)"
    ),
    copy_advice='device="cuda", which copies each batch to the device before the step asks',
)
