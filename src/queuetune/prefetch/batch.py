"""How a prefetcher makes one batch of its source: an item of it, or samples joined by a collate function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .stream import collate_as_built


def make_batch(source: Any, indices: Any, batch_size: int | None, collate_fn: Callable[[list[Any]], Any] | None) -> Any:
    """The batch ``source[indices]``, or with ``batch_size`` the samples at
    ``indices`` joined by ``collate_fn``, or where it is None as
    :func:`.collate.default_collate` joins them, each sample joined in as it is built
    (:func:`.stream.collate_as_built`: a worker holds one sample at a time).

    >>> make_batch(["a", "b"], 1, None, None)
    'b'
    >>> make_batch([10, 11, 12], [0, 2], 2, None).tolist()
    [10, 12]
    """
    if batch_size is None:
        return source[indices]
    if collate_fn is None:
        return collate_as_built(source.__getitem__, indices)
    return collate_fn([source[i] for i in indices])
