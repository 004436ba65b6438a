"""Fingerprints: a 64-bit key for a sample's content, so that coverage can count
samples of loaders whose batches carry no index (iterable datasets).

The key is xxHash's XXH3 of the sample's bytes (arrays and tensors: their
dtype, shape and data; containers: their items in order, with their kind), so
equal samples get equal keys in any process of any rank, and different ones
collide with a chance of about n² / 2⁶⁵ among n samples.
"""

from __future__ import annotations

import multiprocessing
import statistics
import struct
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import xxhash

_INT64 = (-(2**63), 2**63 - 1)


def fingerprint(sample: Any) -> int:
    """A signed 64-bit key of ``sample``'s content.

    >>> import numpy as np
    >>> fingerprint(np.arange(4)) == fingerprint(np.arange(4)), fingerprint((1, "a")) == fingerprint((1, "b"))
    (True, False)
    """
    hasher = xxhash.xxh3_64()
    _feed(hasher, sample)
    return hasher.intdigest() + _INT64[0]


class SampleKey:
    """Keys one sample: with ``key``, its result made a signed 64-bit integer (the
    same in every process: an integer as it is, anything else fingerprinted);
    without, :func:`fingerprint` of the sample.

    >>> SampleKey(lambda s: s["id"])({"id": 7})
    7
    >>> SampleKey()(b"x") == fingerprint(b"x")
    True
    >>> import copy
    >>> shared = SampleKey(shared=True); shared.note_step(0.5)
    >>> copy.deepcopy(shared).step_seconds()
    0.5
    """

    def __init__(self, key: Callable[[Any], Any] | None = None, shared: bool = False) -> None:
        if key is not None and not callable(key):
            raise TypeError(f"key must be a function of one sample, got {type(key).__name__}")
        self.key = key
        # The consumer's recent step in seconds (0: not known yet), in shared
        # memory when worker processes read it.
        self._step: Any = multiprocessing.RawValue("d", 0.0) if shared else _Local(0.0)

    def __getstate__(self) -> dict[str, Any]:
        # Shared memory crosses only to a process being started (a loader's
        # worker); any other copy (deepcopy, pickle) takes the value as it is.
        state = dict(self.__dict__)
        if not isinstance(self._step, _Local) and multiprocessing.context.get_spawning_popen() is None:
            state["_step"] = _Local(float(self._step.value))
        return state

    def note_step(self, seconds: float) -> None:
        """The consumer took ``seconds`` for a step: fold it into the recent step."""
        last = self._step.value
        self._step.value = seconds if last == 0.0 else 0.8 * last + 0.2 * seconds

    def step_seconds(self) -> float:
        """The consumer's recent step in seconds, 0 while not known."""
        return float(self._step.value)

    def __call__(self, sample: Any) -> int:
        if self.key is None:
            return fingerprint(sample)
        value = self.key(sample)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            number = int(value)
            if _INT64[0] <= number <= _INT64[1]:
                return number
        return fingerprint(value)


class _Local:
    def __init__(self, value: float) -> None:
        self.value = value


#: Fingerprints stop where a batch's would cost more than this share of the
#: consumer's recent step (median of the last ``BUDGET_BATCHES`` batches, in CPU
#: time, judged once ``BUDGET_TRIAL`` samples were keyed).
BUDGET_SHARE = 0.02
BUDGET_TRIAL = 32
BUDGET_BATCHES = 5


class KeyBudget:
    """Decides, batch by batch, whether fingerprints still cost under
    ``BUDGET_SHARE`` of the consumer's step. A user's key is never stopped.

    >>> keyer = SampleKey()
    >>> keyer.note_step(0.010)
    >>> budget = KeyBudget(keyer)
    >>> [budget.batch_keyed(0.001, 8) for _ in range(5)]  # 10 % of the step
    [True, True, True, True, False]
    """

    def __init__(self, keyer: SampleKey) -> None:
        self.keyer = keyer
        self.costs: deque[float] = deque(maxlen=BUDGET_BATCHES)
        self.samples = 0
        #: The budget said no: no more batches are to be keyed.
        self.spent = False

    def batch_keyed(self, cpu_seconds: float, samples: int) -> bool:
        """A batch's ``samples`` took ``cpu_seconds`` to key: may the next be keyed?"""
        self.costs.append(cpu_seconds)
        self.samples += samples
        if self.keyer.key is not None or self.samples < BUDGET_TRIAL or len(self.costs) < BUDGET_BATCHES:
            return True
        self.spent = statistics.median(self.costs) > BUDGET_SHARE * self.keyer.step_seconds() > 0
        return not self.spent

    def row_keys(self, batch: Any) -> tuple[int, ...] | None:
        """:func:`row_keys` of ``batch``, timed in CPU time (being descheduled
        does not count) against the budget; None once it is spent."""
        if self.spent:
            return None
        began = time.thread_time()
        keys = row_keys(batch, self.keyer)
        self.batch_keyed(time.thread_time() - began, len(keys))
        return keys


