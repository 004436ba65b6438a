"""Pure arithmetic: bytes per batch, the memory a loader holds, the article's table."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from ..common.units import (
    check_bytes,
    dtype_itemsize,
    dtype_name,
    parse_shape,
    positive_int,
    product,
    unit_factor,
)
from ..frameworks import ESTIMATED, get

__all__ = [
    "ARTICLE_BATCHES",
    "ARTICLE_SIZES",
    "FRAMEWORKS",
    "BatchSpec",
    "Footprint",
    "FootprintLine",
    "batch_bytes",
    "footprint",
    "label_bytes",
    "label_spec",
    "seed_table",
]

#: Rows and columns of the article's table.
ARTICLE_BATCHES: tuple[int, ...] = tuple(2**k for k in range(5, 17))
ARTICLE_SIZES: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)

Shape = tuple[int, ...]


def _sample_shape(shape: Any) -> Shape:
    """A per-sample shape; ``()`` is allowed for one scalar per sample."""
    if isinstance(shape, (tuple, list)) and len(shape) == 0:
        return ()
    return parse_shape(shape)


def batch_bytes(shape: str | Iterable[int], batch_size: int, dtype: Any = "float32") -> int:
    """Bytes of one batch of ``batch_size`` samples of per-sample ``shape``.

    >>> batch_bytes((256, 256, 3), 64)
    50331648
    >>> batch_bytes("32x32x3", 32, "uint8")
    98304
    """
    dims = _sample_shape(shape)
    size = positive_int(batch_size, "batch size")
    itemsize = dtype_itemsize(dtype)
    return product((*dims, size, itemsize), f"batch of {size} x {dims!r} {dtype_name(dtype)}")


def label_spec(classes: int | str | None = None, dtype: Any = None) -> tuple[Shape, str]:
    """Per-sample shape and dtype of labels.

    ``classes=N`` means one-hot over N classes (float32 unless ``dtype`` says
    otherwise); ``None`` or ``"int"`` means one integer per sample (int64).

    >>> label_spec(10)
    ((10,), 'float32')
    >>> label_spec("int")
    ((), 'int64')
    """
    if classes is None or classes == "int":
        return (), dtype_name("int64" if dtype is None else dtype)
    if isinstance(classes, str):
        raise ValueError(f"labels must be a number of classes or 'int', got {classes!r}")
    count = positive_int(classes, "number of classes")
    return (count,), dtype_name("float32" if dtype is None else dtype)


def label_bytes(batch_size: int, classes: int | str | None = None, dtype: Any = None) -> int:
    """Bytes of the labels of one batch (see :func:`label_spec`).

    >>> label_bytes(64, 10)
    2560
    >>> label_bytes(64)
    512
    """
    shape, name = label_spec(classes, dtype)
    return batch_bytes(shape, batch_size, name)


@dataclass
class BatchSpec:
    """A batch made of named inputs (per-sample shape and dtype) and optional labels.

    >>> spec = BatchSpec({"image": ((256, 256, 3), "float32")}, batch_size=64, labels=label_spec(10))
    >>> spec.nbytes
    50334208
    >>> [line[0] for line in spec.lines()]
    ['image', 'labels']
    """

    inputs: dict[str, tuple[Any, Any]]
    batch_size: int
    labels: tuple[Any, Any] | None = None

    def __post_init__(self) -> None:
        self.batch_size = positive_int(self.batch_size, "batch size")
        if not isinstance(self.inputs, Mapping):
            raise TypeError(f"inputs must be a dict of name -> (shape, dtype), got {type(self.inputs).__name__}")
        if not self.inputs:
            raise ValueError("a batch needs at least one input")
        self.inputs = {self._name(name): self._entry(entry, name) for name, entry in self.inputs.items()}
        if self.labels is not None:
            self.labels = self._entry(self.labels, "labels")
        check_bytes(self.nbytes, "batch")

    @classmethod
    def single(
        cls,
        shape: str | Iterable[int],
        batch_size: int,
        dtype: Any = "float32",
        labels: int | str | None = None,
        label_dtype: Any = None,
    ) -> BatchSpec:
        """One input named ``"input"``; ``labels`` as in :func:`label_spec`, or ``None`` for none.

        >>> BatchSpec.single("256x256x3", 64, labels="int").nbytes
        50332160
        """
        spec_labels = None if labels is None else label_spec(labels, label_dtype)
        return cls({"input": (shape, dtype)}, batch_size=batch_size, labels=spec_labels)

    @staticmethod
    def _name(name: Any) -> str:
        if not isinstance(name, str) or not name:
            raise TypeError(f"input names must be non-empty strings, got {name!r}")
        return name

    @staticmethod
    def _entry(entry: Any, name: str) -> tuple[Shape, str]:
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise TypeError(f"{name} must be a (shape, dtype) pair, got {entry!r}")
        shape, dtype = entry
        return _sample_shape(shape), dtype_name(dtype)

    def lines(self) -> list[tuple[str, Shape, str, int]]:
        """One ``(name, batch shape, dtype, bytes)`` per input, then the labels.

        >>> BatchSpec.single((2, 2), 3).lines()
        [('input', (3, 2, 2), 'float32', 48)]
        """
        entries = list(self.inputs.items())
        if self.labels is not None:
            entries.append(("labels", self.labels))
        return [
            (name, (self.batch_size, *shape), dtype, batch_bytes(shape, self.batch_size, dtype))
            for name, (shape, dtype) in entries
        ]

    @property
    def nbytes(self) -> int:
        """Total bytes of the batch.

        >>> BatchSpec.single((2, 2), 3).nbytes
        48
        """
        return check_bytes(sum(line[3] for line in self.lines()), "batch")

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON.

        >>> BatchSpec.single((2,), 1).to_dict()["nbytes"]
        8
        """
        return {
            "batch_size": self.batch_size,
            "inputs": {name: {"shape": list(shape), "dtype": dtype} for name, (shape, dtype) in self.inputs.items()},
            "labels": None if self.labels is None else {"shape": list(self.labels[0]), "dtype": self.labels[1]},
            "nbytes": self.nbytes,
            "lines": [
                {"name": name, "shape": list(shape), "dtype": dtype, "bytes": nbytes}
                for name, shape, dtype, nbytes in self.lines()
            ],
        }


