"""A session: every loader a program iterates, watched without a change to its
code, as ``queuetune run`` needs. Each framework's module says where to hook in
(:meth:`~queuetune.frameworks.base.Adapter.autowatch`); the session installs
those hooks when the framework is imported, keeps what they watch, and undoes
every hook at the end."""

from __future__ import annotations

import functools
import os
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, Unpack

from ..common.imports import ImportHooks
from ..common.kinds import LoaderKind
from ..record.recorder import Live, Recorder
from ..record.trace import Trace
from .probe import Probe

if TYPE_CHECKING:
    from ..frameworks.base import Framework, FrameworkName
    from ..record.records import MetaFields

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Watched:
    """One loader the session watches: its label (kind, number and where the
    program first iterated it) and how to get its trace."""

    label: str
    kind: LoaderKind
    trace: Callable[[], Trace]
    close: Callable[[], None] = field(default=lambda: None)
    live: Callable[[], Live] | None = None
    #: What it records to, read as the run goes (see :mod:`queuetune.sinks.journal`).
    recorder: Recorder | None = None


class Session:
    """Watches every loader of a known kind that is iterated while it is
    active: torch ``DataLoader``, Keras ``fit``/``evaluate``/``predict`` on a
    ``PyDataset`` or a generator, tf.data ``Dataset``, Ray Data ``Dataset``
    (its ``iter_*`` methods), queuetune's ``Prefetcher``. A framework whose
    hook fails (another version than queuetune knows) is left alone, and said so:
    the program's own import never fails because of it. In a process forked
    while it is active, it lists the loaders that process iterates, labelled
    ``... in process <pid>``, and none of its parent's.

    >>> import queuetune
    >>> with Session() as session:
    ...     with queuetune.Prefetcher(range(4), max_bytes="1MiB", workers=1) as loader:
    ...         total = sum(loader)
    >>> [w.kind for w in session.loaders], total
    (['prefetcher'], 6)
    """

    def __init__(self, sample_memory: bool = True) -> None:
        self.sample_memory = sample_memory
        #: The loaders iterated in this process (a forked child starts with none: those before are its parent's).
        self.loaders: list[Watched] = []
        #: Called, in the thread that added it, after each loader is added.
        self.on_add: list[Callable[[], object]] = []
        #: Whether this process was forked from the one that started the session.
        self.forked = False
        #: Loaders left alone: type name -> why (each said once).
        self.left_alone: dict[str, str] = {}
        self.active = False
        self._hooks = ImportHooks()
        self._undo: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def start(self) -> Session:
        """Hook into every framework, now or when it is imported."""
        from ..frameworks import FRAMEWORKS

        self.active = True
        _ACTIVE.add(self)
        for framework in FRAMEWORKS.values():
            if framework.autowatch_module is not None:
                hook = functools.partial(_autowatch, framework)
                self._hooks.add(framework.autowatch_module, self._installer(framework.name, hook))
        return self

    def _installer(
        self, name: FrameworkName, install: Callable[[Session, ModuleType], Callable[[], None] | None]
    ) -> Callable[[ModuleType], None]:
        def hook(module: ModuleType) -> None:
            if not self.active:
                return
            try:
                undo = install(self, module)
            except Exception as exc:  # a version queuetune does not know: leave it alone
                with self._lock:
                    self.left_alone.setdefault(f"{name} loader", f"queuetune could not hook in ({exc})")
                return
            if undo is not None:
                self._undo.append(undo)

        return hook

    def stop(self) -> None:
        """Undo every hook; what was watched stays readable."""
        self.active = False
        _ACTIVE.discard(self)
        self._hooks.remove()
        while self._undo:
            self._undo.pop()()

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add(
        self,
        kind: LoaderKind,
        trace: Callable[[], Trace],
        close: Callable[[], None] | None = None,
        live: Callable[[], Live] | None = None,
        recorder: Recorder | None = None,
    ) -> str:
        """Keep a loader just watched; return its label, which names its
        ``recorder``'s trace where nothing named it before."""
        with self._lock:
            number = 1 + sum(1 for w in self.loaders if w.kind == kind)
            label = f"{kind} {number}" + where_called()
            if self.forked:
                label += f" in process {os.getpid()}"
            self.loaders.append(Watched(label, kind, trace, close or (lambda: None), live, recorder))
        for hook in list(self.on_add):
            hook()
        if recorder is not None:
            recorder.meta.name = recorder.meta.name or label
        return label

    def live(self) -> list[tuple[str, Live]]:
        """Each loader's :class:`~queuetune.record.recorder.Live` reading now."""
        with self._lock:
            loaders = list(self.loaders)
        return [(w.label, w.live()) for w in loaders if w.live is not None]

    def watch(self, loader: Any, kind: LoaderKind, /, **meta: Unpack[MetaFields]) -> Any:
        """``queuetune.watch(loader)``, kept; or None, said once per type, when
        queuetune cannot watch it. ``meta``: entries of its trace's
        :class:`~queuetune.record.trace.TraceMeta` to set."""
        from .probe import probe_of, watch

        try:
            watched = watch(loader, sample_memory=self.sample_memory)
        except (TypeError, ValueError) as exc:
            self.leave(loader, str(exc))
            return None
        probe = probe_of(watched)
        self.add(kind, probe.trace, probe.close, probe.recorder.live, probe.recorder)
        for name, value in meta.items():
            setattr(probe.recorder.meta, name, value)
        return watched

    def probe(self, watched: Any) -> Probe:
        """The :class:`~queuetune.probing.probe.Probe` of a loader :meth:`watch` returned."""
        from .probe import probe_of

        return probe_of(watched)

    def leave(self, loader: Any, why: str) -> None:
        """Note a loader left alone (once per type)."""
        with self._lock:
            self.left_alone.setdefault(type(loader).__qualname__, why)

    def _forked(self) -> None:
        # In the child, just forked: the loaders so far are the parent's (their helper
        # threads stayed there), and a lock another thread held was copied held.
        self._lock = threading.Lock()
        self.loaders = []
        self.on_add = []  # the parent's sinks, whose threads stayed there
        self.forked = True

    def traces(self) -> list[tuple[Watched, Trace]]:
        """Each loader's trace, its open run ended and its helpers stopped."""
        out = []
        for watched in self.loaders:
            watched.close()
            out.append((watched, watched.trace()))
        return out


#: The sessions started and not yet stopped, told when this process forks.
_ACTIVE: weakref.WeakSet[Session] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for session in list(_ACTIVE):
        session._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _autowatch(spec: Framework, session: Session, module: ModuleType) -> Callable[[], None] | None:
    """``spec``'s adapter hooked into ``module`` for ``session`` (the adapter
    imported now: its framework is)."""
    from ..frameworks.adapters import adapter_of

    return adapter_of(spec).autowatch(session, module)


def where_called() -> str:
    """`` (file:line)`` of the innermost frame outside queuetune and the
    frameworks (the program's line that iterated the loader), or ``""``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _library(filename):
            return f" ({os.path.basename(filename)}:{frame.f_lineno})"
        frame = frame.f_back
    return ""


def _library(filename: str) -> bool:
    path = os.path.abspath(filename)
    return (
        path.startswith(_PACKAGE + os.sep)
        or f"{os.sep}site-packages{os.sep}" in path
        or f"{os.sep}dist-packages{os.sep}" in path
        or filename.startswith("<frozen")
        or path.startswith(os.path.dirname(os.__file__) + os.sep)
    )
