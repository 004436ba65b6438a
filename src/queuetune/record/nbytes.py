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
    layout = getattr(obj, "layout", None)
    if layout is not None and "sparse" in str(layout):  # torch's nbytes refuses COO and gives CSR's dense size
        return _parts_bytes(obj)
    size = getattr(obj, "nbytes", None)
    if isinstance(size, int):
        return size
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    return _tensor_bytes(obj)


# What a sparse tensor is made of, by layout (torch's COO, CSR/BSR, CSC/BSC).
_PARTS = ("_indices", "_values", "crow_indices", "ccol_indices", "col_indices", "row_indices", "values")


def _parts_bytes(obj: Any) -> int:
    """The bytes of the arrays a sparse tensor is made of: indices and values.

    >>> class Sparse:
    ...     layout = "sparse_coo"
    ...     def _indices(self): return bytes(16)
    ...     def _values(self): return bytes(8)
    >>> _parts_bytes(Sparse())
    24
    """
    total = 0
    for name in _PARTS:
        try:
            part = getattr(obj, name)()
        except Exception:  # not a part of this layout
            continue
        total += nbytes(part)
    return total


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
