"""The kinds of tensor a sample's fingerprint reads as arrays, each a framework's:
the framework registry adds them (:mod:`queuetune.frameworks`), so that the
record layer never names a framework."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TensorKind:
    """One framework's tensors as a fingerprint reads them: ``recognises`` tells
    one (never by importing the framework), ``array`` gives its values as a numpy
    array, or None where it has none (sparse, symbolic, a dtype numpy lacks).

    >>> kind = TensorKind("ranges", lambda v: isinstance(v, range), lambda v: np.asarray(v))
    >>> kind.recognises(range(3)), kind.array(range(3)).tolist()
    (True, [0, 1, 2])
    """

    name: str
    recognises: Callable[[Any], bool]
    array: Callable[[Any], np.ndarray | None]


#: The kinds added, by name, in the order they were added.
TENSOR_KINDS: dict[str, TensorKind] = {}


def add_tensor_kind(kind: TensorKind) -> None:
    """Let fingerprints read ``kind``'s tensors (once per name; again replaces it)."""
    TENSOR_KINDS[kind.name] = kind


def tensor_kind(value: Any) -> TensorKind | None:
    """The kind of tensor ``value`` is, or None (a numpy array, anything else).

    >>> tensor_kind([1.0]) is None
    True
    """
    for kind in TENSOR_KINDS.values():
        if kind.recognises(value):
            return kind
    return None
