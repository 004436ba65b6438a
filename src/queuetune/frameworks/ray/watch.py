"""Ray Data's watcher: a ``Dataset`` whose blocks are counted in the remote tasks
that build them, on any node, and whose batches are counted where the trainer takes them."""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, NamedTuple

from ...common.kinds import Settings
from ..base import require

require("ray.data", "ray")

import ray  # noqa: E402
import ray.data  # noqa: E402

from ...record.fingerprint import KeyBudget, SampleKey  # noqa: E402
from ...record.nbytes import nbytes  # noqa: E402
from ...record.recorder import Recorder, clock, recorded  # noqa: E402
from ...record.records import MetaFields, with_fields  # noqa: E402
from ...record.trace import Produced, Trace, TraceMeta  # noqa: E402
from ..base import Adapter, Framework, Watching, parameter_default  # noqa: E402
from .spec import RAY_METHODS, Ray  # noqa: E402

#: The map steps whose settings the counting step copies, so that Ray fuses the two.
_MAP_OPERATORS = ("MapBatches", "MapRows", "Filter", "FlatMap", "Read", "Project")

# In each worker process: when the counting step last handed on a block, and
# whether keying its rows still keeps to its budget.
_LAST_DONE: dict[str, float] = {}
_BUDGETS: dict[str, KeyBudget] = {}


class BlockRecord(NamedTuple):
    """A counted block: when its build started and ended (the node's wall clock),
    its bytes and rows, the node and the worker process that built it, and its
    rows' keys where kept."""

    start: float
    end: float
    nbytes: int
    rows: int
    node: str
    pid: int
    keys: tuple[int, ...] | None


@ray.remote(num_cpus=0)
class Collector:
    """Gathers the records of blocks counted in remote tasks, for the driver to read."""

    def __init__(self) -> None:
        self.records: list[BlockRecord] = []

    def add(self, record: BlockRecord) -> None:
        self.records.append(record)

    def since(self, position: int) -> list[BlockRecord]:
        return self.records[position:]


class CountBlocks:
    """The counting step: ``__call__`` hands each block on unchanged after sending
    its record (start, end, bytes, rows, node id, pid) to the collector.

    :func:`watch_dataset` appends it as one more ``map_batches`` step
    (``batch_size=None``, the block's own format, no copy) with the compute
    strategy and remote arguments of the dataset's last map, so Ray fuses it into
    that map's tasks: a block is counted in the task that built it, when it was
    built. Its build time runs from the previous block this worker process
    counted (for its first, start equals end), so it includes any time the worker
    waited for Ray to give it work. Times are the nodes' wall clocks, read on the
    driver's clock: on one machine they agree; across machines they need the
    clocks synchronised (NTP).
    """

    def __init__(self, collector: Any, token: str, keyer: SampleKey | None = None) -> None:
        self.collector = collector
        self.token = token
        self.keyer = keyer

    def __call__(self, block: Any) -> Any:
        from ray.data.block import BlockAccessor

        end = time.time()
        accessor = BlockAccessor.for_block(block)
        start = _LAST_DONE.get(self.token, end)
        record = BlockRecord(
            start=min(start, end),
            end=end,
            nbytes=int(accessor.size_bytes()),
            rows=int(accessor.num_rows()),
            node=ray.get_runtime_context().get_node_id(),
            pid=os.getpid(),
            keys=self._keys(accessor, end - min(start, end)),
        )
        self.collector.add.remote(record)
        _LAST_DONE[self.token] = time.time()
        return block

    def _keys(self, accessor: Any, built: float) -> tuple[int, ...] | None:
        """The keys of the block's rows, while they cost under the budget's share
        of the time this worker takes to build a block (the only step a remote
        task knows)."""
        if self.keyer is None:
            return None
        budget = _BUDGETS.setdefault(self.token, KeyBudget(SampleKey(self.keyer.key)))
        if budget.spent:
            return None
        budget.keyer.note_step(built)
        return budget.row_keys(accessor.to_batch_format("numpy"))


