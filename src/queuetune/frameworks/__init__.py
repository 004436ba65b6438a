"""The frameworks queuetune knows, one module each, under one set of names.

Each framework's module holds everything queuetune knows about it (how to
recognise its loader, its depth rule, its footprint, its settings, its rules
for the queue model, its watcher); none imports its framework until a loader
of it is watched. Adding a framework is adding its module and one line below.
"""

from __future__ import annotations

from typing import Any

from ..trace import TraceMeta
from .base import Framework, LoaderRules, reachable_depths, require
from .keras import GENERATOR, KERAS
from .python import NONE, PYTHON
from .queuetune import QUEUETUNE
from .ray import RAY
from .tfdata import TFDATA
from .torch import TORCH

__all__ = [
    "ESTIMATED",
    "FRAMEWORKS",
    "GENERATOR",
    "KERAS",
    "NONE",
    "PYTHON",
    "QUEUETUNE",
    "RAY",
    "TFDATA",
    "TORCH",
    "TUNED",
    "Framework",
    "LoaderRules",
    "detect",
    "get",
    "reachable_depths",
    "require",
    "rules_of",
]

#: Every framework by name; :func:`detect` asks them in this order.
FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (KERAS, GENERATOR, TORCH, TFDATA, RAY, NONE, PYTHON, QUEUETUNE)}
#: The names :func:`queuetune.memory.footprint` takes, with their settings.
ESTIMATED: dict[str, tuple[str, ...]] = {
    name: f.estimate_settings for name, f in FRAMEWORKS.items() if f.estimate_settings is not None
}
#: The names whose loaders the tuner takes.
TUNED: tuple[str, ...] = tuple(name for name, f in FRAMEWORKS.items() if f.tuned_knobs)


def get(name: str) -> Framework:
    """The framework called ``name``.

    >>> get("torch").depth({"num_workers": 2})
    4
    """
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise ValueError(f"unknown framework {name!r}; known frameworks: {', '.join(FRAMEWORKS)}") from None


def detect(loader: Any) -> Framework:
    """The framework of ``loader`` (a plain iterable is ``python``), without importing any.

    >>> detect(iter([1])).name
    'python'
    """
    for framework in FRAMEWORKS.values():
        if framework.recognises(loader):
            return framework
    raise TypeError(f"{type(loader).__name__} is not a loader: it is not iterable")


def rules_of(meta: TraceMeta) -> LoaderRules:
    """The rules of the loader a trace's ``meta`` describes (shared, take, threads when unknown).

    >>> rules_of(TraceMeta(framework="torch", settings={"num_workers": 4}))
    LoaderRules(assignment='round_robin', release='take', processes=True)
    >>> rules_of(TraceMeta(framework="keras", settings={"workers": 4})).release
    'request'
    """
    framework = FRAMEWORKS.get(meta.framework or "")
    return LoaderRules() if framework is None else framework.rules(meta.settings or {})
