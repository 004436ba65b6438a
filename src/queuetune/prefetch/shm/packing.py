"""A batch as it crosses from a worker to the receiver: its large arrays and
tensors described as :class:`Piece` s of segments, what must be copied there,
what nothing else reaches (so that the copy may wait), and what must change to
cross the pipe unchanged."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ...frameworks import tensors_of
from .segments import MIN_BYTES


class Piece:
    """One array of a batch in a segment: where it is, its shape and dtype, the
    order of its axes in memory from the largest stride (None: C order), and
    whether it was a numpy array or a framework's tensor (``kind``: "numpy", or
    the name of the framework's :class:`~queuetune.frameworks.base.Tensors`),
    with the name of its tensor dtype where numpy lacks it (its bits are then
    integers of the same size)."""

    __slots__ = ("dtype", "kind", "name", "offset", "order", "shape", "tensor_dtype")

    def __init__(
        self,
        name: str,
        offset: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        kind: str,
        order: tuple[int, ...] | None = None,
        tensor_dtype: str | None = None,
    ) -> None:
        self.name, self.offset, self.shape, self.dtype, self.kind = name, offset, shape, dtype, kind
        self.order, self.tensor_dtype = order, tensor_dtype

    def __reduce__(
        self,
    ) -> tuple[type[Piece], tuple[str, int, tuple[int, ...], np.dtype, str, tuple[int, ...] | None, str | None]]:
        return (Piece, (self.name, self.offset, self.shape, self.dtype, self.kind, self.order, self.tensor_dtype))


class Shipped:
    """A batch as a worker sends it: its large arrays replaced by pieces; the
    segment it took from the shelf, the segments it made (name and size), its
    bytes, and the bytes of its arrays in shared memory (``shared``);
    ``spent``: the CPU seconds and the seconds its build took, once known;
    ``pending``: None once its arrays are all in place, else the worker's slot
    and the number of the copy still being made into them (see
    :class:`.workers.Shipper`); ``views``: in the consumer's process, the batch
    over its segments and the segments' holders where :meth:`Pool.prepare` made
    them (never sent)."""

    __slots__ = ("batch", "lent", "made", "nbytes", "pending", "shared", "spent", "views")

    def __init__(
        self,
        batch: Any,
        lent: str | None,
        made: dict[str, int],
        nbytes: int,
        spent: tuple[float, float] | None = None,
        pending: tuple[int, int] | None = None,
        shared: int = 0,
    ) -> None:
        self.batch, self.lent, self.made, self.nbytes, self.spent = batch, lent, made, nbytes, spent
        self.pending, self.shared = pending, shared
        self.views: tuple[Any, dict[str, Any]] | None = None

    def __reduce__(self) -> tuple[type[Shipped], tuple[Any, ...]]:
        return (Shipped, (self.batch, self.lent, self.made, self.nbytes, self.spent, self.pending, self.shared))

    def segments(self) -> set[str]:
        """The segments the batch's pieces lie in."""
        names: set[str] = set()
        walk(self.batch, lambda piece: names.add(piece.name))
        return names


#: One copy into shared memory: the array over the segment, and the array to copy into it.
Copy = tuple[np.ndarray, np.ndarray]


def _local_refs() -> int:
    held = object()
    return sys.getrefcount(held)


def _item_refs() -> int:
    held = [object()]
    return sys.getrefcount(held[0])


# What sys.getrefcount reads for an object held by one local of the caller only,
# and for an item held by its container only (measured, since interpreters differ).
LOCAL_REFS, ITEM_REFS = _local_refs(), _item_refs()


def unshared(batch: Any, refs: int) -> set[int]:
    """The ids of the large arrays and tensors of ``batch`` that nothing outside
    it can reach: each owns its memory (not a view, not over another's buffer),
    and it and every tuple, list and dict above it are held by their container
    alone. ``refs``: ``sys.getrefcount(batch)`` where the caller holds it in one
    local only, measured in a statement of its own (an expression around the
    call would hold the batch as well). A source may keep and change what it
    returned (a buffer it reuses): an array it can reach must be copied before
    it builds again.

    >>> batch = (np.ones(100_000), 7)
    >>> refs = sys.getrefcount(batch)
    >>> kept = np.ones(100_000)
    >>> len(unshared(batch, refs)), len(unshared((kept, 7), LOCAL_REFS))
    (1, 0)
    >>> unshared(batch, refs + 1)  # the source holds the tuple too
    set()
    """
    found: set[int] = set()
    if refs <= LOCAL_REFS:
        _collect_unshared(batch, found)
    return found


def _collect_unshared(obj: Any, found: set[int]) -> None:
    """Add to ``found`` what of ``obj`` (held by its container alone) nothing else reaches."""
    if type(obj) in (tuple, list, dict):
        keys: Any = list(obj) if type(obj) is dict else range(len(obj))
        for key in keys:
            if sys.getrefcount(obj[key]) <= ITEM_REFS:
                _collect_unshared(obj[key], found)
    elif _owns_memory(obj):
        found.add(id(obj))


