"""PyTorch's watcher: a ``DataLoader`` that records each batch where it is built (in
the main process or a worker process) and where the training loop receives it."""

from __future__ import annotations

import dataclasses
import multiprocessing
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from ..base import require

require("torch", "torch")

import torch  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset  # noqa: E402
from torch.utils.data import _utils as torch_utils  # noqa: E402

from ...common.imports import ImportHooks  # noqa: E402
from ...record.fingerprint import SampleKey  # noqa: E402
from ...record.nbytes import nbytes  # noqa: E402
from ...record.real_memory import dataset_facts  # noqa: E402
from ...record.recorder import Recorder, clock  # noqa: E402
from ...record.records import MetaFields  # noqa: E402
from ...record.trace import TraceMeta  # noqa: E402
from ..base import Adapter, Framework, Watching, has_base  # noqa: E402
from .copies import StepCopies, may_copy  # noqa: E402
from .pinning import PinTimed, SingleProcessIterator  # noqa: E402
from .watched import RecordingSampler, WatchedCollate, wrap_dataset  # noqa: E402


class _Run:
    """One pass over the loader, as the recorder sees it; ends at most once. A
    pass that ends before the loader is exhausted (a loop broken off, the
    iterator closed or dropped, an error) and before it handed over every batch
    the loader has (Keras stops there without asking for more) marks its epoch
    ``cut_short``."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.open = True
        self.handed = 0
        # The step's copies of its batches to a device, where it may make any.
        self.copies = StepCopies(recorder) if may_copy() else None

    def finish(self, exhausted: bool = False) -> None:
        if self.open:
            self.open = False
            if self.copies is not None:
                self.copies.close()
            total = self.recorder.meta.num_batches
            if not exhausted and (total is None or self.handed < total):
                self.recorder.mark("cut_short", self.recorder.epoch)
            self.recorder.run_end()


class WatchedIterator:
    """The iterator of one pass over a watched loader: hands over each batch
    unchanged and records when it was asked for and when it arrived."""

    def __init__(
        self,
        inner: Iterator[Any],
        recorder: Recorder,
        run: _Run | None,
        taken: deque[tuple[Any, list[int] | None]] | None,
        keyer: SampleKey | None = None,
    ) -> None:
        self._inner = inner
        self._recorder = recorder
        self._run = run
        self._taken = taken
        self._keyer = keyer
        self._got: float | None = None
        if run is not None:
            weakref.finalize(self, run.finish)

    def __iter__(self) -> WatchedIterator:
        return self

    def __next__(self) -> Any:
        asked = clock()
        if self._keyer is not None and self._got is not None:
            self._keyer.note_step(asked - self._got)
        try:
            batch = next(self._inner)
        except StopIteration:
            self._finish(exhausted=True)
            raise
        except Exception as exc:
            # The failed batch used up its index list: drop it to stay in step.
            if self._taken:
                self._taken.popleft()
            if self._run is not None and self._run.open:
                self._recorder.error(exc)
            raise
        got = self._got = clock()
        key, samples = self._taken.popleft() if self._taken else (None, None)
        if self._run is not None and self._run.open:
            self._run.handed += 1
            self._recorder.consumed(asked, got, nbytes=nbytes(batch), key=key, samples=samples)
            if self._run.copies is not None:
                self._run.copies.handed(batch)
        return batch

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]

    def _finish(self, exhausted: bool = False) -> None:
        if self._run is not None:
            self._run.finish(exhausted)

    def close(self) -> None:
        """End this pass: the run ends and, unless the loader keeps persistent
        workers, its worker processes are shut down.

        >>> import torch, queuetune
        >>> loader = queuetune.watch(torch.utils.data.DataLoader(range(8), batch_size=2))
        >>> it = iter(loader); _ = next(it); it.close()
        >>> queuetune.report(loader).consumed_batches
        1
        >>> queuetune.probe_of(loader).close()
        """
        self._finish()
        if not getattr(self._inner, "_persistent_workers", False):
            shutdown = getattr(self._inner, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_inner", "_recorder", "_run", "_taken", "_keyer", "_got"):
            raise AttributeError(name)
        return getattr(self._inner, name)


class WatchedDataLoader(DataLoader[Any]):
    """A ``DataLoader`` with the settings of another one whose dataset, collate
    function and index sampler record what is built and what is handed over.

    Produced batches are recorded right after ``collate_fn`` returns, in whichever
    process built them; the record travels to the recorder through its
    :class:`~queuetune.record.recorder.Channel`. Consumed batches are recorded by the
    iterator ``__iter__`` returns. Both sides carry the same key (the batch's
    sample indices), so the analysis matches each consumed batch to the batch
    built for it, and the consumed side's indices give the epoch's coverage.

    Its ``dataset`` and ``collate_fn`` are wrappers around the original ones;
    ``sampler`` and ``generator`` are the original objects, so shuffling and
    ``sampler.set_epoch`` work as before. Build it with :func:`queuetune.watch`:

    >>> import torch, queuetune
    >>> original = torch.utils.data.DataLoader(range(10), batch_size=4, shuffle=True)
    >>> loader = queuetune.watch(original)
    >>> isinstance(loader, torch.utils.data.DataLoader), len(loader), loader.sampler is original.sampler
    (True, 3, True)
    >>> queuetune.probe_of(loader).close()
    """

    def __init__(self, loader: DataLoader[Any], recorder: Recorder, key: Any = None) -> None:
        self._queuetune_recorder = recorder
        self._queuetune_run: _Run | None = None
        self._queuetune_indices: RecordingSampler | None = None
        token = uuid.uuid4().hex
        channel = recorder.channel
        dataset = loader.dataset
        iterable = isinstance(dataset, IterableDataset)
        options = self._queuetune_options(loader)
        options.update(
            {
                "num_workers": loader.num_workers,
                "collate_fn": WatchedCollate(loader.collate_fn, channel, token),
                "pin_memory": loader.pin_memory,
                "timeout": loader.timeout,
                "worker_init_fn": loader.worker_init_fn,
                "multiprocessing_context": loader.multiprocessing_context,
                "generator": loader.generator,
                "prefetch_factor": loader.prefetch_factor,
                "persistent_workers": loader.persistent_workers,
                "pin_memory_device": loader.pin_memory_device,
                "in_order": loader.in_order,
            }
        )
        if iterable:
            options.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
        elif loader.batch_size is not None:
            options.update(sampler=loader.sampler, batch_size=loader.batch_size, drop_last=loader.drop_last)
        elif loader.batch_sampler is not None:
            options.update(batch_sampler=loader.batch_sampler)
        else:
            options.update(sampler=loader.sampler, batch_size=None)
        keyer = None if key is False or not iterable else SampleKey(key, shared=loader.num_workers > 0)
        self._queuetune_keyer = keyer
        super().__init__(wrap_dataset(dataset, channel, token, iterable, keyer), **options)  # type: ignore[arg-type]
        self._queuetune_adopt(loader)
        if not iterable:
            self._queuetune_indices = RecordingSampler(super()._index_sampler, batched=self.batch_sampler is not None)

    def _queuetune_options(self, loader: DataLoader[Any]) -> dict[str, Any]:
        """The options of ``loader`` a subclass of ``DataLoader`` adds to torch's."""
        return {}

    def _queuetune_adopt(self, loader: DataLoader[Any]) -> None:
        """Take from ``loader`` what a subclass keeps beyond its options (a state loaded)."""

    @property
    def _index_sampler(self) -> Any:
        recording = self.__dict__.get("_queuetune_indices")
        return recording if recording is not None else super()._index_sampler

    def _get_iterator(self) -> Any:
        recorder = self._queuetune_recorder
        if self.num_workers == 0:
            return SingleProcessIterator(self, recorder)
        self.check_worker_number_rationality()
        return PinTimed(self, recorder) if self.persistent_workers else _ReadAtShutdown(self, recorder)

    def __iter__(self) -> Any:
        recorder = self._queuetune_recorder
        if self._queuetune_run is not None:
            self._queuetune_run.finish()
            self._queuetune_run = None
        run = None
        if recorder.consumer == "iterator":
            run = _Run(recorder)
            recorder.run_begin()
            recorder.epoch_begin()
            self._queuetune_run = run
            # Which of its epochs the sampler draws (a DistributedSampler's set_epoch): a resume reads it.
            sampler = self.batch_sampler if self.batch_size is None and self.batch_sampler is not None else self
            drawn = getattr(getattr(sampler, "sampler", None), "epoch", None)
            if isinstance(drawn, int) and not isinstance(drawn, bool):
                recorder.mark("sampler_epoch", {"epoch": recorder.epoch, "sampler": drawn})
        try:
            inner = super().__iter__()
        except Exception as exc:
            if run is not None:
                recorder.error(exc)
                run.finish()
            raise
        taken = None
        ordered = self.in_order or self.num_workers <= 1
        if self._queuetune_indices is not None and ordered:
            taken = self._queuetune_indices.latest
        return WatchedIterator(inner, recorder, run, taken, self._queuetune_keyer)


