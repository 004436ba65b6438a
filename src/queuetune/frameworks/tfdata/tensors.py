"""TensorFlow's tensors as a sample's fingerprint reads them, told without importing TensorFlow."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...record.tensor_kinds import TensorKind


def is_tensor(obj: Any) -> bool:
    """An object of TensorFlow's (a tensor, a variable, a ragged or sparse tensor).

    >>> is_tensor(1.0)
    False
    """
    return type(obj).__module__.startswith("tensorflow")


def sample_array(obj: Any) -> np.ndarray | None:
    """A tensor's values as a numpy array, or None where it has none (a symbolic
    tensor, an object with no ``numpy()`` or one that gives no array)."""
    if not callable(getattr(obj, "numpy", None)):
        return None
    try:
        array = obj.numpy()
    except Exception:  # a symbolic tensor has no value
        return None
    return array if isinstance(array, np.ndarray) else None


#: TensorFlow's tensors as a sample's fingerprint reads them.
SAMPLE_TENSORS = TensorKind("tensorflow", is_tensor, sample_array)
