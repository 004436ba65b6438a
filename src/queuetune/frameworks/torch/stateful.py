"""torchdata's ``StatefulDataLoader`` watched: a watched copy that is itself a
``StatefulDataLoader``, so that ``state_dict()`` and ``load_state_dict()``
work on it as on the original, and a state taken from either loads into the
other. Imported only where a program uses torchdata."""

from __future__ import annotations

import functools
from typing import Any

from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

#: Where a resumed iterator's state keeps how many index lists it had taken.
_YIELDED = "_sampler_iter_yielded"


class _StatefulParts:
    """What a watched ``StatefulDataLoader`` adds to a watched ``DataLoader``:
    the original's ``snapshot_every_n_steps`` and loaded state, and torchdata's
    own iterator, which skips recording the index lists it fast-forwards past."""

    _queuetune_indices: Any
    _queuetune_recorder: Any
    _queuetune_run: Any
    next_iter_state: Any

    def _queuetune_options(self, loader: DataLoader[Any]) -> dict[str, Any]:
        return {"snapshot_every_n_steps": getattr(loader, "snapshot_every_n_steps", 1)}

    def _queuetune_adopt(self, loader: DataLoader[Any]) -> None:
        self.next_iter_state = getattr(loader, "next_iter_state", None)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = StatefulDataLoader.state_dict(self)
        self._queuetune_recorder.checkpoint()
        return state

    def _get_iterator(self) -> Any:
        # A sampler without a state of its own is fast-forwarded past the index
        # lists taken before the state was: those are not this pass's to record.
        indices = self._queuetune_indices
        state = self.next_iter_state
        if state:
            taken = _yielded(state)
            if indices is not None:
                indices.skip = taken  # undone where a state of the sampler's own is loaded
            # Its coverage counts this epoch as resumed, not as samples never seen.
            recorder, run = self._queuetune_recorder, self._queuetune_run
            epoch = recorder.epoch if run is not None and run.open else recorder.epoch + 1
            recorder.mark("resumed", {"epoch": epoch, "batches": taken})
        try:
            return StatefulDataLoader._get_iterator(self)
        finally:
            if indices is not None:
                indices.skip = 0


@functools.cache
def watched_class(watched: type[DataLoader[Any]]) -> type[DataLoader[Any]]:
    """The class of a watched ``StatefulDataLoader``: ``watched`` (the watched
    ``DataLoader``'s class) that is also a ``StatefulDataLoader``. Through
    :func:`queuetune.watch`:

    >>> import queuetune
    >>> loader = queuetune.watch(StatefulDataLoader(range(6), batch_size=2))
    >>> it = iter(loader); first = next(it).tolist(); state = loader.state_dict()
    >>> resumed = queuetune.watch(StatefulDataLoader(range(6), batch_size=2))
    >>> resumed.load_state_dict(state)
    >>> type(resumed).__name__, first, [b.tolist() for b in resumed]
    ('WatchedStatefulDataLoader', [0, 1], [[2, 3], [4, 5]])
    >>> for each in (loader, resumed):
    ...     queuetune.probe_of(each).close()
    """
    return type("WatchedStatefulDataLoader", (_StatefulParts, watched, StatefulDataLoader), {"__module__": __name__})


def _yielded(state: dict[str, Any]) -> int:
    """The index lists a ``StatefulDataLoader`` state says were taken (worker
    processes keep it in their main snapshot)."""
    if _YIELDED in state:
        return int(state[_YIELDED])
    snapshot = state.get("_snapshot", {}).get("_main_snapshot", {})
    return int(snapshot.get(_YIELDED, 0))
