"""What queuetune knows of PyTorch without importing it at import time: a
``DataLoader``, with or without worker processes, and torch's tensors as arrays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...common.kinds import Settings
from ...common.units import nonnegative_int, positive_int
from ...model.rules import LoaderRules
from ..base import Framework, Lines, Setting, count_setting, flag, has_base
from .tensors import SAMPLE_TENSORS, TENSORS


def is_dataloader(obj: Any) -> bool:
    """A torch ``DataLoader``.

    >>> is_dataloader([])
    False
    """
    return has_base(obj, "DataLoader", "torch.utils.data")


@dataclass(frozen=True)
class Torch(Framework):
    """A ``DataLoader``: ``prefetch_factor × num_workers`` batch indices sent to the
    worker processes and not yet handed over (prefetch_factor is 2 unless given);
    with ``num_workers=0`` the loop builds each batch itself.

    >>> TORCH.depth({"num_workers": 4, "prefetch_factor": None}), TORCH.settings_for(6, 3)
    (8, {'num_workers': 3, 'prefetch_factor': 2})
    """

    def recognises(self, loader: Any) -> bool:
        return is_dataloader(loader)

    def depth(self, settings: Settings) -> int:
        workers = int(settings.get("num_workers", 0))
        if workers == 0:
            return 0
        factor = settings.get("prefetch_factor")
        return (2 if factor is None else int(factor)) * workers

    def settings_for(self, depth: int, workers: int | None) -> Settings | None:
        workers = 0 if workers is None else workers
        if workers == 0:
            return {"num_workers": 0, "prefetch_factor": None} if depth == 0 else None
        if depth < 1 or depth % workers:
            return None
        return {"num_workers": workers, "prefetch_factor": depth // workers}

    def workers(self, settings: Settings) -> int:
        return max(1, int(settings.get("num_workers") or 0))

    def rules(self, settings: Settings) -> LoaderRules:
        # Batch i goes to worker i mod num_workers; the next index is sent once a
        # batch has been received.
        return LoaderRules(
            "round_robin", "take", int(settings.get("num_workers") or 0) > 0, count_setting(settings, "num_workers")
        )

    def read_ahead(self, settings: Settings, batch_bytes: int) -> tuple[Settings, Lines, int]:
        workers = nonnegative_int(settings.get("num_workers", 0), "num_workers")
        prefetch_factor = settings.get("prefetch_factor")
        pin_memory = flag(settings.get("pin_memory", False), "pin_memory")
        if workers == 0:
            if prefetch_factor is not None:
                raise ValueError("prefetch_factor can only be set with num_workers > 0 (torch raises the same error)")
            resolved = {"num_workers": 0, "prefetch_factor": None, "pin_memory": pin_memory}
            lines = [("prefetched", 0, "num_workers=0: batches are loaded in the main process, nothing read ahead")]
            if pin_memory:
                lines.append(("pinned copies", 0, "pinned in the main process as each batch is consumed"))
            return resolved, lines, 0
        factor = 2 if prefetch_factor is None else positive_int(prefetch_factor, "prefetch_factor")
        resolved = {"num_workers": workers, "prefetch_factor": factor, "pin_memory": pin_memory}
        depth = self.depth(resolved)
        lines = [("prefetched", depth, f"prefetch_factor x num_workers = {factor} x {workers}")]
        if pin_memory:
            lines.append(("pinned copies", depth, "pin_memory: a page-locked copy of each batch read ahead"))
        return resolved, lines, depth

    def settings_of(self, loader: Any) -> Settings:
        return {
            "num_workers": loader.num_workers,
            "prefetch_factor": loader.prefetch_factor if loader.num_workers > 0 else None,
            "pin_memory": loader.pin_memory,
            "batch_size": loader.batch_size,
            "persistent_workers": loader.persistent_workers,
        }


TORCH = Torch(
    "torch",
    depth_knob="prefetch_factor",
    workers_knob="num_workers",
    tuned_knobs=("num_workers", "prefetch_factor"),
    settings=(
        Setting("num_workers", "count", "DataLoader num_workers (default 0)"),
        Setting("prefetch_factor", "positive", "prefetch_factor (default 2)"),
        Setting("pin_memory", "flag", "pin_memory=True"),
    ),
    extra="torch",
    autowatch_module="torch",
    shard_advice="shard it in __iter__ with torch.utils.data.get_worker_info() (id, num_workers)",
    handover_advice=(
        "fewer or smaller tensors a batch, pin_memory=True where batches go to a GPU, "
        'or queuetune.Prefetcher(mode="process"), which hands batches over in shared memory it reuses'
    ),
    copy_advice=(
        'pin_memory=True with .to(device, non_blocking=True) in the step, or queuetune.Prefetcher(device="cuda"), '
        "which copies each batch to the device before the step asks"
    ),
    tensors=TENSORS,
    tensor_kind=SAMPLE_TENSORS,
)
