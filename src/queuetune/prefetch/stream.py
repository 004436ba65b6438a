"""Samples joined into their batch as they are built, one at a time: what the
default collate makes, without holding every sample of the batch at once.

A worker that builds a batch of 32 samples of 588 KiB and then stacks them holds
18 MiB of samples besides the batch while it builds; twelve such workers hold
220 MiB. Here each array of the first sample fixes its place in the batch (in
shared memory where a worker process was lent room: :func:`.shm.allocate`), and
each later sample's arrays are copied there as it comes and let go of, so a
worker holds one sample besides the batch. Numbers, strings and anything else
are kept as they come and joined at the end by :func:`.collate.default_collate`,
as are all of a batch whose samples do not match the first (another shape,
dtype, type or structure): the result is always what the default collate
gives, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..frameworks import tensors_of
from ..frameworks.base import Tensors
from .collate import _collate, default_collate
from .shm import allocate, reserve


def collate_as_built(build: Callable[[Any], Any], indices: list[Any]) -> Any:
    """The batch :func:`.collate.default_collate` makes of the samples
    ``build(i)`` for ``i`` in ``indices``, each joined in as it is built.

    >>> batch = collate_as_built(lambda i: (np.full(3, i), i, {"s": "ab"[i % 2]}), [0, 1, 2])
    >>> batch[0].tolist(), batch[1].tolist(), batch[2]["s"].tolist()
    ([[0, 0, 0], [1, 1, 1], [2, 2, 2]], [0, 1, 2], ['a', 'b', 'a'])
    >>> collate_as_built(lambda i: np.zeros(i + 1), [0, 1])  # shapes differ: as the default collate does
    Traceback (most recent call last):
    ValueError: all input arrays must have the same shape
    """
    first = build(indices[0])
    plan = _plan(first, len(indices))
    if plan is None:
        return default_collate([first, *(build(i) for i in indices[1:])])
    plan.put(0, first)
    del first
    for k, index in enumerate(indices[1:], start=1):
        sample = build(index)
        if not plan.fits(sample):
            built = [plan.sample(j) for j in range(k)]
            return default_collate([*built, sample, *(build(i) for i in indices[k + 1 :])])
        plan.put(k, sample)
        del sample
    return plan.batch()


class _Part:
    """Where one part of the samples goes: ``put`` it for sample ``k``, ``fits``
    whether a sample's part can go the same way, ``sample(k)`` gives it back,
    ``batch()`` the joined part."""

    def fits(self, item: Any) -> bool:
        raise NotImplementedError

    def put(self, k: int, item: Any) -> None:
        raise NotImplementedError

    def sample(self, k: int) -> Any:
        raise NotImplementedError

    def batch(self) -> Any:
        raise NotImplementedError


class _Array(_Part):
    """A numpy array's part: an array with a batch axis, filled sample by sample."""

    def __init__(self, first: np.ndarray, count: int) -> None:
        self.shape, self.dtype = first.shape, first.dtype
        out = allocate((count, *first.shape), first.dtype, lazy=True)
        self.out = np.empty((count, *first.shape), first.dtype) if out is None else out

    def fits(self, item: Any) -> bool:
        return type(item) is np.ndarray and item.shape == self.shape and item.dtype == self.dtype

    def put(self, k: int, item: Any) -> None:
        reserve(self.out[k : k + 1])
        self.out[k] = item

    def sample(self, k: int) -> Any:
        return self.out[k, ...]  # an array even where a sample is 0-d (a numpy scalar is in native byte order)

    def batch(self) -> Any:
        return self.out


class _Tensor(_Part):
    """A framework's tensor's part, filled through its numpy view where the
    batch has room in shared memory (else the framework's own collate)."""

    def __init__(self, tensors: Tensors, first: Any, view: np.ndarray, dtype: str | None, out: np.ndarray) -> None:
        self.tensors, self.type, self.dtype = tensors, type(first), dtype
        self.shape, self.array_dtype = view.shape, view.dtype
        self.out = out

    def fits(self, item: Any) -> bool:
        if type(item) is not self.type:
            return False
        shared = self.tensors.as_array(item)
        return (
            shared is not None
            and shared[1] == self.dtype
            and shared[0].shape == self.shape
            and (shared[0].dtype == self.array_dtype)
        )

    def put(self, k: int, item: Any) -> None:
        shared = self.tensors.as_array(item)
        assert shared is not None
        reserve(self.out[k : k + 1])
        self.out[k] = shared[0]

    def sample(self, k: int) -> Any:
        return self.tensors.from_array(self.out[k, ...], self.dtype)

    def batch(self) -> Any:
        return self.tensors.from_array(self.out, self.dtype)


