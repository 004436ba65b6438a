"""torch's tensors as numpy arrays and back, without a copy, and torch's own
collation: what the Prefetcher needs to move tensors through shared memory.
torch is imported only when a tensor is at hand."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...record.tensor_kinds import TensorKind
from ..base import Tensors


def is_tensor(obj: Any) -> bool:
    """A torch tensor (or another object of torch's), told without importing torch.

    >>> is_tensor(1.0)
    False
    """
    return type(obj).__module__.startswith("torch")


def sample_array(obj: Any) -> Any:
    """A tensor's values as a numpy array, for its fingerprint: copied off its
    device and out of autograd where it must be; None where it has none (a
    dtype numpy lacks, a sparse or quantized tensor).

    >>> import torch
    >>> sample_array(torch.ones(2, requires_grad=True)).tolist()
    [1.0, 1.0]
    """
    try:
        return obj.detach().cpu().numpy()
    except (RuntimeError, TypeError):
        return None


def _sample_tensor(obj: Any) -> bool:
    return is_tensor(obj) and hasattr(obj, "detach") and hasattr(obj, "numpy")


#: torch's tensors as a sample's fingerprint reads them.
SAMPLE_TENSORS = TensorKind("torch", _sample_tensor, sample_array)


def collate(items: list[Any], allocate: Callable[[tuple[int, ...], Any], Any] | None = None) -> Any:
    """torch's own ``default_collate`` of ``items`` (some of them tensors). Tensors
    of one shape and dtype are stacked into ``allocate(shape, numpy_dtype)`` when
    it gives a numpy array (shared memory in a worker process, see :mod:`queuetune.prefetch.shm`).

    >>> collate([1, 2]).tolist()
    [1, 2]
    """
    if allocate is not None:
        stacked = _stack_into(items, allocate)
        if stacked is not None:
            return stacked
    from torch.utils.data import default_collate

    return default_collate(items)


def _stack_into(items: list[Any], allocate: Callable[[tuple[int, ...], Any], Any]) -> Any:
    import torch

    first = items[0]
    # A plain CPU tensor, as every other must match.
    shared = as_array(first)
    if shared is None:
        return None
    if any(type(item) is not torch.Tensor or item.shape != first.shape or item.dtype != first.dtype for item in items):
        return None
    array, dtype = shared
    buffer = allocate((len(items), *first.shape), array.dtype)
    if buffer is None:
        return None
    return torch.stack(items, out=from_array(buffer, dtype))


def as_array(obj: Any) -> tuple[Any, str | None] | None:
    """A numpy array over a plain CPU tensor's memory (no copy), and None or,
    for a dtype numpy lacks (bfloat16, float8 types, complex32), the name of the
    tensor's dtype: the array then holds its bits as integers of the same size,
    for :func:`from_array` to view back. None for anything else (another type,
    a tensor that needs grad, a conjugate view).

    >>> import torch
    >>> as_array([1]) is None
    True
    >>> array, dtype = as_array(torch.ones(2, dtype=torch.bfloat16)); array.dtype, dtype
    (dtype('int16'), 'bfloat16')
    """
    if not is_tensor(obj):
        return None
    import torch

    plain = type(obj) is torch.Tensor and obj.device.type == "cpu" and obj.layout == torch.strided
    if not plain or obj.requires_grad or obj.is_quantized:
        return None
    try:
        return obj.numpy(), None
    except TypeError:  # a dtype numpy lacks
        return _as_bits(obj)
    except RuntimeError:  # a conjugate or negative view
        return None


def portable(obj: Any) -> Any:
    """``obj``, or where it is a conjugate or negative view (``z.conj()``,
    ``z.conj().imag``), the same values in a tensor of their own: torch's
    pickling drops those bits, so that the view would reach another process
    with the values it views, not the ones it stands for.

    >>> import torch
    >>> z = torch.tensor([1 + 2j])
    >>> portable(z.conj()).is_conj(), portable(z.conj()).tolist()
    (False, [(1-2j)])
    >>> portable(z) is z
    True
    """
    if not is_tensor(obj):
        return obj
    import torch

    if isinstance(obj, torch.Tensor) and (obj.is_conj() or obj.is_neg()):
        return obj.resolve_conj().resolve_neg()
    return obj


# The torch integer type that holds the bits of a dtype numpy lacks, by item size.
_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _as_bits(tensor: Any) -> tuple[Any, str] | None:
    """A numpy array of integers over ``tensor``'s bits, and the name of its dtype."""
    import torch

    bits = _BITS.get(tensor.element_size())
    if bits is None:
        return None
    try:
        return tensor.view(getattr(torch, bits)).numpy(), str(tensor.dtype).removeprefix("torch.")
    except (TypeError, RuntimeError):
        return None


def owns_memory(obj: Any) -> bool:
    """Whether ``obj`` is a plain CPU tensor whose memory no other tensor, array
    or buffer can reach: not a view, its storage allocated by torch for it alone
    (a storage over a numpy array or a buffer cannot be resized).

    >>> import torch
    >>> base = torch.zeros(4)
    >>> owns_memory(torch.zeros(4)), owns_memory(base[1:]), owns_memory(torch.from_numpy(base.numpy()))
    (True, False, False)
    """
    if not is_tensor(obj):
        return False
    import torch

    if type(obj) is not torch.Tensor or obj.device.type != "cpu" or obj._base is not None:
        return False
    storage = obj.untyped_storage()
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    if use_count is None or not storage.resizable():
        return False
    # Held by this tensor and by the ``storage`` object made just above: no other tensor shares it.
    return bool(use_count(storage._cdata) <= 2)


def from_array(array: Any, dtype: str | None = None) -> Any:
    """The tensor over a numpy array's memory (no copy), its bits viewed as torch's
    ``dtype`` where given: what :func:`as_array` undoes.

    >>> import numpy as np
    >>> from_array(np.zeros(2, dtype=np.float32)).dtype, from_array(np.zeros(2, dtype=np.int16), "bfloat16").dtype
    (torch.float32, torch.bfloat16)
    """
    import torch

    tensor = torch.from_numpy(array)
    return tensor if dtype is None else tensor.view(getattr(torch, dtype))


def in_worker_process() -> None:
    """What a worker process does first when torch is loaded, as torch's own
    DataLoader workers do: one intra-op thread, since a forked child that uses the
    thread pool its parent already started hangs."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


@dataclass(frozen=True)
class TorchTensors(Tensors):
    """torch's tensors, through the functions above.

    >>> TENSORS.recognises(1.0), TENSORS.name
    (False, 'torch')
    """

    name: str = "torch"

    def recognises(self, obj: Any) -> bool:
        return is_tensor(obj)

    def as_array(self, obj: Any) -> tuple[Any, str | None] | None:
        return as_array(obj)

    def from_array(self, array: Any, dtype: str | None = None) -> Any:
        return from_array(array, dtype)

    def owns_memory(self, obj: Any) -> bool:
        return owns_memory(obj)

    def portable(self, obj: Any) -> Any:
        return portable(obj)

    def collate(self, items: list[Any], allocate: Callable[[tuple[int, ...], Any], Any] | None = None) -> Any:
        return collate(items, allocate)

    def in_worker_process(self) -> None:
        in_worker_process()


TENSORS = TorchTensors()
