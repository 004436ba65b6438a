"""What every framework module fills in: the :class:`Framework` protocol (the
queue model's :class:`~queuetune.model.rules.LoaderRules` among its answers)."""

from __future__ import annotations

import importlib
import inspect
import numbers
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Unpack

from ..common.kinds import LoaderKind, Settings
from ..common.units import nonnegative_int
from ..model.rules import LoaderRules
from ..record.tensor_kinds import TensorKind

if TYPE_CHECKING:
    from ..record.recorder import Live, Recorder
    from ..record.records import MetaFields
    from ..record.trace import Trace, TraceMeta

#: A footprint's read-ahead lines: (label, batches, why).
Lines = list[tuple[str, int, str]]


#: The frameworks' names, each its folder's and its :class:`Framework`'s: the
#: registry (:data:`queuetune.frameworks.FRAMEWORKS`) holds one of each. A trace
#: may name another (it keeps what it read), so its meta holds a ``str``.
FrameworkName = Literal["keras", "generator", "torch", "tfdata", "ray", "none", "python", "queuetune"]


#: How ``queuetune estimate`` reads a setting from its command line.
SettingKind = Literal["count", "positive", "bytes", "text", "flag"]


@dataclass(frozen=True)
class Setting:
    """One setting of a framework's loader that the estimate takes: its name (the
    framework's own), how a command line gives it (``kind``: a count from 0, a
    positive count, a byte size, text, or a flag that sets it True) and its help.

    >>> Setting("num_workers", "count", "DataLoader num_workers (default 0)").flag
    '--num-workers'
    """

    name: str
    kind: SettingKind
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


class Tensors:
    """A framework's own tensors seen as numpy arrays and back, without a copy:
    what lets the :class:`~queuetune.Prefetcher` move them through shared memory
    and collate them, without knowing the framework. ``name`` marks the arrays
    that go back to tensors. None of it imports the framework until a tensor of
    it is at hand.

    >>> Tensors().recognises(1.0), Tensors().as_array(1.0)
    (False, None)
    """

    name: str = "none"

    def recognises(self, obj: Any) -> bool:
        """Whether ``obj`` is one of its tensors: by its type alone, the same
        answer for every object of a type."""
        return False

    def as_array(self, obj: Any) -> tuple[Any, str | None] | None:
        """A numpy array over the tensor's memory, and the name of a dtype numpy
        lacks where its bits stand for one; None where it cannot be one."""
        return None

    def from_array(self, array: Any, dtype: str | None = None) -> Any:
        """The tensor over ``array``'s memory: what :meth:`as_array` undoes."""
        return array

    def portable(self, obj: Any) -> Any:
        """The tensor as it must be to reach another process unchanged, where its
        framework's own pickling would lose something of it (torch's drops a
        conjugate or negative view's bit): ``obj`` itself, or a copy that keeps it."""
        return obj

    def owns_memory(self, obj: Any) -> bool:
        """Whether the tensor's memory is its alone (no view, no other owner)."""
        return False

    def collate(self, items: list[Any], allocate: Callable[[tuple[int, ...], Any], Any] | None = None) -> Any:
        """The framework's own collation of ``items`` (stacked into ``allocate``'s
        array where it gives one)."""
        raise TypeError(f"{self.name} has no collation")

    def in_worker_process(self) -> None:
        """What a worker process does first, where the framework is loaded."""


