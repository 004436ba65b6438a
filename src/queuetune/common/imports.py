"""Run a function once a module is imported: now if it already is, else right
after its code has run (a finder on ``sys.meta_path``), so that ``queuetune run``
can watch a framework's loaders without importing a framework the script never
imports."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


class _AfterExec(importlib.abc.Loader):
    """A module's own loader, run as before, then the hooks waiting for it.
    The module keeps its own loader in ``__loader__`` and ``__spec__.loader``."""

    def __init__(self, inner: Any, hooks: ImportHooks, name: str) -> None:
        self._inner = inner
        self._hooks = hooks
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._inner
        if module.__spec__ is not None:
            module.__spec__.loader = self._inner
        self._inner.exec_module(module)
        self._hooks.imported(self._name, module)


class ImportHooks(importlib.abc.MetaPathFinder):
    """Hooks run after named modules are imported, until :meth:`remove`.

    >>> import json
    >>> seen = []
    >>> hooks = ImportHooks()
    >>> hooks.add("json", lambda module: seen.append(module.__name__))
    >>> hooks.remove()
    >>> seen
    ['json']
    """

    def __init__(self) -> None:
        self._waiting: dict[str, list[Callable[[ModuleType], None]]] = {}
        self._lock = threading.Lock()
        self._installed = False

    def add(self, name: str, hook: Callable[[ModuleType], None]) -> None:
        """Call ``hook(module)`` once module ``name`` is imported (now, if it is)."""
        module = sys.modules.get(name)
        if module is not None:
            hook(module)
            return
        with self._lock:
            self._waiting.setdefault(name, []).append(hook)
            if not self._installed:
                sys.meta_path.insert(0, self)
                self._installed = True

    def remove(self) -> None:
        """Take the finder off ``sys.meta_path``; hooks not yet run never will."""
        with self._lock:
            self._waiting.clear()
            if self._installed:
                try:
                    sys.meta_path.remove(self)
                except ValueError:
                    pass
                self._installed = False

    def imported(self, name: str, module: ModuleType) -> None:
        with self._lock:
            hooks = self._waiting.pop(name, [])
        for hook in hooks:
            hook(module)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._waiting:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _AfterExec(spec.loader, self, fullname)
        return spec
