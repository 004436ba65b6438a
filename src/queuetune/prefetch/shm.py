"""Numpy arrays from worker processes without pickling their data.

A worker writes each array of a batch into its own file in /dev/shm and sends
back only a small descriptor. The receiving process maps the file, removes its
name at once (the mapping stays valid), and hands out an array over the mapping:
no copy, and the memory is freed when the last view of the array goes. Files
are named with the receiver's pid, so :func:`sweep` removes what a killed
worker left behind.
"""

from __future__ import annotations

import mmap
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path("/dev/shm")
_PREFIX = "queuetune-"
MIN_BYTES = 64 * 1024


class SharedArray:
    """What a worker sends for one array: where it is, and its shape and dtype."""

    __slots__ = ("dtype", "path", "shape")

    def __init__(self, path: str, shape: tuple[int, ...], dtype: str) -> None:
        self.path, self.shape, self.dtype = path, shape, dtype

    def __reduce__(self) -> tuple:
        return (SharedArray, (self.path, self.shape, self.dtype))


def available() -> bool:
    """Whether /dev/shm can be used here."""
    return ROOT.is_dir() and os.access(ROOT, os.W_OK)


def export(batch: Any, owner: int) -> Any:
    """Replace the large numpy arrays in ``batch`` (nested in tuples, lists and
    dicts) by descriptors of shared-memory copies, for receiver pid ``owner``."""
    if isinstance(batch, np.ndarray) and batch.nbytes >= MIN_BYTES and not batch.dtype.hasobject:
        return _write(batch, owner)
    if isinstance(batch, tuple):
        return tuple(export(item, owner) for item in batch)
    if isinstance(batch, list):
        return [export(item, owner) for item in batch]
    if isinstance(batch, dict):
        return {key: export(value, owner) for key, value in batch.items()}
    return batch


def adopt(batch: Any) -> Any:
    """Turn descriptors back into arrays mapped from shared memory (in the receiver).

    >>> import os
    >>> a = np.arange(20000, dtype="float64")
    >>> b = adopt(export((a, 3), os.getpid()))
    >>> bool((b[0] == a).all()), b[1]
    (True, 3)
    """
    if isinstance(batch, SharedArray):
        return _read(batch)
    if isinstance(batch, tuple):
        return tuple(adopt(item) for item in batch)
    if isinstance(batch, list):
        return [adopt(item) for item in batch]
    if isinstance(batch, dict):
        return {key: adopt(value) for key, value in batch.items()}
    return batch


def discard(batch: Any) -> None:
    """Remove the files of descriptors that will never be adopted."""
    if isinstance(batch, SharedArray):
        _unlink(batch.path)
    elif isinstance(batch, (tuple, list)):
        for item in batch:
            discard(item)
    elif isinstance(batch, dict):
        for value in batch.values():
            discard(value)


def sweep(owner: int) -> int:
    """Remove every file left for receiver ``owner``; return how many."""
    count = 0
    for path in ROOT.glob(f"{_PREFIX}{owner}-*"):
        _unlink(str(path))
        count += 1
    return count


def _write(array: np.ndarray, owner: int) -> SharedArray:
    path = str(ROOT / f"{_PREFIX}{owner}-{uuid.uuid4().hex}")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, max(array.nbytes, 1))
        with mmap.mmap(fd, max(array.nbytes, 1)) as mapped:
            np.ndarray(array.shape, array.dtype, buffer=mapped)[...] = array
    except BaseException:
        os.close(fd)
        _unlink(path)
        raise
    os.close(fd)
    return SharedArray(path, array.shape, array.dtype.str)


def _read(shared: SharedArray) -> np.ndarray:
    fd = os.open(shared.path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        mapped = mmap.mmap(fd, size)
    finally:
        os.close(fd)
        _unlink(shared.path)
    return np.ndarray(shared.shape, np.dtype(shared.dtype), buffer=mapped)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