@dataclass(frozen=True)
class Framework:
    """What queuetune knows about one kind of loader; each framework module makes
    its own and :mod:`queuetune.frameworks` names them all.

    A loader's *settings* are the knobs that bound its queue; its *depth* is that
    bound: batches being built, or built and not yet taken by the consumer; depth
    0 is no read-ahead at all (the consumer builds each batch when it asks).
    ``depth_knob``/``workers_knob``: the settings the tuner varies for depth and
    for workers; ``tuned_knobs``: every setting the tuner passes to a factory;
    ``settings``: the settings :func:`queuetune.estimate.memory.footprint` takes (and
    ``queuetune estimate``'s flags), or None where it makes no estimate;
    ``extra``: the pip extra that installs the framework.

    >>> fw = Framework("demo", depth_knob="buffer")
    >>> fw.recognises([1]), fw.depth({}), fw.rules({})
    (False, 0, LoaderRules(assignment='shared', release='take', processes=False, workers=None))
    """

    name: FrameworkName
    depth_knob: str | None = None
    workers_knob: str | None = None
    tuned_knobs: tuple[str, ...] = ()
    settings: tuple[Setting, ...] | None = None
    extra: str | None = None
    #: A plain iterable: the tuner reads it ahead with queuetune's own thread
    #: (``buffer`` batches), in trials and in the job it hands over.
    read_ahead_by_queuetune: bool = False
    #: The methods a tuning job may read the loader with ("fit" means the default).
    job_methods: tuple[str, ...] = ("fit", "predict", "evaluate")
    #: The module whose import lets :meth:`autowatch` hook in (None: it never does).
    autowatch_module: str | None = None
    #: How to share a dataset among the workers when each reads it whole (None: no advice).
    shard_advice: str | None = None
    #: What lowers the consumer's time to take a batch already built (None: the general advice).
    handover_advice: str | None = None
    #: What copies its batches to the device before the step asks (None: the general advice).
    copy_advice: str | None = None
    #: Why its loader serves an item more than once with no cause the pattern tells, and the fix (None: no advice).
    repeat_advice: str | None = None
    #: Its own tensors, as the Prefetcher moves them (None: it has none).
    tensors: Tensors | None = None
    #: Its tensors as a sample's fingerprint reads them (None: it has none of its own).
    tensor_kind: TensorKind | None = None
    #: Why one watched run of its loader gives no recommendation (None: the
    #: queue model fitted to the run gives one, see queuetune.tune.recommend).
    unmodelled: str | None = None

    @property
    def estimate_settings(self) -> tuple[str, ...] | None:
        """The names of :attr:`settings` (None where the framework makes no estimate)."""
        return None if self.settings is None else tuple(s.name for s in self.settings)

    # --- recognising a loader, without importing its framework ---------------------------

    def recognises(self, loader: Any) -> bool:
        """Whether ``loader`` is this framework's (never by importing the framework)."""
        return False

    # --- the depth rule ---------------------------------------------------------------

    def depth(self, settings: Settings) -> int:
        """The depth these settings give."""
        return 0

    def settings_for(self, depth: int, workers: int | None) -> Settings | None:
        """Settings that give ``depth`` with ``workers`` workers, or None if none do."""
        return None

    def workers(self, settings: Settings) -> int:
        """Workers building batches at once under these settings (at least 1)."""
        if self.workers_knob is None:
            return 1
        return max(1, int(settings.get(self.workers_knob) or 0))

    def rules(self, settings: Settings) -> LoaderRules:
        """How its loader with these settings hands batches to workers and frees places."""
        return LoaderRules()

    def settings_of(self, loader: Any) -> Settings:
        """The settings a built loader carries, as the framework reads them."""
        return {}

    def recognises_model(self, consumer: Any) -> bool:
        """Whether a tuning job's consumer is a model of this framework that reads
        the loader itself (its adapter's :meth:`Adapter.run_model` runs it), never
        by importing the framework."""
        return False

    def batch_count(self, loader: Any) -> int | None:
        """The batches a loader says it holds where ``len()`` is not how it says so (None: ask ``len()``)."""
        return None

    # --- the estimate -----------------------------------------------------------------

    def read_ahead(self, settings: Settings, batch_bytes: int) -> tuple[Settings, Lines, int]:
        """For :func:`queuetune.estimate.memory.footprint`: the settings resolved to their
        values, the read-ahead lines, and the depth they give."""
        raise ValueError(f"{self.name} has no estimate")

    # --- tuning -----------------------------------------------------------------------

    def check_job(self, model: Any, method: str) -> None:
        """A ValueError or TypeError if a tuning job cannot read this loader so."""
        if method not in self.job_methods:
            shown = ", ".join(repr(m) for m in self.job_methods)
            raise ValueError(f"method must be {_either(shown)}, got {method!r}")

    def factory_kwargs(self, settings: Settings) -> dict[str, Any]:
        """The settings the factory is called with (queuetune applies the others itself)."""
        return dict(settings)

    def model_settings(self, default: Settings) -> Settings | None:
        """Settings for a second run that the queue model is fitted to, beside the
        default's: None when the default's run shows the batches being built
        (see :func:`queuetune.model.fit_unbuffered`)."""
        return None

    def estimated_peak(self, depth: int, batch_bytes: int) -> tuple[int, int] | None:
        """Peak batches and bytes in flight, for a loader whose batches the probe
        cannot see being built (None: the probe measures them)."""
        return None


