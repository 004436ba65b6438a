"""Pure arithmetic: bytes per batch, the memory a loader holds, the article's table.

No framework is imported here; the loader rules come from reading each
framework's source (see ``design.md``) and are written out as arithmetic.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from queuetune.units import (
    check_bytes,
    dtype_itemsize,
    dtype_name,
    format_bytes,
    nonnegative_int,
    parse_bytes,
    parse_shape,
    positive_int,
    product,
    unit_factor,
)

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
    "ray_object_store_bytes",
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
        """Sum of the lines' bytes."""
        return sum(line.bytes for line in self.lines)

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
            "lines": [line._asdict() for line in self.lines],
        }


# A read-ahead rule takes the settings given and returns the resolved settings and (label, batches, why)
# lines; the first line's batches are the depth unless the rule gives the depth as a third element.
_RuleResult = tuple[dict[str, Any], list[tuple[str, int, str]]] | tuple[dict[str, Any], list[tuple[str, int, str]], int]
_Rule = Callable[[dict[str, Any]], _RuleResult]


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be True or False, got {value!r}")
    return value


def _keras(settings: dict[str, Any]) -> _RuleResult:
    workers = nonnegative_int(settings.get("workers", 1), "workers")
    multiprocessing = _flag(settings.get("use_multiprocessing", False), "use_multiprocessing")
    queue_size = positive_int(settings.get("max_queue_size", 10), "max_queue_size")
    resolved = {"workers": workers, "use_multiprocessing": multiprocessing, "max_queue_size": queue_size}
    if workers > 1 or (workers > 0 and multiprocessing):
        why = f"max_queue_size + 1: queue of {queue_size} futures plus the one the feeder thread waits to put"
        return resolved, [("queued", queue_size + 1, why)]
    why = f"synchronous: workers={workers}" + ("" if multiprocessing else " without multiprocessing") + ", no queue"
    return resolved, [("queued", 0, why)]


def _generator(settings: dict[str, Any]) -> _RuleResult:
    backend = settings.get("backend", "tensorflow")
    if backend not in ("tensorflow", "torch", "jax"):
        raise ValueError(f"unknown backend {backend!r}; known backends: tensorflow, torch, jax")
    if backend == "tensorflow":
        buffer = nonnegative_int(settings.get("buffer", 1), "buffer")
        why = f"tf.data prefetch(AUTOTUNE), assumed to hold {buffer} batch(es); AUTOTUNE can grow it"
        return {"backend": backend, "buffer": buffer}, [("prefetched", buffer, why)]
    if "buffer" in settings:
        raise ValueError(f"buffer only applies to the tensorflow backend, not {backend!r}")
    if backend == "torch":
        why = "torch backend: DataLoader without workers, nothing read ahead"
        return {"backend": backend}, [("prefetched", 0, why)]
    return {"backend": backend}, [("prefetched", 1, "jax backend: assumed one batch ahead on accelerators")]


def _torch(settings: dict[str, Any]) -> _RuleResult:
    workers = nonnegative_int(settings.get("num_workers", 0), "num_workers")
    prefetch_factor = settings.get("prefetch_factor")
    pin_memory = _flag(settings.get("pin_memory", False), "pin_memory")
    if workers == 0:
        if prefetch_factor is not None:
            raise ValueError("prefetch_factor can only be set with num_workers > 0 (torch raises the same error)")
        resolved = {"num_workers": 0, "prefetch_factor": None, "pin_memory": pin_memory}
        lines = [("prefetched", 0, "num_workers=0: batches are loaded in the main process, nothing read ahead")]
        if pin_memory:
            lines.append(("pinned copies", 0, "pinned in the main process as each batch is consumed"))
        return resolved, lines
    factor = 2 if prefetch_factor is None else positive_int(prefetch_factor, "prefetch_factor")
    depth = factor * workers
    resolved = {"num_workers": workers, "prefetch_factor": factor, "pin_memory": pin_memory}
    lines = [("prefetched", depth, f"prefetch_factor x num_workers = {factor} x {workers}")]
    if pin_memory:
        lines.append(("pinned copies", depth, "pin_memory: a page-locked copy of each batch read ahead"))
    return resolved, lines