def fusing_arguments(dataset: Any) -> dict[str, Any]:
    """The ``map_batches`` arguments that let Ray fuse a step into the dataset's
    last map: its ``compute`` (a task pool, with its size) and remote arguments.
    Empty when the last step is not a task-pool map (an actor pool, a shuffle):
    the counting step then runs as tasks of its own.

    >>> pool = ray.data.TaskPoolStrategy(size=2)
    >>> ds = ray.data.range(8).map_batches(lambda b: b, compute=pool, num_cpus=0.5)  # doctest: +SKIP
    >>> fusing_arguments(ds)  # doctest: +SKIP
    {'num_cpus': 0.5, 'compute': TaskPoolStrategy(size=2)}
    """
    op = dataset._logical_plan.dag
    if type(op).__name__ not in _MAP_OPERATORS:
        return {}
    compute = getattr(op, "compute", None)
    if compute is not None and not isinstance(compute, ray.data.TaskPoolStrategy):
        return {}
    kwargs: dict[str, Any] = dict(getattr(op, "ray_remote_args", None) or {})
    if compute is not None:
        kwargs["compute"] = compute
    return kwargs


def rows_of(batch: Any) -> int:
    """Rows in a batch of any of Ray Data's formats (a dict of arrays or
    tensors, a pandas DataFrame, a pyarrow Table, one row as a dict).

    >>> import numpy as np
    >>> rows_of({"x": np.zeros((5, 3)), "y": np.zeros(5)}), rows_of({"id": 3})
    (5, 1)
    """
    if isinstance(batch, dict):
        for value in batch.values():
            shape = getattr(value, "shape", None)
            if shape is not None and len(shape) > 0:
                return int(shape[0])
            if isinstance(value, (list, tuple)):
                return len(value)
        return 1
    num_rows = getattr(batch, "num_rows", None)
    if isinstance(num_rows, int):
        return num_rows
    try:
        return len(batch)
    except TypeError:
        return 1


class RayRecorder(Recorder):
    """A recorder whose produced blocks come from the collector actor."""

    def __init__(self, meta: TraceMeta, collector: Any, *, sample_memory: bool = True) -> None:
        super().__init__(meta, sample_memory=sample_memory)
        self.collector = collector
        self._remote: list[BlockRecord] = []
        # Remote times are wall-clock; the recorder's clock is monotonic.
        self._offset = time.time() - clock()

    def _pull(self) -> None:
        if self.collector is None or not ray.is_initialized():
            return
        self._remote.extend(ray.get(self.collector.since.remote(len(self._remote)), timeout=30))

    def _pull_all(self, timeout: float = 10.0) -> None:
        """Pull until the blocks counted hold every row the trainer took: the
        remote tasks send their records without waiting, so on a busy machine
        the last ones reach the collector after the trainer has its rows."""
        deadline = clock() + timeout
        taken = sum(c.rows or 0 for c in list(self._consumed))
        while True:
            self._pull()
            if self.collector is None or sum(r.rows for r in self._remote) >= taken or clock() >= deadline:
                return
            time.sleep(0.05)

    def produced_count(self) -> int:
        self._pull()
        return len(self._remote)

    def trace(self) -> Trace:
        self._pull_all()
        trace = super().trace()
        nodes: dict[str, str] = {}
        produced = []
        for r in self._remote:
            short = r.node[:8]
            nodes[short] = r.node
            samples = None if r.keys is None else list(r.keys)
            produced.append(
                Produced(
                    r.start - self._offset,
                    r.end - self._offset,
                    r.nbytes,
                    worker=f"{short}:{r.pid}",
                    rows=r.rows,
                    samples=samples,
                )
            )
        produced.sort(key=lambda p: p.start)
        trace.produced = produced
        trace.meta = dataclasses.replace(trace.meta, nodes=nodes)
        trace.end = max([trace.end, *(p.end for p in produced)])
        return trace

    def close(self) -> None:
        try:
            if ray.is_initialized():
                self._pull_all()
        finally:
            collector, self.collector = self.collector, None
            if collector is not None and ray.is_initialized():
                ray.kill(collector)
            super().close()


