"""How a prefetcher makes one batch of its source: an item of it, or samples joined by a collate function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..frameworks import tensors_of
from ..nbytes import nbytes
from .shm import allocate


def make_batch(source: Any, indices: Any, batch_size: int | None, collate_fn: Callable[[list[Any]], Any] | None) -> Any:
    """The batch ``source[indices]``, or with ``batch_size`` the samples at
    ``indices`` joined by ``collate_fn`` (:func:`default_collate` if None).

    >>> make_batch(["a", "b"], 1, None, None)
    'b'
    >>> make_batch([10, 11, 12], [0, 2], 2, None).tolist()
    [10, 12]
    """
    if batch_size is None:
        return source[indices]
    items = [source[i] for i in indices]
    return (collate_fn or default_collate)(items)


def batch_bytes_guess(source: Any, batch_size: int, index: Any) -> int:
    """The bytes of a batch of ``batch_size`` samples like ``source[index]``
    joined by :func:`default_collate`: one sample built and collated alone.

    >>> import numpy as np
    >>> batch_bytes_guess([np.zeros(100, dtype=np.float32)], 8, 0)
    3200
    """
    return nbytes(default_collate([source[index]])) * batch_size


def default_collate(items: list[Any]) -> Any:
    """Join samples into a batch: arrays and numbers are stacked, tuples, lists and
    dicts are joined field by field; a framework's tensors (torch's) use its own collate. In a
    worker process, large arrays and tensors are stacked straight into shared memory
    (:func:`.shm.allocate`).

    >>> import numpy as np
    >>> x, y = default_collate([(np.zeros(2), 1), (np.ones(2), 0)])
    >>> x.shape, y.tolist()
    ((2, 2), [1, 0])
    """
    import numpy as np

    first = items[0]
    tensors = tensors_of(first)
    if tensors is not None:
        return tensors.collate(items, allocate)
    if isinstance(first, tuple):
        return tuple(default_collate(list(group)) for group in zip(*items))
    if isinstance(first, list):
        return [default_collate(list(group)) for group in zip(*items)]
    if isinstance(first, dict):
        return {key: default_collate([item[key] for item in items]) for key in first}
    mixed = next((t for t in map(tensors_of, items) if t is not None), None)
    if mixed is not None:
        return mixed.collate(items)
    arrays = [np.asarray(item) for item in items]
    shape, dtype = arrays[0].shape, arrays[0].dtype
    if all(array.shape == shape and array.dtype == dtype for array in arrays):
        out = allocate((len(arrays), *shape), dtype)
        if out is not None:
            return np.stack(arrays, out=out)
    return np.stack(arrays)