class _ReadAtShutdown(PinTimed):
    """torch's iterator over worker processes that are not persistent, which has
    the process tree read once more as its workers are told to end (at the end
    of the epoch, or where it is closed or dropped): their last reading, at
    their most grown."""

    def __init__(self, loader: DataLoader[Any], recorder: Recorder) -> None:
        self._queuetune_recorder: Recorder | None = recorder
        super().__init__(loader, recorder)

    def _shutdown_workers(self) -> None:
        recorder = getattr(self, "_queuetune_recorder", None)
        # Not as the interpreter exits, where torch itself does nothing here.
        ending = torch_utils.python_exit_status is False
        if recorder is not None and ending and not getattr(self, "_shutdown", True):
            self._queuetune_recorder = None
            try:
                recorder.workers_ending()
            finally:
                super()._shutdown_workers()
            return
        super()._shutdown_workers()


def _epoch_samples(loader: DataLoader[Any]) -> int | None:
    """The samples an epoch of ``loader`` reads (its sampler's length: one rank's
    share under a ``DistributedSampler``), None where not known.

    >>> _epoch_samples(DataLoader(range(10), batch_size=4)), _epoch_samples(DataLoader(range(10), batch_size=None))
    (10, 10)
    """
    if isinstance(loader.dataset, IterableDataset):
        return None
    custom = loader.batch_size is None and loader.batch_sampler is not None
    sampler = getattr(loader.batch_sampler, "sampler", None) if custom else loader.sampler
    try:
        return len(sampler)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return None