def _owns_memory(obj: Any) -> bool:
    """An array or tensor whose memory no other array, tensor or buffer reaches."""
    if type(obj) is np.ndarray:
        return obj.base is None and obj.flags.owndata
    tensors = tensors_of(obj)
    return tensors is not None and tensors.owns_memory(obj)


def copy(copies: list[Copy]) -> None:
    """Make ``copies`` (numpy lets go of the GIL while it copies).

    >>> target = np.zeros(3)
    >>> copy([(target, np.arange(3.0))]); target.tolist()
    [0.0, 1.0, 2.0]
    """
    for target, array in copies:
        target[...] = array


def portable(obj: Any) -> Any:
    """``obj`` as it must be to reach the receiver through the pipe unchanged: a
    framework's tensor as :meth:`~queuetune.frameworks.base.Tensors.portable`
    makes it; a numpy array in a byte order not this machine's, carried as its
    raw bytes and its dtype (numpy's pickling makes ``>f8`` native before
    protocol 5, which the pipe uses, and ``>M8[s]`` native in every protocol);
    anything else as it is.

    >>> import pickle
    >>> pickle.loads(pickle.dumps(portable(np.zeros(3, dtype=">M8[s]")), protocol=4)).dtype.str
    '>M8[s]'
    """
    if type(obj) is np.ndarray:
        if obj.dtype.isnative or obj.dtype.hasobject or obj.dtype.itemsize == 0:
            return obj
        return _Carried(obj)
    tensors = tensors_of(obj)
    return obj if tensors is None else tensors.portable(obj)


class _Carried:
    """An array that crosses the pipe as its raw bytes, in C or Fortran order, and its dtype."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self) -> tuple[Callable[..., np.ndarray], tuple[bytes, np.dtype, tuple[int, ...], bool]]:
        array = self.array
        fortran = bool(array.flags.f_contiguous and not array.flags.c_contiguous)
        return (_rebuilt, (array.tobytes(order="F" if fortran else "C"), array.dtype, array.shape, fortran))


def _rebuilt(raw: bytes, dtype: np.dtype, shape: tuple[int, ...], fortran: bool) -> np.ndarray:
    flat: np.ndarray = np.frombuffer(bytearray(raw), dtype=dtype)
    return flat.reshape(shape, order="F" if fortran else "C")


def shared_array(obj: Any) -> tuple[np.ndarray, str, str | None] | None:
    """The array over ``obj``'s memory where it goes through shared memory, its
    kind ("numpy", or the name of the framework's tensors it is one of), and the
    tensor dtype its bits stand for (see :meth:`queuetune.frameworks.base.Tensors.as_array`)."""
    if type(obj) is np.ndarray:
        array, kind, tensor_dtype = obj, "numpy", None
    else:
        tensors = tensors_of(obj)
        shared = None if tensors is None else tensors.as_array(obj)
        if tensors is None or shared is None:
            return None
        (array, tensor_dtype), kind = shared, tensors.name
    if array.nbytes < MIN_BYTES or array.dtype.hasobject:
        return None
    return array, kind, tensor_dtype


def order_of(array: np.ndarray) -> tuple[int, ...] | None:
    """The axes of ``array`` from the largest stride to the smallest, or None for C order.

    >>> order_of(np.zeros((2, 3))), order_of(np.zeros((2, 3), order="F"))
    (None, (1, 0))
    >>> order_of(np.zeros((2, 3, 4)).transpose(2, 0, 1))
    (1, 2, 0)
    """
    if array.flags.c_contiguous:
        return None
    strides = array.strides
    order = tuple(sorted(range(array.ndim), key=lambda axis: -abs(strides[axis])))
    return None if order == tuple(range(array.ndim)) else order


def laid_out(buffer: Any, piece: Piece) -> np.ndarray:
    """The array ``piece`` describes over ``buffer``, its axes in memory in the piece's order."""
    if piece.order is None:
        return np.ndarray(piece.shape, piece.dtype, buffer=buffer, offset=piece.offset)
    stored = tuple(piece.shape[axis] for axis in piece.order)
    return np.ndarray(stored, piece.dtype, buffer=buffer, offset=piece.offset).transpose(np.argsort(piece.order))


def copy_into(buffer: Any, piece: Piece, array: np.ndarray) -> Copy:
    """The copy that puts ``array`` where ``piece`` says in ``buffer``, bit for bit."""
    target = laid_out(buffer, piece)
    if array.dtype.fields is None:
        return target, array
    # Raw items: numpy copies a structured dtype field by field, leaving out its padding.
    raw = np.dtype((np.void, array.dtype.itemsize))
    return target.view(raw), array.view(raw)


def replace(batch: Any, change: Any) -> Any:
    """``batch`` with each array, tensor or piece replaced by ``change(it)``, through tuples, lists and dicts."""
    if type(batch) in (tuple, list):
        return type(batch)(replace(item, change) for item in batch)
    if type(batch) is dict:
        return {key: replace(value, change) for key, value in batch.items()}
    return change(batch)


def walk(batch: Any, visit: Any) -> None:
    if isinstance(batch, Piece):
        visit(batch)
    elif type(batch) in (tuple, list):
        for item in batch:
            walk(item, visit)
    elif type(batch) is dict:
        for value in batch.values():
            walk(value, visit)