class WatchedDataset:
    """A Ray ``Dataset`` whose blocks and batches are counted. Iterate it as the
    dataset (``iter_batches``, ``iter_torch_batches``, ``iter_rows``); every other
    attribute is the dataset's own."""

    def __init__(self, dataset: Any, recorder: RayRecorder) -> None:
        self._dataset = dataset
        self._recorder = recorder

    @property
    def dataset(self) -> Any:
        """The dataset with the counting step, to hand to code that needs a real ``Dataset``."""
        return self._dataset

    def iter_batches(self, **kwargs: Any) -> Iterator[Any]:
        """``Dataset.iter_batches``, with each batch counted as the trainer takes it."""
        return self._watched(self._dataset.iter_batches(**kwargs), kwargs)

    def iter_torch_batches(self, **kwargs: Any) -> Iterator[Any]:
        """``Dataset.iter_torch_batches``, with each batch counted as the trainer takes it."""
        return self._watched(self._dataset.iter_torch_batches(**kwargs), kwargs)

    def iter_rows(self, **kwargs: Any) -> Iterator[Any]:
        """``Dataset.iter_rows``, with each row counted as one batch of one row."""
        return self._watched(self._dataset.iter_rows(**kwargs), kwargs, one_row=True)

    def __iter__(self) -> Iterator[Any]:
        return self.iter_batches()

    def _watched(self, batches: Any, kwargs: dict[str, Any], one_row: bool = False) -> Iterator[Any]:
        recorder = self._recorder
        # The iterator's own settings join the dataset's in a new meta: the one given stays as it was.
        iterated = {"prefetch_batches": kwargs.get("prefetch_batches", 1), "batch_size": kwargs.get("batch_size", 256)}
        recorder.meta = with_fields(recorder.meta, {"settings": {**(recorder.meta.settings or {}), **iterated}})
        return _consume(iter(batches), recorder, one_row)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_dataset", "_recorder"):
            raise AttributeError(name)
        return getattr(self._dataset, name)


def _consume(batches: Iterator[Any], recorder: Recorder, one_row: bool) -> Iterator[Any]:
    def record(asked: float, got: float, batch: Any) -> None:
        recorder.consumed(asked, got, nbytes=nbytes(batch), rows=1 if one_row else rows_of(batch))

    return recorded(batches, recorder, record, close_source=True)


def object_store_budget(dataset: Any = None) -> int | None:
    """The bytes Ray Data's executor may hold in the object store, when set
    (``execution_options.resource_limits.object_store_memory`` of the dataset's
    own context, which it copied from ``DataContext.get_current()`` when read;
    of the current context without a dataset)."""
    context = ray.data.DataContext.get_current() if dataset is None else dataset.context
    value = getattr(context.execution_options.resource_limits, "object_store_memory", None)
    return None if value is None or value == float("inf") else int(value)


def set_object_store_budget(dataset: Any, budget: int) -> None:
    """Limit the bytes ``dataset``'s executor may hold in the object store.

    The limit goes into the dataset's own context, the one its executor reads;
    datasets derived from the same read share that context.
    """
    options = dataset.context.execution_options
    options.resource_limits = options.resource_limits.copy(object_store_memory=int(budget))


def cluster_settings() -> tuple[int, int]:
    """The connected cluster's CPUs and Ray Data's default budget there, half the
    cluster's object store (``resource_manager.py``); connects as Ray Data would
    when not yet connected."""
    if not ray.is_initialized():
        ray.init()
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]  # ray leaves it unannotated
    store = int(resources.get("object_store_memory", 0))
    return max(1, int(resources.get("CPU", 1))), store // 2


def _is_plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def dataset_meta(dataset: Any) -> MetaFields:
    """What the trace of ``dataset`` says of it: blocks and batches are matched by
    rows (``match = "rows"``, see :func:`watch_dataset`); its settings are those of
    its last map, where the counting step is fused, and its object store budget."""
    fusing = fusing_arguments(dataset)
    return {
        "framework": "ray",
        "loader": "ray dataset",
        "type": type(dataset).__qualname__,
        "match": "rows",
        "settings": {
            "object_store_memory": object_store_budget(dataset),
            "concurrency": getattr(fusing.get("compute"), "size", None),
            **{k: v for k, v in fusing.items() if k != "compute" and _is_plain(v)},
        },
    }


def watch_dataset(
    dataset: Any, meta: TraceMeta, sample_memory: bool, key: Any = None
) -> tuple[WatchedDataset, RayRecorder]:
    """Append the counting step to ``dataset`` and return the watched dataset and
    its recorder (``meta``: the trace's, :func:`dataset_meta` merged in).

    Batches are counted by the watched dataset's iterators (``iter_batches``,
    ``iter_torch_batches``, ``iter_rows``). Blocks and batches are matched by rows
    (``meta.match = "rows"``): a block is released when the trainer has taken its
    last row, so the report counts blocks in flight and their bytes whatever the
    batch size. The rows of each block are keyed in the task (``key``, see
    :func:`queuetune.watch`) for the coverage check.
    """
    token = uuid.uuid4().hex
    collector = Collector.options(name=f"queuetune-{token}").remote()  # type: ignore[attr-defined]
    counted = dataset.map_batches(
        CountBlocks(collector, token, None if key is False else SampleKey(key)),
        batch_size=None,
        batch_format=None,
        zero_copy_batch=True,
        **fusing_arguments(dataset),
    )
    recorder = RayRecorder(meta, collector, sample_memory=sample_memory)
    return WatchedDataset(counted, recorder), recorder