def _tfdata(settings: dict[str, Any]) -> _RuleResult:
    buffer = nonnegative_int(settings.get("buffer", 1), "buffer")
    why = f"prefetch buffer of {buffer} batch(es); with AUTOTUNE pass the size you expect"
    return {"buffer": buffer}, [("prefetched", buffer, why)]


# Ray 2.60 constants, read from its source (paths under site-packages/ray/).
#: Share of a node's available memory its object store takes by default
#: (_private/ray_constants.py:110-113, DEFAULT_OBJECT_STORE_MEMORY_PROPORTION).
RAY_OBJECT_STORE_PROPORTION = Fraction(3, 10)
#: Cap on a node's default object store, 200 GB (_private/ray_constants.py:106-108).
RAY_OBJECT_STORE_CAP = 200 * 10**9
#: Share of the cluster's object store the streaming executor allows itself
#: (data/_internal/execution/resource_manager.py:108-110, 0.5 with operator
#: reservation, which is on by default: data/context.py:330-332).
RAY_DATA_BUDGET_FRACTION = Fraction(1, 2)


def _local_cpus() -> int:
    """CPUs this process may run on: what a local ``ray.init()`` gives the cluster."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def _ray_bytes(value: Any, what: str) -> int:
    try:
        return parse_bytes(value)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"{what}: {exc}") from None


def ray_object_store_bytes(ram_bytes: int | str) -> int:
    """The object store Ray 2.60 gives a node by default, from the node's memory.

    30% of ``ram_bytes`` (Ray takes the memory *available* when the node
    starts, total minus used), capped at 200 GB. On Linux Ray also caps it at
    95% of the free space in ``/dev/shm`` (never below 10 GB), which is not
    known here; pass ``object_store_bytes`` to :func:`footprint` when that cap
    applies.

    >>> ray_object_store_bytes("16GiB")
    5153960755
    >>> ray_object_store_bytes("2TB")
    200000000000
    """
    ram = _ray_bytes(ram_bytes, "ram_bytes")
    return min(int(ram * RAY_OBJECT_STORE_PROPORTION), RAY_OBJECT_STORE_CAP)


def _ray(settings: dict[str, Any]) -> _RuleResult:
    """Ray Data: ``map_batches`` tasks into the object store, read by ``iter_batches``.

    Facts from Ray 2.60's source (paths under ``site-packages/ray/``):

    - A node's default object store is 30% of its available memory, capped at
      200 GB and on Linux at 95% of ``/dev/shm`` (``_private/utils.py:595-650``,
      ``_private/ray_constants.py:106-113``).
    - The streaming executor's object-store budget is
      ``min(resource_limits.object_store_memory, fraction x cluster object
      store)``, fraction 0.5 (``override_object_store_memory_limit_fraction``
      replaces it; 0.25 without operator reservation)
      (``data/_internal/execution/resource_manager.py:108-115,162-169,280-310``).
    - Every live block an operator produced counts against the budget until
      its last reference goes, including blocks the iterator has fetched
      (``block_ref_counter.py``, ``resource_manager.py:189-200``). A task is
      launched while the remaining budget covers one task's output
      (``resource_manager.py:865-871``), so the tasks running can overshoot it
      by their blocks.
    - Ray's downstream-capacity backpressure (ratio 2.0, ``data/context.py:443``)
      stops an operator once it uses more than half its allocation and its
      output is more than 3x the iterator's prefetched bytes
      (``backpressure_policy/downstream_capacity_backpressure_policy.py:89,203-217``):
      a one-stage pipeline usually settles near half the budget; the budget is
      the bound.
    - ``map_batches`` without ``concurrency`` runs an uncapped task pool
      (``data/_internal/util.py:648-697``), each task taking 1 CPU
      (``operators/map_operator.py:943-948``): one block built per CPU.
    - ``iter_batches(prefetch_batches=N)`` fetches N batches of blocks ahead
      and formats them in min(N, 4) threads
      (``_internal/block_batching/iter_batches.py:31,78,212-220,454-530``).
    """
    prefetch = nonnegative_int(settings.get("prefetch_batches", 1), "prefetch_batches")
    concurrency = settings.get("concurrency")
    concurrency = _local_cpus() if concurrency is None else positive_int(concurrency, "concurrency")
    given = [
        name for name in ("object_store_memory", "object_store_bytes", "ram_bytes") if settings.get(name) is not None
    ]
    if len(given) > 1:
        raise ValueError(f"give one of object_store_memory, object_store_bytes, ram_bytes, not {' and '.join(given)}")
    if not given:
        raise ValueError(
            "ray needs the object store: object_store_memory (Ray Data's budget), "
            "object_store_bytes (the cluster's object store) or ram_bytes (one node's memory)"
        )
    store = ram = None
    if given[0] == "object_store_memory":
        budget = _ray_bytes(settings["object_store_memory"], "object_store_memory")
    else:
        if given[0] == "ram_bytes":
            ram = _ray_bytes(settings["ram_bytes"], "ram_bytes")
            store = ray_object_store_bytes(ram)
        else:
            store = _ray_bytes(settings["object_store_bytes"], "object_store_bytes")
        budget = int(store * RAY_DATA_BUDGET_FRACTION)
    batch = settings["_batch_bytes"]
    if budget < batch:
        raise ValueError(
            f"Ray Data's object store budget ({format_bytes(budget)}) is smaller than one batch "
            f"({format_bytes(batch)}): Ray then still builds blocks a task at a time to make progress, "
            "so the budget no longer bounds the read-ahead; give a budget of at least one batch"
        )
    held = budget // batch
    resolved = {
        "prefetch_batches": prefetch,
        "concurrency": concurrency,
        "object_store_memory": budget,
        "object_store_bytes": store,
        "ram_bytes": ram,
    }
    lines = [
        (
            "held ahead",
            held,
            f"budget // batch = {format_bytes(budget)} // {format_bytes(batch)}: blocks kept in the object store "
            f"(fetched ones included); one stage usually stops at half, {budget // 2 // batch} "
            "(downstream-capacity backpressure)",
        ),
        ("being built", concurrency, f"{concurrency} map_batches task(s) at once, each building a block"),
        ("prefetched", prefetch, f"prefetch_batches={prefetch}: batches iter_batches formats ahead in the driver"),
    ]
    return resolved, lines, held + concurrency + prefetch


def _none(settings: dict[str, Any]) -> _RuleResult:
    return {}, []


_SETTINGS: dict[str, tuple[str, ...]] = {
    "keras": ("workers", "use_multiprocessing", "max_queue_size"),
    "generator": ("backend", "buffer"),
    "torch": ("num_workers", "prefetch_factor", "pin_memory"),
    "tfdata": ("buffer",),
    "ray": ("prefetch_batches", "concurrency", "object_store_memory", "object_store_bytes", "ram_bytes"),
    "none": (),
}
_RULES: dict[str, _Rule] = {
    "keras": _keras,
    "generator": _generator,
    "torch": _torch,
    "tfdata": _tfdata,
    "ray": _ray,
    "none": _none,
}

#: Framework names :func:`footprint` knows, with the settings each takes.
FRAMEWORKS: dict[str, tuple[str, ...]] = dict(_SETTINGS)


def _transient(value: Any) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"transient_factor must be a number >= 1, got {value!r}")
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"transient_factor must be a finite number >= 1, got {value!r}")
    return Fraction(value)


def footprint(
    spec_or_bytes: BatchSpec | int,
    framework: str = "none",
    *,
    transient_factor: float = 1.0,
    **settings: Any,
) -> Footprint:
    """The bytes a loader configuration can hold: batches read ahead, the one consumed, copies.

    Frameworks and their settings (defaults are the framework's own):

    - ``"keras"`` (a Keras 3 ``PyDataset``): ``workers=1``,
      ``use_multiprocessing=False``, ``max_queue_size=10``. With
      ``workers > 1``, or ``workers > 0`` and multiprocessing, up to
      ``max_queue_size + 1`` batches are read ahead; otherwise none.
    - ``"generator"`` (a plain generator given to Keras 3): ``backend`` is
      ``"tensorflow"`` (default; ``tf.data`` ``prefetch(AUTOTUNE)``, counted as
      ``buffer=1`` batch, an assumption: AUTOTUNE can grow it), ``"torch"``
      (nothing read ahead) or ``"jax"`` (assumed one batch ahead).
    - ``"torch"`` (a ``DataLoader``): ``num_workers=0``, ``prefetch_factor``
      (2 when ``num_workers > 0``; setting it with ``num_workers=0`` is an
      error, as in torch), ``pin_memory=False``. ``prefetch_factor x
      num_workers`` batches are read ahead, and as many pinned copies with
      ``pin_memory``.
    - ``"tfdata"``: ``buffer=1``, the batches of the final ``prefetch``.
    - ``"ray"`` (Ray Data, ``map_batches`` read by ``iter_batches``; one
      block is one batch): ``prefetch_batches=1``, ``concurrency`` (the
      ``map_batches`` tasks at once; Ray's default is one per CPU, counted as
      this machine's CPUs), and the object store budget, one of
      ``object_store_memory`` (Ray Data's budget in bytes),
      ``object_store_bytes`` (the cluster's object store; the budget is half)
      or ``ram_bytes`` (one node's memory; its default store is 30%, capped
      at 200 GB). Byte settings take ints or strings like ``"2GiB"``. Up to
      ``budget // batch`` blocks held in the object store, ``concurrency``
      being built and ``prefetch_batches`` formatted in the driver; ``depth``
      is their sum. A budget smaller than one batch is a ``ValueError``: Ray
      then no longer bounds the read-ahead by it.
    - ``"none"``: nothing read ahead.

    Every configuration adds the batch being consumed, and
    ``transient_factor - 1`` batches more for the copies that batch
    arithmetic makes (the article suggests about 2).

    >>> fp = footprint(12 * 2**20, "keras", workers=4, max_queue_size=10)
    >>> fp.depth, fp.total_bytes // 2**20
    (11, 144)
    >>> footprint(100, "torch", num_workers=4, pin_memory=True).total_bytes
    1700
    >>> fp = footprint(12 * 2**20, "ray", concurrency=2, object_store_bytes="1GiB")
    >>> fp.depth, [line.batches for line in fp.lines], fp.total_bytes // 2**20
    (45, [42, 2, 1, 1], 552)
    """
    if isinstance(spec_or_bytes, BatchSpec):
        nbytes = spec_or_bytes.nbytes
    else:
        nbytes = positive_int(spec_or_bytes, "batch bytes")
    check_bytes(nbytes, "batch")
    if not isinstance(framework, str):
        raise TypeError(f"framework must be a string, got {framework!r}")
    if framework not in _RULES:
        raise ValueError(f"unknown framework {framework!r}; known frameworks: {', '.join(_RULES)}")
    factor = _transient(transient_factor)
    unknown = [name for name in settings if name not in _SETTINGS[framework]]
    if unknown:
        takes = ", ".join(_SETTINGS[framework]) or "no settings"
        raise ValueError(f"setting {unknown[0]!r} does not apply to framework {framework!r} (it takes: {takes})")
    result = _RULES[framework]({**settings, "_batch_bytes": nbytes})
    resolved, read_ahead = result[0], result[1]
    if len(result) == 3:
        depth = result[2]
    else:
        depth = read_ahead[0][1] if read_ahead else 0
    lines = [FootprintLine(label, batches, nbytes * batches, why) for label, batches, why in read_ahead]
    lines.append(FootprintLine("consumed", 1, nbytes, "the batch the training step holds"))
    if factor > 1:
        extra = factor - 1
        lines.append(
            FootprintLine(
                "transient",
                float(extra),
                round(extra * nbytes),
                f"transient_factor={float(factor):g}: copies made by batch arithmetic on the consumed batch",
            )
        )
    fp = Footprint(framework=framework, batch_bytes=nbytes, settings=resolved, depth=depth, lines=lines)
    check_bytes(fp.total_bytes, f"footprint of {framework}")
    return fp


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
