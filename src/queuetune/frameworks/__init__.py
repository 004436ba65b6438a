"""The frameworks queuetune knows, one folder each, under one set of names: the registry.

Each framework's folder holds everything queuetune knows about it: ``spec.py``
(pure: how to recognise its loader, its settings, its depth rule, its footprint,
its rules for the queue model; it never imports the framework) and ``watch.py``
(its :class:`~.base.Adapter`: watching its loaders, hooking into it, reading
its loaders in tuning trials; imported only when a loader of it is at hand, see
:mod:`.adapters`). Adding a framework is adding its folder, importing its spec
below, giving it its place in :data:`FRAMEWORKS` and its name among
:data:`~.base.FrameworkName` (see docs/development.md).
"""

from __future__ import annotations

from typing import Any

from ..model.rules import LoaderRules
from ..record.tensor_kinds import add_tensor_kind
from ..record.trace import TraceMeta
from .base import Framework, FrameworkName, Tensors, reachable_depths, require
from .keras.spec import GENERATOR, KERAS
from .python.spec import NONE, PYTHON
from .queuetune.spec import QUEUETUNE
from .ray.spec import RAY
from .tfdata.spec import TFDATA
from .torch.spec import TORCH

__all__ = [
    "ESTIMATED",
    "FRAMEWORKS",
    "GENERATOR",
    "KERAS",
    "NONE",
    "PYTHON",
    "QUEUETUNE",
    "RAY",
    "TENSORS",
    "TFDATA",
    "TORCH",
    "TUNED",
    "Framework",
    "detect",
    "get",
    "model_framework",
    "reachable_depths",
    "require",
    "rules_of",
    "tensors_of",
]

#: Every framework by name; :func:`detect` asks them in this order.
FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (KERAS, GENERATOR, TORCH, TFDATA, RAY, NONE, PYTHON, QUEUETUNE)}
#: The names :func:`queuetune.estimate.memory.footprint` takes, with their settings.
ESTIMATED: dict[str, tuple[str, ...]] = {
    name: f.estimate_settings for name, f in FRAMEWORKS.items() if f.estimate_settings is not None
}
#: The names whose loaders the tuner takes.
TUNED: tuple[FrameworkName, ...] = tuple(f.name for f in FRAMEWORKS.values() if f.tuned_knobs)


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


#: Each framework's own tensors by name (see :class:`.base.Tensors`).
TENSORS: dict[str, Tensors] = {f.tensors.name: f.tensors for f in FRAMEWORKS.values() if f.tensors is not None}


def tensors_of(obj: Any) -> Tensors | None:
    """The tensors ``obj`` is one of, or None (a numpy array, anything else);
    told by its type, asked once per type (the Prefetcher asks for every array).

    >>> tensors_of([1.0]) is None
    True
    """
    kind = type(obj)
    try:
        return _TENSORS_BY_TYPE[kind]
    except KeyError:
        found = next((tensors for tensors in TENSORS.values() if tensors.recognises(obj)), None)
        _TENSORS_BY_TYPE[kind] = found
        return found


_TENSORS_BY_TYPE: dict[type, Tensors | None] = {}

# A sample's fingerprint reads each framework's tensors as arrays (the record layer names none).
for _framework in FRAMEWORKS.values():
    if _framework.tensor_kind is not None:
        add_tensor_kind(_framework.tensor_kind)


def model_framework(consumer: Any) -> Framework | None:
    """The framework whose model ``consumer`` is (one that reads a loader itself), or None.

    >>> model_framework(print) is None
    True
    """
    return next((f for f in FRAMEWORKS.values() if f.recognises_model(consumer)), None)


def rules_of(meta: TraceMeta) -> LoaderRules:
    """The rules of the loader a trace's ``meta`` describes (shared, take, threads,
    workers not known, when its framework is unknown).

    >>> rules_of(TraceMeta(framework="torch", settings={"num_workers": 4}))
    LoaderRules(assignment='round_robin', release='take', processes=True, workers=4)
    >>> rules_of(TraceMeta(framework="keras", settings={"workers": 4})).release
    'request'
    """
    framework = FRAMEWORKS.get(meta.framework or "")
    return LoaderRules() if framework is None else framework.rules(meta.settings or {})