def row_keys(batch: Any, keyer: SampleKey) -> tuple[int, ...]:
    """The keys of a batch's samples: its rows along the first axis (an array or
    tensor; a tuple, list or dict of them with the same first length, row by
    row); anything else is one sample.

    >>> import numpy as np
    >>> keys = row_keys((np.zeros((3, 2)), np.arange(3)), SampleKey())
    >>> len(keys), len(set(keys))
    (3, 3)
    """
    return tuple(keyer(row) for row in _rows(batch))


def _rows(batch: Any) -> list[Any]:
    whole = _as_array(batch)
    if whole is not None and whole.ndim > 0:
        return list(whole)
    if isinstance(batch, (tuple, list)) and batch:
        parts = [_as_array(part) for part in batch]
        lengths = {None if p is None or p.ndim == 0 else len(p) for p in parts}
        if len(lengths) == 1 and None not in lengths:
            return list(zip(*parts))
    if isinstance(batch, Mapping) and batch:
        columns = {k: _as_array(v) for k, v in batch.items()}
        lengths = {None if c is None or c.ndim == 0 else len(c) for c in columns.values()}
        if len(lengths) == 1 and None not in lengths:
            (n,) = lengths
            return [{k: c[i] for k, c in columns.items()} for i in range(n or 0)]  # type: ignore[index]
    return [batch]


def _as_array(value: Any) -> np.ndarray | None:
    """An array, or a torch or TensorFlow tensor, as a numpy array (a view where it can be)."""
    if isinstance(value, np.ndarray):
        return value
    if _is_tensor(value):
        try:
            array: np.ndarray = value.detach().cpu().numpy()
            return array
        except (RuntimeError, TypeError):
            return None
    if type(value).__module__.startswith("tensorflow") and callable(getattr(value, "numpy", None)):
        try:
            array = value.numpy()
        except Exception:  # a symbolic tensor has no value
            return None
        return array if isinstance(array, np.ndarray) else None
    return None


def _feed(hasher: Any, value: Any) -> None:
    if isinstance(value, np.ndarray):
        _array(hasher, value)
    elif _is_tensor(value) or type(value).__module__.startswith("tensorflow"):
        array = _as_array(value)
        if array is None:  # sparse, quantized, a dtype numpy lacks, or symbolic: by its text
            _feed(hasher, repr(value))
        else:
            _array(hasher, array)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        hasher.update(b"b" + struct.pack("<q", len(value)))
        hasher.update(value)
    elif isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        hasher.update(b"s" + struct.pack("<q", len(data)))
        hasher.update(data)
    elif isinstance(value, Mapping):
        hasher.update(b"m" + struct.pack("<q", len(value)))
        for k in sorted(value, key=repr):
            _feed(hasher, k)
            _feed(hasher, value[k])
    elif isinstance(value, (list, tuple)):
        hasher.update(b"l" + struct.pack("<q", len(value)))
        for item in value:
            _feed(hasher, item)
    else:
        text = repr(value).encode()
        hasher.update(b"r" + struct.pack("<q", len(text)))
        hasher.update(text)


def _array(hasher: Any, array: np.ndarray) -> None:
    header = f"a{array.dtype.str}{array.shape}".encode()
    hasher.update(struct.pack("<q", len(header)) + header)
    if array.dtype.hasobject:
        for item in array.ravel():
            _feed(hasher, item)
    else:
        hasher.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


def _is_tensor(value: Any) -> bool:
    kind = type(value)
    return kind.__module__.startswith("torch") and hasattr(value, "detach") and hasattr(value, "numpy")