def _num_batches(loader: DataLoader[Any]) -> int | None:
    dataset = loader.dataset
    if isinstance(dataset, IterableDataset):
        # len(loader) would make torch warn later about an over-long dataset.
        try:
            length = len(dataset)  # type: ignore[arg-type]
        except (TypeError, NotImplementedError):
            return None
        size = loader.batch_size
        if size is None:
            return length
        return length // size if loader.drop_last else -(-length // size)
    try:
        return len(loader)
    except (TypeError, NotImplementedError):
        return None


def dataloader_meta(framework: Framework, loader: DataLoader[Any]) -> MetaFields:
    """What the trace of ``loader`` says of it (``framework``: torch's rules)."""
    dataset = loader.dataset
    knobs = framework.settings_of(loader)
    added: MetaFields = {
        "loader": "dataloader",
        "framework": framework.name,
        "type": type(dataset).__qualname__,
        "settings": knobs,
        "depth": framework.depth(knobs),
        "versions": {"torch": torch.__version__},
        # Every pass starts its workers' queues afresh: a batch built before a
        # pass began is never handed over in it.
        "match_scope": "run",
    }
    if not isinstance(dataset, IterableDataset):
        try:
            added["num_samples"] = len(dataset)  # type: ignore[arg-type]
        except (TypeError, NotImplementedError):
            pass
    added["num_batches"] = _num_batches(loader)
    extra: dict[str, Any] = {}
    epoch_samples = _epoch_samples(loader)
    if epoch_samples is not None:
        extra["epoch_samples"] = epoch_samples
    if loader.num_workers > 0:
        context = loader.multiprocessing_context
        method = context if isinstance(context, str) else getattr(context, "_name", None)
        extra.update(dataset_facts(dataset, (method or multiprocessing.get_start_method()) == "fork"))
    added["extra"] = extra
    return added


def watch_dataloader(
    framework: Framework, loader: DataLoader[Any], meta: TraceMeta, sample_memory: bool, key: Any = None
) -> tuple[WatchedDataLoader, Recorder]:
    """A watched copy of ``loader`` and the recorder it reports to (``framework``:
    torch's rules; ``meta``: the trace's, :func:`dataloader_meta` merged in).

    Use it through :func:`queuetune.watch`:

    >>> import torch, queuetune
    >>> loader = queuetune.watch(torch.utils.data.DataLoader(range(6), batch_size=2))
    >>> [b.tolist() for b in loader]
    [[0, 1], [2, 3], [4, 5]]
    >>> report = queuetune.report(loader)
    >>> report.produced_batches, report.consumed_batches, report.coverage[0].never_count
    (3, 3, 0)
    >>> queuetune.probe_of(loader).close()
    """
    recorder = Recorder(meta, processes=loader.num_workers > 0, sample_memory=sample_memory)
    try:
        watched = _watched_class(loader)(loader, recorder, key)
    except BaseException:
        recorder.close()
        raise
    return watched, recorder


