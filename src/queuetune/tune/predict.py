"""The queue model's curve over the settings a framework can reach."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..frameworks import Framework, reachable_depths, rules_of
from ..model import PipelineModel, Prediction, fit, fit_unbuffered, predict_curve
from ..record.trace import Trace
from .machine import Machine


@dataclass
class Predicted(Prediction):
    """What the model predicts for one setting: the :class:`~queuetune.model.Prediction`
    at its depth and workers, the setting, and ``peak_built_bytes`` (built and not
    yet released, what the probe reports as in flight)."""

    settings: dict[str, Any]
    peak_built_bytes: float
    #: What bounds its throughput beyond the queue: ``"cores"`` where the machine's
    #: cores cannot run its builds and steps any faster (see :mod:`.machine`).
    limit: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Predicted:
        """Read back what :meth:`to_dict` wrote (a saved result; one saved
        before a field was added has its default).

        >>> row = {f.name: 0 for f in fields(Predicted)} | {"settings": {"buffer": 1}}
        >>> Predicted.from_dict(row).settings
        {'buffer': 1}
        """
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def predict(
    trace: Trace,
    framework: Framework,
    worker_counts: list[int | None],
    max_depth: int,
    seed: int,
    unbuffered: Trace | None = None,
    machine: Machine | None = None,
) -> list[Predicted]:
    """The model fitted to ``trace`` (or to ``unbuffered`` beside it, see
    :func:`~queuetune.model.fit_unbuffered`), simulated at every depth the
    framework's settings reach with each worker count (empty when the traces
    cannot make a model). On ``machine`` (what the run took of the cores, see
    :mod:`.machine`), each throughput is what the cores give it
    (:meth:`.machine.Machine.bound`); those it lowers by ``BOUND_NAMED`` or more
    have ``limit="cores"``."""
    model = _fitted(trace, unbuffered)
    if model is None:
        return []
    return [row for count in worker_counts for row in _rows(model, framework, count, max_depth, seed, machine)]


#: The share by which the machine must lower a prediction to be named its limit.
BOUND_NAMED = 0.01


def search_workers(
    trace: Trace,
    framework: Framework,
    default: int,
    most: int,
    max_depth: int,
    seed: int,
    machine: Machine | None = None,
    tolerance: float = 0.02,
    unbuffered: Trace | None = None,
) -> tuple[list[Predicted], int]:
    """:func:`predict` over worker counts 1, 2, 3, 4, 6, 8, 12, 16, ... (and
    ``default``) up to ``most``, as far as more of them are predicted to gain:
    past the default, it stops once two counts in a row raise the best throughput
    predicted by less than ``tolerance``. Returns the rows and the most workers
    it considered.

    >>> from queuetune.tune.tuner import worker_choices
    >>> worker_choices(5, 40)
    [1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 40]
    """
    model = _fitted(trace, unbuffered)
    if model is None:
        return [], 0
    rows: list[Predicted] = []
    best, flat, considered = 0.0, 0, 0
    for count in counts_up_to(most, default):
        found = _rows(model, framework, count, max_depth, seed, machine)
        rows.extend(found)
        considered = count
        top = max((p.throughput for p in found), default=0.0)
        flat = flat + 1 if top <= (1 + tolerance) * best else 0
        best = max(best, top)
        if count >= default and flat >= 2:
            break
    return rows, considered


def counts_up_to(most: int, default: int | None = None) -> list[int]:
    """Worker counts 1, 2, 3, 4, 6, 8, 12, ... up to ``most``, with ``default``, in order.

    >>> counts_up_to(10, default=5)
    [1, 2, 3, 4, 5, 6, 8, 10]
    """
    counts, power = [] if default is None else [default], 1
    while power <= most:
        counts.append(power)
        if power >= 2 and power * 3 // 2 <= most:
            counts.append(power * 3 // 2)
        power *= 2
    if most not in counts:
        counts.append(most)
    return sorted(set(counts))


def _fitted(trace: Trace, unbuffered: Trace | None) -> PipelineModel | None:
    try:
        rules = rules_of(trace.meta)
        return fit(trace, rules) if unbuffered is None else fit_unbuffered(unbuffered, trace, rules)
    except ValueError:
        return None


def _rows(
    model: PipelineModel,
    framework: Framework,
    count: int | None,
    max_depth: int,
    seed: int,
    machine: Machine | None,
) -> list[Predicted]:
    # More workers than max_depth are considered at the least depth they reach.
    depths = reachable_depths(framework, count, max(max_depth, count or 0))
    if not depths:
        return []
    rows = []
    for p in predict_curve(model, depths=depths, workers=[count or 1], seed=seed):
        settings = framework.settings_for(p.depth, count)
        assert settings is not None  # a reachable depth has settings
        fields_of = {f.name: getattr(p, f.name) for f in fields(Prediction)}
        limit = None
        if machine is not None:
            queue_alone = fields_of["throughput"]
            fields_of["throughput"] = machine.bound(queue_alone)
            if fields_of["throughput"] < (1 - BOUND_NAMED) * queue_alone:
                limit = "cores"
        peak = p.peak_built_batches * model.batch_bytes
        rows.append(Predicted(**fields_of, settings=settings, peak_built_bytes=peak, limit=limit))
    return rows