class Watching(Protocol):
    """What an adapter's hooks need of a :class:`~queuetune.probing.session.Session`."""

    active: bool

    def watch(self, loader: Any, kind: LoaderKind, /, **meta: Unpack[MetaFields]) -> Any:
        """The watched form of ``loader`` (None: left alone); ``meta``: what its trace's meta holds besides."""

    def probe(self, watched: Any) -> Probed:
        """The probe of a loader :meth:`watch` returned."""

    def add(
        self,
        kind: LoaderKind,
        trace: Callable[[], Trace],
        close: Callable[[], None],
        live: Callable[[], Live] | None = None,
        recorder: Recorder | None = None,
    ) -> str:
        """Keep a loader that records itself; its label (its ``recorder``'s trace's
        name, where nothing named it before)."""


class Probed(Protocol):
    """What a session's probe gives an adapter: the recorder behind it."""

    recorder: Recorder


@dataclass(frozen=True)
class Adapter:
    """What acts on the live loaders of the framework ``spec`` describes: watching
    one, hooking into the framework, reading one in tuning trials. Each
    framework's ``watch.py`` makes its own (its ``ADAPTERS``, by framework name;
    :func:`queuetune.frameworks.adapters.adapter_of` finds them); this base is a
    framework with none: not watched (read as a plain iterable), not hooked.

    >>> from queuetune.frameworks import NONE
    >>> Adapter(NONE).watch([1], None, False) is None
    True
    """

    spec: Framework

    def describe(self, loader: Any) -> MetaFields:
        """What the trace of ``loader`` says of it that this adapter knows (its
        framework, settings, depth, batches...): the caller merges it into the
        trace's meta (:func:`queuetune.record.records.with_fields`) before
        :meth:`watch`. Nothing by default."""
        return {}

    def watch(self, loader: Any, meta: TraceMeta, sample_memory: bool, key: Any = None) -> tuple[Any, Recorder] | None:
        """A watched ``loader`` and its recorder, or None when the framework has no
        watcher of its own. ``meta``: the trace's meta, what :meth:`describe` says
        merged in (the recorder's; an adapter adds nothing to it). ``key``: what
        keys a sample where batches carry no index (see :func:`queuetune.watch`),
        for the watchers that can see samples."""
        return None

    def autowatch(self, session: Watching, module: ModuleType) -> Callable[[], None] | None:
        """Hook into the framework, whose :attr:`~Framework.autowatch_module` is
        ``module`` (imported by now), so that every loader of it the program
        iterates while ``session`` is active is watched through ``session``;
        return what undoes the hook (``queuetune run``)."""
        return None

    def prefetcher_form(self) -> Callable[[Any], Any] | None:
        """What turns a :class:`~queuetune.Prefetcher` of this framework's loader into
        the form the framework reads, or None when it reads the prefetcher as it is."""
        return None

    def tuner_defaults(self, factory: Callable[..., Any], loader: Any, kwargs: dict[str, Any]) -> Settings:
        """The settings a factory's loader has when it is given none (its defaults)."""
        carried = self.spec.settings_of(loader)
        return {k: carried[k] for k in self.spec.tuned_knobs if k in carried}

    def run_model(
        self, model: Any, method: str, loader: Any, kwargs: dict[str, Any], probe: Probed, steps: int
    ) -> None:
        """Let ``model`` (one :meth:`Framework.recognises_model` took) read ``steps``
        batches of the watched ``loader`` by its ``method``, its consumption recorded
        through ``probe``."""
        raise TypeError(f"{self.spec.name} has no model that reads a loader")

    def configure(self, job: Any, settings: Settings) -> Any:
        """A tuning job with the settings queuetune applies itself (none by default)."""
        return job

    def batches(self, watched: Any, job: Any) -> Iterator[Any]:
        """The batches a step function reads from the watched loader."""
        return iter(watched)

    def bound(self) -> Framework:
        """The spec bound to what it needs to know before a baseline (Ray: the cluster)."""
        return self.spec

    def measured(self, spec: Framework, baseline: Trace) -> Framework:
        """``spec`` (this one, bound) bound to what the baseline trial measured (Ray: the block size)."""
        return spec


