"""The tuner's contract with your code: a factory that builds a loader and its consumer."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..frameworks import Framework, detect, model_framework
from ..frameworks.adapters import adapter_of

Factory = Callable[..., Any]


@dataclass
class Job:
    """What a factory returns: the loader, and the consumer that takes its batches.

    The consumer is either ``step`` (called with each batch, for a plain loop) or
    a Keras ``model`` whose ``method`` ("fit", "predict" or "evaluate") is called
    with the loader and ``kwargs``. A Ray ``Dataset`` is read with ``step``
    through its ``method`` "iter_batches" (the default for it) or
    "iter_torch_batches", called with ``kwargs`` (``batch_size``...).

    >>> job = Job(loader=[1, 2, 3], step=print)
    >>> job.method
    'fit'
    """

    loader: Any
    step: Callable[[Any], Any] | None = None
    model: Any = None
    method: str = "fit"
    kwargs: dict[str, Any] = field(default_factory=dict)


def as_job(made: Any) -> Job:
    """Accept a :class:`Job`, or a ``(loader, step_function)`` or ``(loader, keras_model)`` pair.

    >>> as_job(([1], len)).step is len
    True
    """
    if isinstance(made, Job):
        job = made
    elif isinstance(made, tuple) and len(made) == 2:
        loader, consumer = made
        if model_framework(consumer) is not None:
            job = Job(loader, model=consumer)
        elif callable(consumer):
            job = Job(loader, step=consumer)
        else:
            raise TypeError(
                f"the factory's consumer must be a step function or a Keras model, got {type(consumer).__name__}"
            )
    else:
        raise TypeError(f"the factory must return queuetune.Job(...) or (loader, consumer), got {type(made).__name__}")
    if job.model is None and job.step is None:
        raise TypeError("the job needs a consumer: a step function or a Keras model")
    try:
        framework = detect(job.loader)
    except TypeError:
        framework = None  # refused with a clearer message where its framework is asked for
    if framework is not None:
        framework.check_job(job.model, job.method)
    elif job.method not in ("fit", "predict", "evaluate"):
        raise ValueError(f"method must be 'fit', 'predict' or 'evaluate', got {job.method!r}")
    return job


def framework_of(loader: Any) -> Framework:
    """The framework of a loader the tuner is given (any iterable is ``python``).

    >>> framework_of(iter([1])).name
    'python'
    """
    try:
        return detect(loader)
    except TypeError:
        raise TypeError(f"cannot tune {type(loader).__name__}: it is not a loader") from None


def build(factory: Factory, framework: Framework, settings: dict[str, Any]) -> Job:
    """Call the factory with the settings it takes and return the job, with the
    settings queuetune applies itself (a Ray budget, say) applied."""
    kwargs = framework.factory_kwargs(settings)
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        job: Job = adapter_of(framework).configure(as_job(factory(**kwargs)), settings)
        return job
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        names = {p.name for p in parameters}
        knob = framework.depth_knob
        if knob is not None and knob in kwargs and knob not in names:
            raise TypeError(f"the factory must take the keyword argument {knob!r}")
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    job = adapter_of(framework).configure(as_job(factory(**kwargs)), settings)
    return job


def load_factory(spec: str) -> Factory:
    """The function named by ``FILE.py:FACTORY``, imported from that file.

    >>> load_factory("missing.py:make")
    Traceback (most recent call last):
    ...
    ValueError: no such file: 'missing.py'
    """
    import importlib.util

    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"expected FILE.py:FACTORY, got {spec!r}")
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no such file: {path!r}")
    module_spec = importlib.util.spec_from_file_location(f"queuetune_factory_{file.stem}", file)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f"cannot import {path!r} as Python")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    factory: object = getattr(module, name, None)
    if factory is None:
        raise ValueError(f"{path!r} has no {name!r}")
    if not callable(factory):
        raise TypeError(f"{name!r} in {path!r} is not a function")
    return factory
