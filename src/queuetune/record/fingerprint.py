"""Fingerprints: a 64-bit key for a sample's content, so that coverage can count
samples of loaders whose batches carry no index (iterable datasets).

The key is xxHash's XXH3 of the sample's bytes (arrays and tensors: their
dtype, shape and data; containers: their items in order, with their kind), so
equal samples get equal keys in any process of any rank, and different ones
collide with a chance of about n² / 2⁶⁵ among n samples. Each key comes with
its price (:func:`fingerprint_priced`): what computing it costs on a reference
machine, counted from what was hashed, which :class:`KeyBudget` weighs against
the consumer's step.
"""

from __future__ import annotations

import multiprocessing
import statistics
import struct
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import xxhash

from .tensor_kinds import tensor_kind

_INT64 = (-(2**63), 2**63 - 1)

#: The price of a fingerprint, in seconds of the reference machine (the 2-core
#: Intel Xeon of ``benchmarks/fingerprint_cost.py``, idle; docs/pytorch.md has its
#: table): each array or tensor (its conversion, header and call), each other
#: value (a number, a string, a container's own header), and each byte hashed
#: (0.04 ms a MiB). Summed over a sample they come within 1 to 1.8 times of
#: what that machine measured for every sample of its table, never under it.
KEY_ARRAY_SECONDS = 3e-6
KEY_VALUE_SECONDS = 1e-6
KEY_BYTE_SECONDS = 0.04e-3 / 2**20


def fingerprint(sample: Any) -> int:
    """A signed 64-bit key of ``sample``'s content.

    >>> import numpy as np
    >>> fingerprint(np.arange(4)) == fingerprint(np.arange(4)), fingerprint((1, "a")) == fingerprint((1, "b"))
    (True, False)
    """
    return fingerprint_priced(sample)[0]


def fingerprint_priced(sample: Any) -> tuple[int, float]:
    """:func:`fingerprint` of ``sample``, and its price: the seconds it takes on
    the reference machine, from the arrays, values and bytes it hashed (see
    ``KEY_ARRAY_SECONDS``). The price depends on the sample alone, never on how
    busy this machine is.

    >>> import numpy as np
    >>> key, price = fingerprint_priced(np.zeros(2**20, dtype=np.uint8))
    >>> key == fingerprint(np.zeros(2**20, dtype=np.uint8)), round(price * 1e6)  # 3 µs + 40 µs a MiB
    (True, 43)
    """
    hasher = _Priced()
    _feed(hasher, sample)
    return hasher.hasher.intdigest() + _INT64[0], hasher.seconds


class _Priced:
    """An XXH3 hasher that adds up the price of the bytes it is fed; :func:`_feed`
    adds that of each value."""

    __slots__ = ("hasher", "seconds")

    def __init__(self) -> None:
        self.hasher = xxhash.xxh3_64()
        self.seconds = 0.0

    def update(self, data: Any) -> None:
        self.hasher.update(data)
        self.seconds += KEY_BYTE_SECONDS * (data.nbytes if isinstance(data, memoryview) else len(data))


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
        return self.priced(sample)[0]

    def priced(self, sample: Any) -> tuple[int, float]:
        """The sample's key and the price of fingerprinting it (see
        :func:`fingerprint_priced`; 0 for a user's integer key).

        >>> SampleKey(lambda s: s["id"]).priced({"id": 7})
        (7, 0.0)
        """
        if self.key is None:
            return fingerprint_priced(sample)
        value = self.key(sample)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            number = int(value)
            if _INT64[0] <= number <= _INT64[1]:
                return number, 0.0
        return fingerprint_priced(value)


class _Local:
    def __init__(self, value: float) -> None:
        self.value = value


#: Fingerprints stop where a batch's would cost more than this share of the
#: consumer's recent step (their price, median of the last ``BUDGET_BATCHES``
#: batches, judged once ``BUDGET_TRIAL`` samples were keyed).
BUDGET_SHARE = 0.02
BUDGET_TRIAL = 32
BUDGET_BATCHES = 5


class KeyBudget:
    """Decides, batch by batch, whether fingerprints still cost under
    ``BUDGET_SHARE`` of the consumer's step. A user's key is never stopped.

    A batch's cost is its fingerprints' price (:func:`fingerprint_priced`: what
    they take on a reference machine, from the arrays, values and bytes hashed),
    not a time measured here: measured CPU time grows with the machine's load
    (other processes share the core's caches and memory bandwidth, and a
    worker's keys interleave with its other work), while the step it is weighed
    against does not shrink. In a worker of a 2-core machine, the CPU time of a
    batch of 8 small tensors was a median of about 80 µs nearly idle, 107 µs
    beside other jobs and 149 µs with the cores kept busy streaming memory, each
    worker's first batch 330 to 450 µs, against the 103 µs that 2 % of a 5 ms
    step allows: keys were cut after 5 batches in 1 of 5 passes idle, and in 14
    to 19 of 20 busy. That batch's price is 24 µs on any machine, and the step,
    a wall time, only grows with load, so load never stops keys that an idle
    machine keeps. On a machine k times slower than the reference, the real
    share is about k times ``BUDGET_SHARE``.

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

    def batch_keyed(self, price: float, samples: int) -> bool:
        """A batch's ``samples`` were keyed at ``price`` (seconds on the reference
        machine, see :func:`fingerprint_priced`): may the next be keyed?"""
        self.costs.append(price)
        self.samples += samples
        if self.keyer.key is not None or self.samples < BUDGET_TRIAL or len(self.costs) < BUDGET_BATCHES:
            return True
        self.spent = statistics.median(self.costs) > BUDGET_SHARE * self.keyer.step_seconds() > 0
        return not self.spent

    def row_keys(self, batch: Any) -> tuple[int, ...] | None:
        """:func:`row_keys` of ``batch``, their price counted against the budget;
        None once it is spent."""
        if self.spent:
            return None
        keys, price = [], 0.0
        for row in _rows(batch):
            key, cost = self.keyer.priced(row)
            keys.append(key)
            price += cost
        self.batch_keyed(price, len(keys))
        return tuple(keys)


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
    """An array, or a framework's tensor (see :mod:`.tensor_kinds`), as a numpy array (a view where it can be)."""
    if isinstance(value, np.ndarray):
        return value
    kind = tensor_kind(value)
    return None if kind is None else kind.array(value)


def _feed(hasher: _Priced, value: Any) -> None:
    if isinstance(value, np.ndarray):
        hasher.seconds += KEY_ARRAY_SECONDS
        _array(hasher, value)
        return
    kind = tensor_kind(value)
    if kind is not None:
        array = kind.array(value)
        if array is None:  # sparse, quantized, a dtype numpy lacks, or symbolic: by its text
            _feed(hasher, repr(value))
        else:
            hasher.seconds += KEY_ARRAY_SECONDS
            _array(hasher, array)
        return
    hasher.seconds += KEY_VALUE_SECONDS
    if isinstance(value, (bytes, bytearray, memoryview)):
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


def _array(hasher: _Priced, array: np.ndarray) -> None:
    header = f"a{array.dtype.str}{array.shape}".encode()
    hasher.update(struct.pack("<q", len(header)) + header)
    if array.dtype.hasobject:
        for item in array.ravel():
            _feed(hasher, item)
    else:
        hasher.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