#: The iterators ``queuetune run`` watches a dataset through.
ITERATORS = ("iter_batches", "iter_torch_batches", "iter_rows")


def autowatch_datasets(session: Watching, dataset_class: type) -> Callable[[], None]:
    """Make every ``iter_batches``/``iter_torch_batches``/``iter_rows`` of a Ray
    Data ``Dataset`` while ``session`` is active read a watched copy of it (one
    per dataset: the counting step appended, see :func:`watch_dataset`); return
    what undoes it."""
    originals = {name: getattr(dataset_class, name) for name in ITERATORS}
    copies: dict[int, tuple[Any, WatchedDataset]] = {}
    counting: dict[int, Any] = {}  # the copies' own datasets, read as they are

    def through(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not session.active or id(self) in counting or args:
                return method(self, *args, **kwargs)
            held = copies.get(id(self))
            watched = held[1] if held is not None and held[0] is self else None
            if watched is None:
                watched = session.watch(self, "ray dataset")
                if watched is None:
                    return method(self, *args, **kwargs)
                copies[id(self)] = (self, watched)
                counting[id(watched.dataset)] = watched.dataset
            return getattr(watched, name)(**kwargs)

        return call

    for name, method in originals.items():
        setattr(dataset_class, name, through(name, method))

    def undo() -> None:
        for name, method in originals.items():
            setattr(dataset_class, name, method)
        copies.clear()
        counting.clear()

    return undo


@dataclasses.dataclass(frozen=True)
class RayAdapter(Adapter):
    """Watches a Ray Data ``Dataset`` (its blocks counted in the tasks that build
    them), hooks its iterators, and reads the cluster's settings for the tuner."""

    spec: Ray

    def describe(self, loader: Any) -> MetaFields:
        return dataset_meta(loader)

    def watch(
        self, loader: Any, meta: TraceMeta, sample_memory: bool, key: Any = None
    ) -> tuple[WatchedDataset, RayRecorder]:
        return watch_dataset(loader, meta, sample_memory, key)

    def autowatch(self, session: Watching, module: ModuleType) -> Callable[[], None]:
        return autowatch_datasets(session, module.Dataset)

    def tuner_defaults(self, factory: Callable[..., Any], loader: Any, kwargs: dict[str, Any]) -> Settings:
        """The job's ``prefetch_batches`` (Ray's 1 when not given), its dataset's
        budget (None: Ray's default) and the factory's ``concurrency`` default
        (None when it takes none: every CPU)."""
        return {
            "prefetch_batches": kwargs.get("prefetch_batches", 1),
            "object_store_memory": object_store_budget(loader),
            "concurrency": parameter_default(factory, "concurrency"),
        }

    def configure(self, job: Any, settings: Settings) -> Any:
        """The budget goes into the dataset's context, ``prefetch_batches`` among the iterator's arguments."""
        if settings.get("object_store_memory") is not None:
            set_object_store_budget(job.loader, settings["object_store_memory"])
        if "prefetch_batches" in settings:
            job.kwargs = {**job.kwargs, "prefetch_batches": settings["prefetch_batches"]}
        return job

    def batches(self, watched: Any, job: Any) -> Iterator[Any]:
        method = job.method if job.method in RAY_METHODS else "iter_batches"
        return iter(getattr(watched, method)(**job.kwargs))

    def bound(self) -> Framework:
        cpus, store_budget = cluster_settings()
        return dataclasses.replace(self.spec, cpus=cpus, store_budget=store_budget)

    def measured(self, spec: Framework, baseline: Trace) -> Framework:
        assert isinstance(spec, Ray)
        # A depth counts blocks: the budget that holds one depends on their size.
        if not baseline.produced:
            return spec
        import statistics

        return dataclasses.replace(spec, block_bytes=int(statistics.median(p.nbytes for p in baseline.produced)))


ADAPTERS: dict[str, type[Adapter]] = {"ray": RayAdapter}
