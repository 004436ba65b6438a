"""Keras 3's watcher: a watched PyDataset (counts where batches are built, in worker
threads or processes), a callback that counts where batches reach the model, and
the Prefetcher as a PyDataset."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import multiprocessing
import os
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from ...common.kinds import Settings
from ..base import require

require("keras", "keras")

import keras  # noqa: E402

from ...record.nbytes import nbytes  # noqa: E402
from ...record.real_memory import dataset_facts  # noqa: E402
from ...record.recorder import Channel, Recorder, built_here, busy_time, clock  # noqa: E402
from ...record.records import MetaFields  # noqa: E402
from ...record.trace import Trace, TraceMeta  # noqa: E402
from ..base import Adapter, Framework, Probed, Watching  # noqa: E402
from .spec import run_model  # noqa: E402

if TYPE_CHECKING:
    from ...analysis.report import Report


class WatchedPyDataset(keras.utils.PyDataset):  # type: ignore[misc]  # keras ships no types: its base is Any
    """A PyDataset that records each batch where it is built, then returns it unchanged."""

    def __init__(self, inner: Any, channel: Channel, recorder: Recorder | None = None) -> None:
        super().__init__(
            workers=inner.workers,
            use_multiprocessing=inner.use_multiprocessing,
            max_queue_size=inner.max_queue_size,
        )
        self._inner = inner
        self._channel = channel
        self._recorder = recorder
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        # A worker process gets the channel, not the recorder and its threads.
        return {**self.__dict__, "_recorder": None}

    def __getitem__(self, index: int) -> Any:
        start, busy = clock(), busy_time()
        try:
            batch = self._inner[index]
        except Exception as exc:
            # The callback never sees the error: note it where the batch failed
            # (in this process; a worker process's error reaches fit only).
            if self._recorder is not None and os.getpid() == self._pid:
                self._recorder.error(exc)
            raise
        end = clock()
        self._channel.emit(built_here(start, end, nbytes(batch), index, index, busy=busy_time() - busy))
        return batch

    @property
    def num_batches(self) -> int | None:
        count: int | None = self._inner.num_batches
        return count

    def __len__(self) -> int:
        count: int | None = self._inner.num_batches
        if count is None:
            raise TypeError("this PyDataset is infinite (num_batches is None)")
        return count

    def on_epoch_begin(self) -> None:
        self._inner.on_epoch_begin()

    def on_epoch_end(self) -> None:
        self._inner.on_epoch_end()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def pydataset_meta(framework: Framework, dataset: Any) -> MetaFields:
    """What the trace of ``dataset`` says of it (``framework``: Keras's rules)."""
    knobs = framework.settings_of(dataset)
    try:
        count = dataset.num_batches
    except NotImplementedError:
        count = None
    added: MetaFields = {
        "loader": "pydataset",
        "framework": framework.name,
        "type": type(dataset).__qualname__,
        "settings": knobs,
        "depth": framework.depth(knobs),
        "num_batches": count,
        "match_scope": "run",
        "pre_run_consumes": 1,
        "versions": {"keras": keras.__version__, "backend": keras.backend.backend()},
    }
    if _in_processes(knobs):
        added["extra"] = dataset_facts(dataset, multiprocessing.get_start_method() == "fork")
    return added


def _in_processes(knobs: Settings) -> bool:
    return bool(knobs["use_multiprocessing"]) and knobs["workers"] > 0


def watch_pydataset(
    framework: Framework, dataset: Any, meta: TraceMeta, sample_memory: bool
) -> tuple[WatchedPyDataset, Recorder]:
    """A watched copy of ``dataset`` and the recorder it reports to (``framework``:
    Keras's rules; ``meta``: the trace's, :func:`pydataset_meta` merged in)."""
    processes = _in_processes(framework.settings_of(dataset))
    recorder = Recorder(meta, processes=processes, sample_memory=sample_memory)
    recorder.consumer = "callback"
    return WatchedPyDataset(dataset, recorder.channel, recorder), recorder


class ProbeCallback(keras.callbacks.Callback):  # type: ignore[misc]  # keras ships no types: its base is Any
    """Records when each batch reaches the model (``on_*_batch_begin``) and when the
    model is done with it (``on_*_batch_end``). Only the phase that opened the run
    counts: validation batches inside ``fit`` are a pause of the training consumer."""

    def __init__(
        self,
        probe: Probed,
        on_end: Callable[[], None] | None = None,
        scalars: Callable[[], Any] | None = None,
        every: float = 1.0,
    ) -> None:
        super().__init__()
        self._recorder: Recorder = probe.recorder
        self._recorder.consumer = "callback"
        self._on_end = on_end
        self._phase: str | None = None
        self._asked = 0.0
        # A writer of live readings (TensorBoard scalars) made when a run begins:
        # ``write(label, live)`` each ``every`` seconds and at the end, then ``close()``.
        self._make_scalars = scalars
        self._every = every
        self._scalars: Any = None
        self._written = 0.0
        self._epoch_batches = 0

    def _begin(self, phase: str) -> None:
        if self._phase is None:
            self._phase = phase
            self._recorder.run_begin()
            self._asked = clock()
            if self._make_scalars is not None:
                self._scalars, self._written = self._make_scalars(), -self._every
        elif phase != self._phase:
            self._recorder.mark("pause_begin", phase)

    def _end(self, phase: str) -> None:
        if phase == self._phase:
            self._recorder.run_end()
            self._phase = None
            if self._scalars is not None:
                self._scalars.write(self._label(), self._recorder.live())
                self._scalars.close()
                self._scalars = None
            if self._on_end is not None:
                self._on_end()
        elif self._phase is not None:
            self._recorder.mark("pause_end", phase)
            self._asked = clock()

    def _batch_begin(self, phase: str) -> None:
        if phase == self._phase:
            self._recorder.consumed(self._asked, clock())

    def _batch_end(self, phase: str) -> None:
        if phase == self._phase:
            now = clock()
            if self._scalars is not None and now - self._written >= self._every:
                self._scalars.write(self._label(), self._recorder.live())
                self._written = now
            self._asked = clock()

    def _label(self) -> str:
        meta = self._recorder.meta
        return meta.name or meta.loader or "loader"

    def on_train_begin(self, logs: Any = None) -> None:
        self._begin("train")

    def on_train_end(self, logs: Any = None) -> None:
        self._end("train")

    def on_test_begin(self, logs: Any = None) -> None:
        self._begin("test")

    def on_test_end(self, logs: Any = None) -> None:
        self._end("test")

    def on_predict_begin(self, logs: Any = None) -> None:
        self._begin("predict")

    def on_predict_end(self, logs: Any = None) -> None:
        self._end("predict")

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self._phase == "train":
            self._recorder.epoch_begin()
            self._asked = clock()
            self._epoch_batches = 0

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._phase == "train":
            # An epoch cut by ``steps_per_epoch`` (or a callback that stops training)
            # took fewer batches than the loader has.
            total = self._recorder.meta.num_batches
            if total is not None and self._epoch_batches < total:
                self._recorder.mark("cut_short", self._recorder.epoch)
            self._recorder.epoch_end()

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._phase == "train":
            self._epoch_batches += 1
        self._batch_begin("train")

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._batch_end("train")

    def on_test_batch_begin(self, batch: int, logs: Any = None) -> None:
        self._batch_begin("test")

    def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
        self._batch_end("test")

    def on_predict_batch_begin(self, batch: int, logs: Any = None) -> None:
        self._batch_begin("predict")

    def on_predict_batch_end(self, batch: int, logs: Any = None) -> None:
        self._batch_end("predict")


class Prefetching(Protocol):
    """What the PyDataset form reads of the :class:`~queuetune.Prefetcher` it wraps."""

    source: Any

    @property
    def depth(self) -> int: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Any]: ...

    def trace(self) -> Trace: ...

    def report(self) -> Report: ...

    def close(self) -> None: ...

    def build_now(self, index: int) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class KerasPrefetcher(keras.utils.PyDataset):  # type: ignore[misc]  # keras ships no types: its base is Any
    """A :class:`~queuetune.Prefetcher` as Keras takes it: a PyDataset that Keras
    reads in order with no queue of its own (``workers=1``), while the
    prefetcher's budget bounds what is built ahead. ``queuetune.Prefetcher(pydataset,
    ...)`` returns one; the prefetcher itself is ``.prefetcher``, and its
    ``depth``, ``trace()``, ``report()`` and ``close()`` are this one's too.

    Keras shuffles a PyDataset's batches in ``fit`` unless told not to; batches
    asked for out of order are built on the spot, without prefetch. So pass
    ``shuffle=False`` to ``fit`` and ``shuffle=True`` to the prefetcher.
    """

    def __init__(self, prefetcher: Prefetching) -> None:
        super().__init__(workers=1, use_multiprocessing=False, max_queue_size=1)
        self.prefetcher = prefetcher
        self._stream: Any = None
        self._next_index = 0
        self._warned = False

    @property
    def num_batches(self) -> int:
        return len(self.prefetcher)

    def __len__(self) -> int:
        return len(self.prefetcher)

    def __iter__(self) -> Any:
        return iter(self.prefetcher)

    @property
    def depth(self) -> int:
        return self.prefetcher.depth

    def trace(self) -> Trace:
        return self.prefetcher.trace()

    def report(self) -> Report:
        return self.prefetcher.report()

    def close(self) -> None:
        self._end_stream()
        self.prefetcher.close()

    def state_dict(self) -> dict[str, Any]:
        """The prefetcher's state (see :meth:`queuetune.Prefetcher.state_dict`)."""
        return self.prefetcher.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the prefetcher from ``state``: the next epoch Keras reads, or
        the next loop, hands over the batches the one that gave it would have
        (an epoch resumed holds only the batches left of it: pass ``steps_per_epoch``
        to ``fit`` for that epoch, or resume between epochs with ``initial_epoch``)."""
        self._end_stream()
        self.prefetcher.load_state_dict(state)

    def __enter__(self) -> KerasPrefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getitem__(self, index: int) -> Any:
        if (index == 0 and self._next_index != 0) or (self._stream is None and index == 0):
            self._stream = iter(self.prefetcher)
            self._next_index = 0
        if self._stream is None or index != self._next_index:
            if not self._warned:
                import warnings

                warnings.warn(
                    "Keras asks for batches out of order (fit shuffles a PyDataset unless "
                    "shuffle=False): they are built without prefetch. Pass shuffle=False to fit "
                    "and shuffle=True to the Prefetcher.",
                    stacklevel=2,
                )
                self._warned = True
            return self.prefetcher.build_now(index)
        self._next_index += 1
        try:
            return next(self._stream)
        except BaseException:
            self._end_stream()  # a failed stream is over: the next request starts afresh
            raise

    def on_epoch_begin(self) -> None:
        hook = getattr(self.prefetcher.source, "on_epoch_begin", None)
        if hook is not None:
            hook()

    def on_epoch_end(self) -> None:
        self._end_stream()
        hook = getattr(self.prefetcher.source, "on_epoch_end", None)
        if hook is not None:
            hook()

    def _end_stream(self) -> None:
        stream, self._stream = self._stream, None
        self._next_index = 0
        if stream is not None:
            stream.close()


_METHODS = ("fit", "evaluate", "predict")
_MISSING = object()


def autowatch_models(session: Watching) -> Callable[[], None]:
    """Make ``fit``/``evaluate``/``predict`` of every Keras model watch their
    input while ``session`` is active: a ``PyDataset`` (one watched copy per
    dataset) or a generator, with the callback that records what reaches the
    model added last; other inputs go through untouched (tf.data's watcher
    sees a ``Dataset``). Return what undoes it."""
    model = keras.Model
    copies: dict[int, tuple[Any, Any]] = {}
    saved = {name: model.__dict__.get(name, _MISSING) for name in _METHODS}
    for name in _METHODS:
        setattr(model, name, _watching(getattr(model, name), session, copies))

    def undo() -> None:
        for name, method in saved.items():
            if method is _MISSING:
                delattr(model, name)
            else:
                setattr(model, name, method)
        copies.clear()

    return undo


def _watching(method: Callable[..., Any], session: Watching, copies: dict[int, tuple[Any, Any]]) -> Callable[..., Any]:
    signature = inspect.signature(method)

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not session.active:
            return method(self, *args, **kwargs)
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:
            return method(self, *args, **kwargs)
        watched = _watched_input(bound.arguments.get("x"), session, copies)
        if watched is None:
            return method(self, *args, **kwargs)
        bound.arguments["x"] = watched
        callbacks = list(bound.arguments.get("callbacks") or [])
        bound.arguments["callbacks"] = [*callbacks, ProbeCallback(session.probe(watched))]
        return method(*bound.args, **bound.kwargs)

    return call


def _watched_input(x: Any, session: Watching, copies: dict[int, tuple[Any, Any]]) -> Any:
    """The watched form of a model's input ``x``, or None to leave it alone."""
    if isinstance(x, (WatchedPyDataset, KerasPrefetcher)):
        return None
    if isinstance(x, keras.utils.PyDataset):
        held = copies.get(id(x))
        if held is not None and held[0] is x:
            return held[1]
        watched = session.watch(x, "pydataset")
        if watched is not None:
            copies[id(x)] = (x, watched)
        return watched
    if isinstance(x, types.GeneratorType):
        return session.watch(x, "generator", framework="generator", settings={"backend": keras.backend.backend()})
    return None


@dataclasses.dataclass(frozen=True)
class KerasAdapter(Adapter):
    """Watches a ``PyDataset``, hooks ``fit``/``evaluate``/``predict``, reads the
    Prefetcher of a ``PyDataset`` as a ``PyDataset``."""

    def describe(self, loader: Any) -> MetaFields:
        return pydataset_meta(self.spec, loader)

    def watch(
        self, loader: Any, meta: TraceMeta, sample_memory: bool, key: Any = None
    ) -> tuple[WatchedPyDataset, Recorder]:
        return watch_pydataset(self.spec, loader, meta, sample_memory)

    def autowatch(self, session: Watching, module: types.ModuleType) -> Callable[[], None]:
        return autowatch_models(session)

    def prefetcher_form(self) -> Callable[[Any], Any]:
        """The prefetcher as a PyDataset that Keras reads in order."""
        return KerasPrefetcher

    def run_model(
        self, model: Any, method: str, loader: Any, kwargs: dict[str, Any], probe: Probed, steps: int
    ) -> None:
        run_model(model, method, loader, kwargs, ProbeCallback(probe), steps)


ADAPTERS: dict[str, type[Adapter]] = {"keras": KerasAdapter}