class FootprintLine(NamedTuple):
    """One line of a footprint: how many batch-sized buffers, and why."""

    label: str
    batches: float
    bytes: int
    explanation: str


@dataclass
class Footprint:
    """The bytes a loader configuration can hold at once.

    ``depth`` is the loader's bound on batches read ahead (produced or being
    produced, not yet consumed); ``lines`` add the batch being consumed, pinned
    copies and transient copies on top.
    """

    framework: str
    batch_bytes: int
    settings: dict[str, Any]
    depth: int
    lines: list[FootprintLine] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        """Sum of the lines' bytes: the batches, and the worker processes' own memory."""
        return sum(line.bytes for line in self.lines)

    @property
    def batches_bytes(self) -> int:
        """The bytes of the batches alone (the lines but the worker processes').

        >>> fp = footprint(2**20, "torch", num_workers=2)
        >>> fp.batches_bytes // 2**20, fp.total_bytes // 2**20  # 5 batches; and 2 workers of 16 MiB
        (5, 37)
        """
        return sum(line.bytes for line in self.lines if line.label != WORKERS_LINE)

    @property
    def total_batches(self) -> float:
        """Sum of the lines' batch counts (batch-sized buffers held at once)."""
        return sum(line.batches for line in self.lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON.

        >>> footprint(100, "none").to_dict()["total_bytes"]
        100
        """
        return {
            "framework": self.framework,
            "settings": dict(self.settings),
            "batch_bytes": self.batch_bytes,
            "depth": self.depth,
            "total_batches": self.total_batches,
            "total_bytes": self.total_bytes,
            "batches_bytes": self.batches_bytes,
            "lines": [line._asdict() for line in self.lines],
        }


#: Framework names :func:`footprint` knows, with the settings each takes.
FRAMEWORKS: dict[str, tuple[str, ...]] = dict(ESTIMATED)


def _transient(value: Any) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"transient_factor must be a number >= 1, got {value!r}")
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"transient_factor must be a finite number >= 1, got {value!r}")
    return Fraction(value)


#: A worker process's own memory (USS) after its start, as a typical figure: a torch
#: DataLoader worker forked from a process that imported torch 2.13 held 14-16 MiB
#: of its own at its first reading (tests/test_real_memory.py's loaders).
WORKER_BASELINE = 16 * 2**20
#: The label of the worker processes' line of a :class:`Footprint`.
WORKERS_LINE = "worker processes"


def footprint(
    spec_or_bytes: BatchSpec | int,
    framework: str = "none",
    *,
    transient_factor: float = 1.0,
    **settings: Any,
) -> Footprint:
    """The bytes a loader configuration can hold: batches read ahead, the one consumed, copies.

    ``framework`` is one of :data:`FRAMEWORKS`, each with the settings it takes
    (defaults are the framework's own; byte settings take ints or strings like
    ``"2GiB"``): ``"keras"`` (a ``PyDataset``), ``"generator"`` (a plain
    generator given to Keras 3, by ``backend``), ``"torch"`` (a ``DataLoader``),
    ``"tfdata"`` (the final ``prefetch`` buffer), ``"ray"`` (Ray Data, one block
    a batch, with its object-store budget) or ``"none"`` (nothing read ahead).
    Each one's rule, and why, is in its module under :mod:`queuetune.frameworks`.

    Every configuration adds the batch being consumed, and
    ``transient_factor - 1`` batches more for the copies that batch
    arithmetic makes (the article suggests about 2).

    >>> fp = footprint(12 * 2**20, "keras", workers=4, max_queue_size=10)
    >>> fp.depth, fp.total_bytes // 2**20
    (11, 144)
    >>> fp = footprint(100, "torch", num_workers=4, pin_memory=True)
    >>> fp.batches_bytes, fp.total_bytes - fp.batches_bytes == 4 * WORKER_BASELINE
    (1700, True)
    >>> fp = footprint(12 * 2**20, "ray", concurrency=2, object_store_bytes="1GiB")
    >>> fp.depth, [line.batches for line in fp.lines], fp.total_bytes // 2**20
    (24, [21, 2, 1, 1], 300)
    """
    nbytes = _batch_nbytes(spec_or_bytes)
    _check_framework(framework)
    factor = _transient(transient_factor)
    _check_settings(framework, settings)
    spec = get(framework)
    resolved, read_ahead, depth = spec.read_ahead(settings, nbytes)
    lines = [FootprintLine(label, batches, nbytes * batches, why) for label, batches, why in read_ahead]
    lines.append(FootprintLine("consumed", 1, nbytes, "the batch the training step holds"))
    if factor > 1:
        lines.append(_transient_line(factor, nbytes))
    rules = spec.rules(resolved)
    if rules.processes and rules.workers and depth > 0:
        lines.append(_workers_line(rules.workers))
    fp = Footprint(framework=framework, batch_bytes=nbytes, settings=resolved, depth=depth, lines=lines)
    check_bytes(fp.total_bytes, f"footprint of {framework}")
    return fp


def _batch_nbytes(spec_or_bytes: BatchSpec | int) -> int:
    if isinstance(spec_or_bytes, BatchSpec):
        nbytes = spec_or_bytes.nbytes
    else:
        nbytes = positive_int(spec_or_bytes, "batch bytes")
    return check_bytes(nbytes, "batch")


def _check_framework(framework: Any) -> None:
    if not isinstance(framework, str):
        raise TypeError(f"framework must be a string, got {framework!r}")
    if framework not in ESTIMATED:
        raise ValueError(f"unknown framework {framework!r}; known frameworks: {', '.join(ESTIMATED)}")


def _check_settings(framework: str, settings: dict[str, Any]) -> None:
    unknown = [name for name in settings if name not in ESTIMATED[framework]]
    if unknown:
        takes = ", ".join(ESTIMATED[framework]) or "no settings"
        raise ValueError(f"setting {unknown[0]!r} does not apply to framework {framework!r} (it takes: {takes})")


def _transient_line(factor: Fraction, nbytes: int) -> FootprintLine:
    """The copies batch arithmetic makes of the consumed batch: ``factor - 1`` batches."""
    extra = factor - 1
    return FootprintLine(
        "transient",
        float(extra),
        round(extra * nbytes),
        f"transient_factor={float(factor):g}: copies made by batch arithmetic on the consumed batch",
    )


def _workers_line(workers: int) -> FootprintLine:
    """The worker processes' own memory, a typical figure each."""
    return FootprintLine(
        WORKERS_LINE,
        0,
        workers * WORKER_BASELINE,
        f"{workers} x {WORKER_BASELINE // 2**20} MiB: each worker process's own memory after its "
        "start (typical; a copy of the Python objects of the dataset it reads comes on top, which "
        "`queuetune run` measures)",
    )


def seed_table(
    batches: Iterable[int] = ARTICLE_BATCHES,
    sizes: Iterable[int] = ARTICLE_SIZES,
    channels: int = 3,
    dtype: Any = "float32",
    unit: str = "GiB",
) -> dict[str, Any]:
    """The article's table: bytes of a ``batch x size x size x channels`` batch, in ``unit``.

    ``values[i][j]`` is for ``batches[i]`` at ``sizes[j] x sizes[j]``; values
    are exact floats (the article prints them rounded to 9 decimals).

    >>> table = seed_table()
    >>> table["values"][0][0], table["values"][5][5], table["values"][-1][-1]
    (0.0003662109375, 12.0, 768.0)
    """
    batch_list = _positive_list(batches, "batch size")
    size_list = _positive_list(sizes, "image size")
    channel_count = positive_int(channels, "channels")
    name = dtype_name(dtype)
    unit_name, factor = unit_factor(unit)
    values = [
        [batch_bytes((size, size, channel_count), batch, name) / factor for size in size_list] for batch in batch_list
    ]
    return {
        "unit": unit_name,
        "dtype": name,
        "channels": channel_count,
        "batches": batch_list,
        "sizes": size_list,
        "values": values,
    }


def _positive_list(values: Iterable[int], what: str) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{what}s must be a sequence of integers, got {values!r}")
    result = [positive_int(value, what) for value in values]
    if not result:
        raise ValueError(f"{what}s must not be empty")
    return result