def is_stateful(loader: Any) -> bool:
    """A torchdata ``StatefulDataLoader``.

    >>> is_stateful(DataLoader(range(4)))
    False
    """
    return has_base(loader, "StatefulDataLoader", "torchdata")


def _watched_class(loader: DataLoader[Any]) -> type[WatchedDataLoader]:
    if is_stateful(loader):
        from .stateful import watched_class

        return watched_class(WatchedDataLoader)  # type: ignore[return-value]
    return WatchedDataLoader


#: Where torchdata's ``StatefulDataLoader`` is defined (it iterates without ``DataLoader.__iter__``).
STATEFUL_MODULE = "torchdata.stateful_dataloader.stateful_dataloader"


def autowatch_dataloaders(session: Watching) -> Callable[[], None]:
    """Make every ``DataLoader`` the program iterates while ``session`` is
    active iterate a watched copy of itself (one per loader, made on its first
    pass, so that persistent workers persist); return what undoes it. The
    loaders Keras makes to read its own inputs are left to Keras's watcher.
    A torchdata ``StatefulDataLoader`` too, once torchdata is imported: its
    ``state_dict()`` is its watched copy's, and a state it loads before its
    first pass is its copy's to resume from."""
    copies: weakref.WeakKeyDictionary[DataLoader[Any], Any] = weakref.WeakKeyDictionary()
    undo = _hook_iter(DataLoader, session, copies)
    undone: list[Callable[[], None]] = [undo]
    hooks = ImportHooks()

    def stateful(module: ModuleType) -> None:
        kind = getattr(module, "StatefulDataLoader", None)
        if kind is not None:
            undone.append(_hook_iter(kind, session, copies))
            undone.append(_hook_state(kind, copies))

    hooks.add(STATEFUL_MODULE, stateful)

    def undo_all() -> None:
        hooks.remove()
        for each in reversed(undone):
            each()

    return undo_all


def _hook_iter(kind: type[Any], session: Watching, copies: weakref.WeakKeyDictionary[Any, Any]) -> Callable[[], None]:
    """``kind.__iter__`` iterating each loader's watched copy; what undoes it."""
    original = kind.__dict__["__iter__"]

    def __iter__(self: DataLoader[Any]) -> Any:
        if isinstance(self, WatchedDataLoader) or not session.active or _internal(self):
            return original(self)
        copy = copies.get(self)
        if copy is None:
            copy = session.watch(self, "dataloader")
            if copy is None:
                return original(self)
            copies[self] = copy
        return iter(copy)

    kind.__iter__ = __iter__

    def undo() -> None:
        kind.__iter__ = original

    return undo


def _hook_state(kind: type[Any], copies: weakref.WeakKeyDictionary[Any, Any]) -> Callable[[], None]:
    """``kind.state_dict`` and ``load_state_dict`` those of each loader's
    watched copy, where it has one; what undoes it."""
    original_state, original_load = kind.__dict__["state_dict"], kind.__dict__["load_state_dict"]

    def state_dict(self: Any) -> Any:
        copy = None if isinstance(self, WatchedDataLoader) else copies.get(self)
        return original_state(self) if copy is None else copy.state_dict()

    def load_state_dict(self: Any, state: Any) -> None:
        copy = None if isinstance(self, WatchedDataLoader) else copies.get(self)
        if copy is None:
            original_load(self, state)
        else:
            copy.load_state_dict(state)

    kind.state_dict, kind.load_state_dict = state_dict, load_state_dict

    def undo() -> None:
        kind.state_dict, kind.load_state_dict = original_state, original_load

    return undo


def _internal(loader: DataLoader[Any]) -> bool:
    """A loader another framework makes to read its own inputs (Keras's torch backend)."""
    return type(loader.dataset).__module__.split(".")[0] == "keras"


@dataclasses.dataclass(frozen=True)
class TorchAdapter(Adapter):
    """Watches a ``DataLoader`` (where its batches are built and taken) and hooks
    every ``DataLoader`` a program iterates."""

    def describe(self, loader: Any) -> MetaFields:
        return dataloader_meta(self.spec, loader)

    def watch(
        self, loader: Any, meta: TraceMeta, sample_memory: bool, key: Any = None
    ) -> tuple[WatchedDataLoader, Recorder]:
        return watch_dataloader(self.spec, loader, meta, sample_memory, key)

    def autowatch(self, session: Watching, module: ModuleType) -> Callable[[], None]:
        return autowatch_dataloaders(session)


ADAPTERS: dict[str, type[Adapter]] = {"torch": TorchAdapter}
