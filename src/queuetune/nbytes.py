"""The byte counter shared by the probe and the prefetcher: bytes held by a batch."""

from __future__ import annotations

from typing import Any

_SCALARS = (int, float, complex, bool, str, type(None))


def nbytes(batch: Any) -> int:
    """Return the bytes held by the arrays and tensors in ``batch``.

    Counts numpy arrays, torch/tf/jax tensors and buffers, nested in tuples,
    lists and dicts. Python scalars and strings count as 0; an object reached
    twice is counted once.

    >>> import numpy as np
    >>> nbytes((np.zeros((2, 3), "float32"), {"y": np.zeros(2, "int64")}))
    40
    """
    seen: set[int] = set()
    return _count(batch, seen)


def _count(obj: Any, seen: set[int]) -> int:
    if isinstance(obj, _SCALARS):
        return 0
    key = id(obj)
    if key in seen:
        return 0
    seen.add(key)
    if isinstance(obj, (tuple, list, dict)):
        total = 0
        for item in obj.values() if isinstance(obj, dict) else obj:
            total += _count(item, seen)
        return total
    size = getattr(obj, "nbytes", None)
    if isinstance(size, int):
        return size
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    return _tensor_bytes(obj)


def _tensor_bytes(obj: Any) -> int:
    """Tensors whose ``nbytes`` is missing or not an int (tf eager tensors)."""
    shape = getattr(obj, "shape", None)
    dtype = getattr(obj, "dtype", None)
    itemsize = getattr(dtype, "size", None) or getattr(dtype, "itemsize", None)
    if shape is None or not isinstance(itemsize, int):
        return 0
    count = 1
    for dim in shape:
        if dim is None:
            return 0
        count *= int(dim)
    return count * itemsize
