"""The default collate, which joins samples into a batch as torch's DataLoader does,
and the guess of a batch's size from one sample."""

from __future__ import annotations

from typing import Any

from ..frameworks import tensors_of
from ..record.nbytes import nbytes
from .shm import allocate


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