class _Tensors(_Part):
    """A framework's tensors with no room to place them as they come (small, or
    no shared memory lent): kept as they come, joined by the framework's collate."""

    def __init__(self, tensors: Tensors, first: Any, count: int) -> None:
        self.tensors, self.type = tensors, type(first)
        self.items: list[Any] = [None] * count

    def fits(self, item: Any) -> bool:
        return type(item) is self.type

    def put(self, k: int, item: Any) -> None:
        self.items[k] = item

    def sample(self, k: int) -> Any:
        return self.items[k]

    def batch(self) -> Any:
        return self.tensors.collate(self.items)


class _Kept(_Part):
    """Any other part (numbers, strings, ...): kept as it comes, joined at the end
    (``where``: its place in a sample, for the error of one that cannot be joined)."""

    def __init__(self, count: int, where: str) -> None:
        self.items: list[Any] = [None] * count
        self.where = where

    def fits(self, item: Any) -> bool:
        return tensors_of(item) is None and type(item) is not np.ndarray

    def put(self, k: int, item: Any) -> None:
        self.items[k] = item

    def sample(self, k: int) -> Any:
        return self.items[k]

    def batch(self) -> Any:
        return _collate(self.items, self.where)


class _Container(_Part):
    """A tuple, list or dict of parts, joined as the default collate joins them."""

    def __init__(self, kind: type, keys: list[Any], parts: list[_Part]) -> None:
        self.kind, self.keys, self.parts = kind, keys, parts

    def fits(self, item: Any) -> bool:
        if type(item) is not self.kind:
            return False
        given: Any = item
        if self.kind is dict:
            return list(given) == self.keys and all(part.fits(given[key]) for key, part in zip(self.keys, self.parts))
        return len(given) == len(self.parts) and all(part.fits(value) for value, part in zip(given, self.parts))

    def put(self, k: int, item: Any) -> None:
        values = (item[key] for key in self.keys) if self.kind is dict else item
        for part, value in zip(self.parts, values):
            part.put(k, value)

    def sample(self, k: int) -> Any:
        values = [part.sample(k) for part in self.parts]
        if self.kind is dict:
            return dict(zip(self.keys, values))
        return self.kind(values)

    def batch(self) -> Any:
        values = [part.batch() for part in self.parts]
        if self.kind is dict:
            return dict(zip(self.keys, values))
        return tuple(values) if self.kind is tuple else values


def _plan(first: Any, count: int) -> _Part | None:
    """How each part of samples like ``first`` is joined; None where the batch is
    better made by the default collate at once (no array in it to place, or a
    part that cannot be placed as it comes)."""
    found: list[bool] = []
    plan = _part(first, count, found, "")
    return plan if plan is not None and any(found) else None


def _part(item: Any, count: int, found: list[bool], where: str) -> _Part | None:
    if type(item) in (tuple, list):
        parts = [_part(value, count, found, f"{where}[{i}]") for i, value in enumerate(item)]
        return None if None in parts else _Container(type(item), list(range(len(item))), parts)  # type: ignore[arg-type]
    if type(item) is dict:
        keys = list(item)
        parts = [_part(item[key], count, found, f"{where}[{key!r}]") for key in keys]
        return None if None in parts else _Container(dict, keys, parts)  # type: ignore[arg-type]
    if type(item) is np.ndarray:
        if item.dtype.hasobject:
            return None
        found.append(True)
        return _Array(item, count)
    tensors = tensors_of(item)
    if tensors is not None:
        shared = tensors.as_array(item)
        out = None if shared is None else allocate((count, *shared[0].shape), shared[0].dtype, lazy=True)
        if shared is None or out is None:  # no room in shared memory: the framework's collate, at the end
            return _Tensors(tensors, item, count)
        found.append(True)
        return _Tensor(tensors, item, *shared, out)
    if isinstance(item, (tuple, list, dict)):  # a subclass: the default collate's way
        return None
    return _Kept(count, where)
