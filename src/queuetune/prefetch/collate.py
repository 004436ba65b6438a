"""How a prefetcher makes one batch of its source: an item of it, or samples joined by a collate function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..frameworks import tensors_of
from ..nbytes import nbytes
from .shm import allocate
from .stream import collate_as_built


def make_batch(source: Any, indices: Any, batch_size: int | None, collate_fn: Callable[[list[Any]], Any] | None) -> Any:
    """The batch ``source[indices]``, or with ``batch_size`` the samples at
    ``indices`` joined by ``collate_fn``, or where it is None as
    :func:`default_collate` joins them, each sample joined in as it is built
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
    (:func:`.shm.allocate`). What it cannot join (None, an object of no array's
    kind) is a ``TypeError`` naming where in the samples, as DataLoader's refuses it.

    >>> import numpy as np
    >>> x, y = default_collate([(np.zeros(2), 1), (np.ones(2), 0)])
    >>> x.shape, y.tolist()
    ((2, 2), [1, 0])
    >>> default_collate([{"x": 1, "y": None}, {"x": 2, "y": None}])
    Traceback (most recent call last):
    TypeError: default_collate: samples must hold arrays, tensors, numbers, strings, dicts, tuples or lists; \
sample 0 holds NoneType at ['y']
    """
    return _collate(items, "")


def _collate(items: list[Any], where: str) -> Any:
    import numpy as np

    first = items[0]
    tensors = tensors_of(first)
    if tensors is not None:
        return tensors.collate(items, allocate)
    if isinstance(first, tuple):
        return tuple(_collate(list(group), f"{where}[{i}]") for i, group in enumerate(zip(*items)))
    if isinstance(first, list):
        return [_collate(list(group), f"{where}[{i}]") for i, group in enumerate(zip(*items))]
    if isinstance(first, dict):
        return {key: _collate([item[key] for item in items], f"{where}[{key!r}]") for key in first}
    mixed = next((t for t in map(tensors_of, items) if t is not None), None)
    if mixed is not None:
        return mixed.collate(items)
    arrays = [np.asarray(item) for item in items]
    for number, (item, array) in enumerate(zip(items, arrays)):
        if array.dtype.hasobject:
            held = f"{type(item).__name__}" + (f" at {where}" if where else "")
            raise TypeError(
                "default_collate: samples must hold arrays, tensors, numbers, strings, dicts, tuples or lists; "
                f"sample {number} holds {held}"
            )
    shape, dtype = arrays[0].shape, arrays[0].dtype
    if all(array.shape == shape and array.dtype == dtype for array in arrays):
        # Into an array of their own dtype: numpy's stack would make a byte order native.
        out = allocate((len(arrays), *shape), dtype)
        return np.stack(arrays, out=np.empty((len(arrays), *shape), dtype) if out is None else out)
    return np.stack(arrays)