def has_base(obj: Any, name: str, module: str) -> bool:
    """Whether a class named ``name`` from a module under ``module`` is in ``obj``'s
    MRO: how a framework recognises its loader without importing the framework.

    >>> has_base([], "list", "builtins")
    True
    """
    return any(cls.__name__ == name and cls.__module__.startswith(module) for cls in type(obj).__mro__)


def reachable_depths(framework: Framework, workers: int | None, upto: int = 32) -> list[int]:
    """Depths from 0 to ``upto`` that some setting of ``framework`` gives.

    >>> from queuetune.frameworks import TORCH
    >>> reachable_depths(TORCH, 4, 12)
    [4, 8, 12]
    """
    return [d for d in range(0, upto + 1) if framework.settings_for(d, workers) is not None]


def count_setting(settings: Settings, name: str) -> int | None:
    """The count a setting holds (at least 1), or None where it holds none.

    >>> count_setting({"workers": 0}, "workers"), count_setting({}, "workers")
    (1, None)
    """
    value = settings.get(name)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return max(1, int(value))
    return None


def flag(value: Any, what: str) -> bool:
    """A setting that must be True or False.

    >>> flag(True, "pin_memory")
    True
    """
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be True or False, got {value!r}")
    return value


def buffer_depth(buffer: int) -> int:
    """One producer and a buffer of ready batches: the buffer plus the one being
    built (or waiting for room); a buffer of 0 is no read-ahead at all.

    >>> buffer_depth(3), buffer_depth(0)
    (4, 0)
    """
    buffer = nonnegative_int(buffer, "buffer")
    return buffer + 1 if buffer > 0 else 0


def buffer_for(depth: int) -> int | None:
    """The buffer that gives ``depth`` (None for depth 1: one producer with no room
    ahead of it is no buffer at all).

    >>> buffer_for(4), buffer_for(0), buffer_for(1)
    (3, 0, None)
    """
    if depth == 1 or depth < 0:
        return None
    return max(depth - 1, 0)


def parameter_default(factory: Callable[..., Any], name: str) -> Any:
    """The default of the factory's keyword argument ``name`` (None when it has none).

    >>> parameter_default(lambda buffer=8: None, "buffer")
    8
    """
    try:
        parameter = inspect.signature(factory).parameters.get(name)
    except (TypeError, ValueError):
        return None
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return None
    return parameter.default


def _either(shown: str) -> str:
    head, _, last = shown.rpartition(", ")
    return f"{head} or {last}" if head else last


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise an ImportError naming the extra to install.

    >>> require("json", "none").__name__
    'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{module} is needed for this: pip install 'queuetune[{extra}]' ({exc})") from None
