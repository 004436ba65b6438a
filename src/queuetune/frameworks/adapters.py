"""Each framework's :class:`~.base.Adapter`, found in its folder's ``watch.py`` and
imported only when asked for: a watcher imports its framework."""

from __future__ import annotations

import importlib
import importlib.util
from typing import cast

from .base import Adapter, Framework


def adapter_of(spec: Framework) -> Adapter:
    """The adapter of ``spec``'s framework: the one its folder's ``watch.py`` names
    in ``ADAPTERS``, or the base :class:`~.base.Adapter` (nothing to watch or
    hook) where none is named.

    >>> from queuetune.frameworks import NONE, PYTHON
    >>> type(adapter_of(PYTHON)).__name__, type(adapter_of(NONE)).__name__
    ('PythonAdapter', 'Adapter')
    """
    home = type(spec).__module__.rpartition(".")[0]
    name = f"{home}.watch"
    if not home or importlib.util.find_spec(name) is None:
        return Adapter(spec)
    adapters = cast(dict[str, type[Adapter]], getattr(importlib.import_module(name), "ADAPTERS", {}))
    return adapters.get(spec.name, Adapter)(spec)
